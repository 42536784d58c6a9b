"""The state folder checked around every run (issue 26): what the benchmark may not change, and its
repair. Where the sandbox (kopt_mcp/bench/sandbox.py) works, a run cannot reach the session's
files; where it does not, a run of the candidate's code could rewrite them. So each run is bracketed:
`seal` before it takes state.json and ledger.jsonl as bytes, the archived patches as sha256 (the
attempts manifest) and the session's frozen attempt refs (`refs/kopt/<tag>/attempts/...`) as
commit ids; `restore` after it compares, puts back every file and ref that changed (a patch from
its frozen snapshot: the diff of that commit against its parent, BEST_COMMIT when it was archived),
removes patches the run added, and says what it did. `guarded` does both around one run and
raises Tampered when anything had changed. `ensure_patch` and `restore_lost_patches` keep every
patch a verdict or the ledger names on disk (after a restart too)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import git

from kopt_mcp import vcs
from kopt_mcp.errors import Tampered
from kopt_mcp.ledger import Store, atomic_write
from kopt_mcp.rules.protect import FileChange, describe

FILES = ("state.json", "ledger.jsonl")
_PATCH = re.compile(r"^(\d{4})-.+\.patch$")


@dataclass(frozen=True)
class Seal:
    """The state folder before a run: `files` (name -> bytes; absent: no such file), `patches`
    (attempts/<name> -> sha256 hex) and `refs` (the session's attempt refs -> commit id)."""

    files: dict[str, bytes]
    patches: dict[str, str]
    refs: dict[str, str] = field(default_factory=dict)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _patches(store: Store) -> dict[str, str]:
    if not store.attempts.is_dir():
        return {}
    return {f"attempts/{p.name}": _sha(p.read_bytes()) for p in sorted(store.attempts.glob("*.patch"))}


def _refs(ws: git.Repo, prefix: str) -> dict[str, str]:
    """The attempt refs under `prefix` (another slot's, `<prefix>/slots/...`, left out)."""
    out = ws.git.for_each_ref("--format=%(refname) %(objectname)", f"{prefix}/attempts/")
    return dict(line.split(" ", 1) for line in out.splitlines() if line)


def seal(store: Store, ws: git.Repo, prefix: str) -> Seal:
    """The state folder of `store` and the attempt refs under `prefix`, as they are now."""
    files = {n: (store.root / n).read_bytes() for n in FILES if (store.root / n).is_file()}
    return Seal(files=files, patches=_patches(store), refs=_refs(ws, prefix))


def _changes(store: Store, ws: git.Repo, prefix: str, before: Seal) -> list[FileChange]:
    after = seal(store, ws, prefix)
    out = []
    for old, new in ((before.files, after.files), (before.patches, after.patches), (before.refs, after.refs)):
        for name in sorted(set(old) | set(new)):
            if name not in new:
                out.append(FileChange("deleted", name))
            elif name not in old:
                if not name.startswith("refs/"):  # a new ref is another slot's doing, harmless
                    out.append(FileChange("added", name))
            elif old[name] != new[name]:
                out.append(FileChange("rewrote", name))
    return out


def frozen_patch(ws: git.Repo, commit: str) -> str:
    """The patch of a frozen attempt snapshot: the diff of `commit` against its parent (as archived)."""
    c = ws.commit(commit)
    return vcs.diff_tree(ws, c.parents[0].hexsha, c.tree.hexsha)[0]


def _snapshot_for(ws: git.Repo, prefix: str, n: int, refs: dict[str, str], sha: str | None) -> str | None:
    """The patch text of attempt `n` from its frozen snapshots (the plain one, then -formatted,
    -reapplied) whose sha256 is `sha` (None: the plain one, whatever its hash); None when none fits."""
    for suffix in ("", "-formatted", "-reapplied"):
        ref = f"{prefix}/attempts/{n:04d}{suffix}"
        commit = refs.get(ref) or (_refs(ws, prefix).get(ref))
        if commit is None:
            continue
        try:
            text = frozen_patch(ws, commit)
        except (git.GitCommandError, ValueError, IndexError):
            continue
        if sha is None or _sha(text.encode("utf-8")) == sha:
            return text
    return None


def restore(store: Store, ws: git.Repo, prefix: str, before: Seal) -> tuple[list[FileChange], list[str]]:
    """Compare the state folder with `before` and put it back: (what had changed, what could not be
    restored exactly). Files from their bytes, refs to their commits, patches from the frozen
    snapshot whose diff has the archived hash (else the tested one's diff, said so; none: lost),
    patches the run added removed."""
    changes, lost = _changes(store, ws, prefix, before), []
    for c in changes:
        if c.path in before.files:
            atomic_write(store.root / c.path, before.files[c.path].decode("utf-8"))
        elif c.path.startswith("refs/"):
            ws.git.update_ref(c.path, before.refs[c.path])
        elif c.kind == "added":
            (store.root / c.path).unlink(missing_ok=True)
        else:
            m = _PATCH.match(Path(c.path).name)
            n = int(m.group(1)) if m else 0
            text = _snapshot_for(ws, prefix, n, before.refs, before.patches[c.path]) if m else None
            if text is None and m and (text := _snapshot_for(ws, prefix, n, before.refs, None)) is not None:
                lost.append(f"{c.path} (put back as its tested snapshot's diff, not byte for byte)")
            if text is None:
                lost.append(c.path)
            else:
                atomic_write(store.root / c.path, text)
    return changes, lost


@contextmanager
def guarded(store: Store, ws: git.Repo, prefix: str, problems: list[str], who: str = "the run") -> Iterator[None]:
    """Seal before the body (one run), restore after it. A change is logged to the ledger
    (`state_restored`) and listed in `problems` at once; then Tampered is raised naming it, unless
    the body raised already (its error goes on)."""
    before = seal(store, ws, prefix)
    failed = False
    try:
        yield
    except BaseException:
        failed = True
        raise
    finally:
        changes, lost = restore(store, ws, prefix, before)
        if changes:
            what = describe(changes, who)
            note = (f"{what} in the session's state folder {store.root}: restored at once from the copy taken "
                    "before the run and the frozen attempt snapshots"
                    + (f"; not exactly: {', '.join(lost)}" if lost else ""))
            problems.append(note)
            store.log("state_restored", changes=[c._asdict() for c in changes], lost=lost)
            if not failed:
                raise Tampered(note + "; a run may not write the session's files")


def ensure_patch(store: Store, ws: git.Repo, prefix: str, n: int, path: Path) -> Path:
    """`path` (attempt `n`'s archived patch), restored from its frozen snapshot when it is missing,
    so that no verdict names a missing file. Returns `path`."""
    if not path.exists():
        text = _snapshot_for(ws, prefix, n, {}, None)
        if text is not None:
            atomic_write(path, text)
    return path


def restore_lost_patches(store: Store, ws: git.Repo, prefix: str) -> list[str]:
    """After a restart: every patch an `attempt` record of the ledger names that is missing from
    the attempts folder, restored from its frozen snapshot. Returns one problem line per patch
    (restored, or lost where no snapshot exists)."""
    out = []
    for rec in store.ledger():
        name = Path(rec.get("patch") or "").name
        if rec.get("event") != "attempt" or not _PATCH.match(name) or (store.attempts / name).exists():
            continue
        ensure_patch(store, ws, prefix, int(name[:4]), store.attempts / name)
        done = (store.attempts / name).exists()
        out.append(f"the archived patch {name} was missing: " + (
            "restored from its frozen snapshot" if done else "no frozen snapshot is left to restore it from"))
    return out
