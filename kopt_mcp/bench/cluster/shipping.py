"""Shipping snapshots to a node and run folders back: pure helpers (git and files, no Ray).

A snapshot travels as a git pack: BEST's tree as a full pack of its objects, put into Ray's object
store once and reused; a candidate tree as a thin pack of only the objects it does not share with
`base` (BEST's tree), whose deltas may refer to base's objects: the binary diff. The node adds packs
to a scratch repository (`NodeRepo`) and checks that the tree is complete there. Objects are
content-addressed, so the node runs exactly the frozen snapshot the referee named (a pack that
does not produce that tree id is refused), and `vcs.export` / `vcs.run_changes` work there as
they do locally: the run's changes are judged against the shipped snapshot's own blob hashes.

Measured on the toy repository (4 files, loaded 2-core machine): BEST's full pack 1107 bytes, a
one-file candidate's thin pack 225 bytes; packing both about 26 ms, adding both on the node about 62 ms.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

import git
from pydantic import BaseModel

from kopt_mcp.errors import ShipError

#: environment variables that bind a device: the node's lease sets them, never the server's
BINDING_VARS = frozenset({"CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"})

#: the most bytes of run-folder files one run sends back (logs are bounded by the runner already)
MAX_RETURN_BYTES = 512 << 20


def pack(ws: git.Repo, tree: str, base: str | None = None) -> bytes:
    """The git pack (bytes) that carries tree object `tree` to a repository holding `base`.

    `base` None (or equal to `tree`): every object of `tree` (a full pack). Otherwise a thin pack of
    the objects of `tree` not reachable from `base`, deltas allowed against base's objects (apply
    with `NodeRepo.add`, which fixes the thin pack up). Raises ShipError when git cannot pack (a
    tree that is not in `ws`)."""
    revs = f"{tree}\n" + (f"^{base}\n" if base and base != tree else "")
    args = ["git", "pack-objects", "--revs", "--stdout", "-q"] + (["--thin"] if base and base != tree else [])
    with tempfile.TemporaryFile() as stdin:
        stdin.write(revs.encode())
        stdin.seek(0)
        try:
            # a pack ends in its SHA-1: 1 in 256 ends in byte 0x0a, which GitPython strips by default
            return ws.git.execute(args, istream=stdin, stdout_as_string=False, strip_newline_in_stdout=False)
        except git.GitCommandError as e:
            raise ShipError(f"could not pack tree {tree[:12]}" + (f" against {base[:12]}" if base else "")
                            + f" in {ws.git_dir}: {str(e.stderr).strip()[-300:]}") from e


class NodeRepo:
    """A scratch git repository on a node that holds the snapshots shipped to it.

    Made (`git init`) at `path` (its folder name is the user's repository name: checkouts are
    named like it). `repo` is the GitPython handle that `referee.measure.measure_snapshot` takes
    as `ws`."""

    def __init__(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.repo = git.Repo.init(path)

    def has(self, tree: str) -> bool:
        """True when tree `tree` and every object under it are in this repository."""
        try:
            self.repo.git.rev_list("--objects", "--quiet", tree)
            return True
        except git.GitCommandError:
            return False

    def add(self, data: bytes, tree: str) -> None:
        """Add the pack `data` (from `pack`) and check that it completes tree `tree`.

        Raises ShipError when the pack is damaged or leaves `tree` incomplete (its base is not
        here: ship the full snapshot first)."""
        with tempfile.TemporaryFile() as stdin:
            stdin.write(data)
            stdin.seek(0)
            try:
                self.repo.git.execute(["git", "index-pack", "--stdin", "--fix-thin"], istream=stdin)
            except git.GitCommandError as e:
                raise ShipError(f"the pack for tree {tree[:12]} ({len(data)} bytes) could not be added on the node: "
                                f"{str(e.stderr).strip()[-300:]} (is its base snapshot there? ship the full tree)") from e
        if not self.has(tree):
            raise ShipError(f"the shipped pack does not complete tree {tree[:12]} on the node: objects are missing "
                            "(ship the full snapshot instead of a diff)")


    def verify(self, tree: str) -> int:
        """Re-hash every object reachable from `tree` (trees and blobs) and check it against its
        name: git trusts object files by name, so one rewritten on the node (by a run that found the
        store) would otherwise make the next checkout of that snapshot differ from what the referee
        named. Returns the bytes hashed. Raises ShipError naming the object and its path."""
        total = 0
        for line in self.repo.git.rev_list("--objects", tree).splitlines():
            oid, _, path = line.partition(" ")
            try:
                stream = self.repo.odb.stream(bytes.fromhex(oid))
                data = stream.read()
            except Exception as e:
                raise ShipError(f"snapshot {tree[:12]} on this node: object {oid[:12]} ({path or 'root'}) cannot be "
                                f"read: {e}") from e
            h = hashlib.new("sha1" if len(oid) == 40 else "sha256")
            h.update(stream.type + b" " + str(len(data)).encode() + b"\0" + data)
            if h.hexdigest() != oid:
                raise ShipError(f"snapshot {tree[:12]} on this node is damaged: object {oid[:12]} ({path or 'root'}) "
                                "no longer hashes to its name (rewritten on the node, e.g. by a run)")
            total += len(data)
        return total


def collect(run_dir: Path, limit: int = MAX_RETURN_BYTES) -> dict[str, bytes]:
    """Every regular file under `run_dir` as {relative posix path: bytes} (links are skipped).
    Raises ShipError when they add up to more than `limit` bytes (name the biggest)."""
    out: dict[str, bytes] = {}
    total = 0
    for d, _dirs, files in os.walk(run_dir):
        for name in files:
            p = Path(d) / name
            if p.is_symlink() or not p.is_file():
                continue
            total += p.stat().st_size
            if total > limit:
                raise ShipError(f"the run folder {run_dir} holds more than {limit >> 20} MiB (at {p}): too much to "
                                "send back; make the benchmark or profiler write less there")
            out[p.relative_to(run_dir).as_posix()] = p.read_bytes()
    return out


def restore(files: dict[str, bytes], run_dir: Path) -> list[Path]:
    """Write `files` (from `collect`) under `run_dir`; returns the paths written. Raises ShipError for
    a name that would leave `run_dir` (absolute, or with `..`)."""
    written = []
    for rel, data in files.items():
        parts = PurePosixPath(rel).parts
        if not parts or PurePosixPath(rel).is_absolute() or ".." in parts:
            raise ShipError(f"refused to write {rel!r} outside the run folder {run_dir}")
        dest = run_dir.joinpath(*parts)
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        written.append(dest)
    return written


def relocate(value: Any, old: str, new: str) -> Any:
    """`value` (a pydantic model, list, tuple, dict or str, nested) with every string that is the path
    `old` or lies under it rewritten to lie under `new` instead (the node's run folder -> the local
    one). Models are copied (fields excluded from dumps, such as a trace's launch groups, are kept)."""
    if isinstance(value, str):
        if value == old or value.startswith(old.rstrip("/") + "/"):
            return new + value[len(old):]
        return value
    if isinstance(value, BaseModel):
        return value.model_copy(update={k: relocate(getattr(value, k), old, new) for k in type(value).model_fields})
    if isinstance(value, list):
        return [relocate(v, old, new) for v in value]
    if isinstance(value, tuple):
        return tuple(relocate(v, old, new) for v in value)
    if isinstance(value, dict):
        return {k: relocate(v, old, new) for k, v in value.items()}
    return value


def node_env(env: dict[str, str], binding: dict[str, str], cache_root: Path) -> dict[str, str]:
    """The environment of a run on the node, from the referee's `env`: its device binding dropped
    (the node's lease `binding` is set instead), and every absolute path (the server's JIT cache
    folders) mapped to a folder of the node's `cache_root` named after it, so one repository's
    caches stay warm on that node across leases and never land in a server-side path there."""
    out = {}
    for k, v in env.items():
        if k in BINDING_VARS:
            continue
        if os.path.isabs(v):
            v = str(cache_root / f"{hashlib.sha256(v.encode()).hexdigest()[:12]}-{Path(v).name or 'root'}")
        out[k] = v
    return {**out, **binding}
