"""Build artifacts and new binary files never enter an archived patch or a commit; commits made in
the workspace behind the server's back are judged, archived and dropped (real git repositories)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import git
import pytest

from kopt_mcp import vcs
from kopt_mcp.errors import RefereeError
from kopt_mcp.testing.toy import set_kernel

ID = ["-c", "user.name=T", "-c", "user.email=t@l"]
ELF = b"\x7fELF\x02\x01\x01\x00" + bytes(range(256))


def sh(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *ID, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


@pytest.fixture
def repo(tmp_path) -> git.Repo:
    root = tmp_path / "r"
    root.mkdir()
    sh(root, "init", "-q", "-b", "main")
    (root / "kernel.cu").write_text("__global__ void k() {}\n")
    (root / "prebuilt.so").write_bytes(ELF)  # a binary the project tracks on purpose
    sh(root, "add", "-A")
    sh(root, "commit", "-q", "-m", "init")
    return git.Repo(root)


def _drop_artifacts(root: Path) -> None:
    for rel, data in {"kernel.o": ELF, "lib/ext.so": ELF, "k.cubin": ELF, "k.fatbin": ELF, "k.hsaco": ELF,
                      "pkg/mod.cpython-311.pyc": ELF, "build/CMakeCache.txt": b"text in build/\n",
                      "src/__pycache__/x.txt": b"cache\n", ".cache/triton/x.json": b"{}\n",
                      "mypkg.egg-info/PKG-INFO": b"Name: x\n", "weights.npy": b"\x93NUMPY\x00\x01\xff\xfe"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


LEFT_OUT = [".cache/triton/x.json", "build/CMakeCache.txt", "k.cubin", "k.fatbin", "k.hsaco", "kernel.o",
            "lib/ext.so", "mypkg.egg-info/PKG-INFO", "pkg/mod.cpython-311.pyc", "src/__pycache__/x.txt",
            "weights.npy"]


def test_artifacts_and_new_binaries_stay_out_of_snapshot_diff_and_commit(repo):
    root = Path(repo.working_tree_dir)
    base = vcs.head_sha(repo)
    _drop_artifacts(root)
    (root / "kernel.cu").write_text("__global__ void k() { /* faster */ }\n")
    (root / "kernel.ptx").write_text(".version 8.0\n")  # PTX is text source: kept
    (root / "prebuilt.so").write_bytes(ELF[::-1])  # tracked at BEST: its change is kept
    snap = vcs.snapshot(repo, base)
    assert snap.left_out == LEFT_OUT
    patch, changed = vcs.diff_tree(repo, base, snap.tree)
    assert sorted(changed) == ["kernel.cu", "kernel.ptx", "prebuilt.so"]
    assert vcs.diff_against(repo, base) == (patch, changed)
    assert "GIT binary patch" in patch and "kernel.o" not in patch and "CMakeCache" not in patch
    sha = vcs.commit_all(repo, "keep", base=base)
    files = sh(root, "show", "--name-only", "--format=", sha).split()
    assert sorted(files) == ["kernel.cu", "kernel.ptx", "prebuilt.so"]
    assert sh(root, "diff", "--cached", "--name-only") == ""  # index = the new commit, nothing staged
    assert (root / "kernel.o").exists()  # left on disk, untracked


def test_is_artifact_patterns():
    for p in ("a.o", "x/y.so", "b.a", "m.pyc", "k.cubin", "k.fatbin", "k.hsaco", "build/x.cu", "a/build/b",
              "__pycache__/m.py", ".cache/x", "p.egg-info/x"):
        assert vcs.is_artifact(p), p
    for p in ("kernel.cu", "kernel.ptx", "builder.py", "build.py", "so.py", "cache/x.py", "x.optimized"):
        assert not vcs.is_artifact(p), p


def test_save_and_test_warns_and_never_archives_or_commits_artifacts(ref):
    ws = ref.where.workspace_path
    set_kernel(ws, {"1": 80.0, "2": 160.0})
    (ws / "libkernel.so").write_bytes(ELF)  # (kernel.so would shadow kernel.py on import)
    (ws / "build").mkdir()
    (ws / "build" / "k.o").write_bytes(ELF)
    (ws / "table.bin").write_bytes(b"\x00\x01\xff" * 10)
    v = ref.save_and_test("global", "faster, with build outputs lying around")
    assert v.verdict == "improved"
    warning = next(w for w in v.warnings if w.startswith("left out"))
    assert "build/k.o" in warning and "libkernel.so" in warning and "table.bin" in warning
    patch = Path(v.patch_path).read_text()
    assert "kernel.py" in patch and ".so" not in patch and "table.bin" not in patch
    c = ref.commit_improvement("faster")
    assert c.committed
    files = sh(ws, "show", "--name-only", "--format=", "HEAD").split()
    assert sorted(files) == ["kernel.py", "performance.md"]


def test_agent_commit_in_workspace_is_judged_archived_and_dropped_on_revert(ref):
    ws = ref.where.workspace_path
    best = ref.books.state.best.commit
    set_kernel(ws, {"1": 120.0, "2": 240.0})
    sh(ws, "commit", "-qam", "agent: try unrolling")
    agent = sh(ws, "rev-parse", "HEAD").strip()
    v = ref.save_and_test("global", "unrolled")
    assert v.verdict == "regressed" and v.reverted
    moved = next(w for w in v.warnings if "HEAD moved" in w)
    assert agent[:7] in moved and "agent: try unrolling" in moved
    assert sh(ws, "rev-parse", "HEAD").strip() == best  # the commit is off the branch
    assert agent not in sh(ws, "log", "--format=%H", "kernel-opt/t")
    assert '"1": 120.0' in Path(v.patch_path).read_text()  # ... but its diff is archived


def test_agent_commit_then_keep_makes_one_commit_on_top_of_best(ref):
    ws = ref.where.workspace_path
    best = ref.books.state.best.commit
    set_kernel(ws, {"1": 80.0, "2": 160.0})
    sh(ws, "commit", "-qam", "agent: faster")
    v = ref.save_and_test("global", "faster")
    assert v.verdict == "improved" and any("HEAD moved" in w for w in v.warnings)
    c = ref.commit_improvement("faster")
    assert c.committed
    assert sh(ws, "rev-parse", "HEAD^").strip() == best
    assert sh(ws, "status", "--porcelain") == ""


def test_workspace_switched_to_another_branch_is_refused_and_not_reset(ref):
    ws = ref.where.workspace_path
    sh(ws, "checkout", "-q", "-b", "elsewhere")
    set_kernel(ws, {"1": 80.0, "2": 160.0})
    with pytest.raises(RefereeError, match="not on kernel-opt/t"):
        ref.save_and_test("global", "x")
    with pytest.raises(RefereeError, match="not on kernel-opt/t"):
        ref.revert_to_best("x")
    assert '"1": 80.0' in (ws / "kernel.py").read_text()  # nothing reset on the other branch
    assert sh(ws, "branch", "--show-current").strip() == "elsewhere"
