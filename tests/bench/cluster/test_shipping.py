"""Snapshots shipped as git packs (full, and thin against BEST), run folders back, paths and env mapped."""

from __future__ import annotations

import subprocess
import tempfile

import pytest

from kopt_mcp import vcs
from kopt_mcp.bench.cluster.shipping import NodeRepo, collect, node_env, pack, relocate, restore
from kopt_mcp.bench.measure import Profiled
from kopt_mcp.errors import ShipError


def test_full_then_diff_rebuilds_the_candidate_exactly(toy, tmp_path):
    cand = toy.candidate({"1": 50.0, "2": 200.0})
    full, diff = pack(toy.ws, toy.best), pack(toy.ws, cand, toy.best)
    assert len(diff) < len(full)  # the diff leaves bench.py, kopt.toml, .gitignore behind
    node = NodeRepo(tmp_path / "node" / "repo")
    node.add(full, toy.best)
    node.add(diff, cand)
    assert node.has(toy.best) and node.has(cand)
    vcs.export(node.repo, cand, tmp_path / "out")
    assert '"1": 50.0' in (tmp_path / "out" / "kernel.py").read_text()
    assert (tmp_path / "out" / "bench.py").read_bytes() == (toy.path / "bench.py").read_bytes()


def test_a_pack_whose_last_byte_is_a_newline_ships_whole(toy, tmp_path):
    """A pack ends in its SHA-1, so about one pack in 256 ends in byte 0x0a. GitPython strips a
    trailing newline from a command's output by default: such a pack lost its last byte and the node
    refused it ("fatal: early EOF"), twice in CI (2026-11-24, cluster tests). Planted here: the first
    candidate whose raw thin pack ends in a newline."""
    for i in range(4000):
        cand = toy.candidate({"1": 50.0 + i / 1000, "2": 200.0})
        raw = subprocess.run(["git", "pack-objects", "--revs", "--stdout", "-q", "--thin"], cwd=toy.path,
                             input=f"{cand}\n^{toy.best}\n".encode(), capture_output=True, check=True).stdout
        if raw.endswith(b"\n"):
            break
    else:
        pytest.fail("no candidate in 4000 had a pack ending in a newline")
    assert pack(toy.ws, cand, toy.best) == raw
    node = NodeRepo(tmp_path / "node" / "repo")
    node.add(pack(toy.ws, toy.best), toy.best)
    node.add(pack(toy.ws, cand, toy.best), cand)
    assert node.has(cand)


def test_a_diff_without_its_base_is_refused(toy, tmp_path):
    cand = toy.candidate({"1": 50.0, "2": 200.0})
    node = NodeRepo(tmp_path / "node" / "repo")
    with pytest.raises(ShipError, match="ship the full"):
        node.add(pack(toy.ws, cand, toy.best), cand)
    assert not node.has(cand)


def test_a_pack_that_does_not_make_the_named_tree_is_refused(toy, tmp_path):
    # the node runs exactly the snapshot the referee named: BEST's objects cannot pass for a candidate
    cand = toy.candidate({"1": 50.0, "2": 200.0})
    node = NodeRepo(tmp_path / "node" / "repo")
    with pytest.raises(ShipError, match=cand[:12]):
        node.add(pack(toy.ws, toy.best), cand)


def test_pack_of_an_unknown_tree_says_which(toy):
    with pytest.raises(ShipError, match="could not pack tree 0123456789ab"):
        pack(toy.ws, "0123456789abcdef0123456789abcdef01234567")


def test_collect_restore_and_relocate_move_a_run_folder(tmp_path):
    remote = tmp_path / "node" / "run-x"
    (remote / "trace").mkdir(parents=True)
    (remote / "profile.log").write_text("log\n")
    (remote / "trace" / "k.json").write_bytes(b"\x00\x01")
    files = collect(remote)
    assert files == {"profile.log": b"log\n", "trace/k.json": b"\x00\x01"}
    local = tmp_path / "local" / "runs" / "3"
    restore(files, local)
    assert (local / "trace" / "k.json").read_bytes() == b"\x00\x01"
    p = Profiled(trace=None, error=f"see {remote}/profile.log", log_path=str(remote / "profile.log"))
    moved = relocate(p, str(remote), str(local))
    assert moved.log_path == str(local / "profile.log")
    assert moved.error == p.error  # only whole paths move, not text that mentions one
    assert relocate([str(remote) + "-other"], str(remote), str(local)) == [str(remote) + "-other"]


def test_restore_refuses_names_outside_the_run_folder(tmp_path):
    for bad in ("../x", "/etc/x", "a/../../x"):
        with pytest.raises(ShipError, match="outside the run folder"):
            restore({bad: b""}, tmp_path / "run")


def test_collect_refuses_more_than_the_limit(tmp_path):
    (tmp_path / "big.bin").write_bytes(b"x" * 2048)
    with pytest.raises(ShipError, match="too much to send back"):
        collect(tmp_path, limit=1024)


def test_node_env_binds_the_node_gpu_and_keeps_caches_on_the_node(tmp_path):
    env = {"CUDA_VISIBLE_DEVICES": "5", "TRITON_CACHE_DIR": "/home/me/repo/.kopt/cache/triton", "OMP_NUM_THREADS": "4"}
    out = node_env(env, {"CUDA_VISIBLE_DEVICES": "1"}, tmp_path / "cache")
    assert out["CUDA_VISIBLE_DEVICES"] == "1" and out["OMP_NUM_THREADS"] == "4"
    assert out["TRITON_CACHE_DIR"].startswith(str(tmp_path / "cache")) and out["TRITON_CACHE_DIR"].endswith("-triton")
    again = node_env(env, {}, tmp_path / "cache")
    assert again["TRITON_CACHE_DIR"] == out["TRITON_CACHE_DIR"] and "CUDA_VISIBLE_DEVICES" not in again


def test_verify_catches_an_object_rewritten_in_the_node_store(toy, tmp_path):
    """The cheat: a run finds the node's snapshot store and rewrites the harness's blob there, so the
    next checkout of BEST (or of any tree sharing it) would run a different bench.py."""
    node = NodeRepo(tmp_path / "node" / "repo")
    blob = tamper_bench(node, toy, b"print('no work')\n")
    vcs.export(node.repo, toy.best, tmp_path / "out")
    assert (tmp_path / "out" / "bench.py").read_bytes() == b"print('no work')\n"  # git itself does not notice
    with pytest.raises(ShipError, match=f"object {blob[:12]} \\(bench.py\\) no longer hashes"):
        node.verify(toy.best)


def tamper_bench(node: NodeRepo, toy, fake: bytes) -> str:
    """Put BEST into `node` as loose objects, then rewrite bench.py's blob file with `fake`; its id."""
    import zlib

    data = pack(toy.ws, toy.best)
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.seek(0)
        node.repo.git.execute(["git", "unpack-objects", "-q"], istream=f)
    assert node.has(toy.best) and node.verify(toy.best) > 0
    blob = toy.ws.git.rev_parse(f"{toy.best}:bench.py")
    loose = node.path / ".git" / "objects" / blob[:2] / blob[2:]
    loose.chmod(0o644)
    loose.write_bytes(zlib.compress(b"blob %d\0" % len(fake) + fake))
    return blob
