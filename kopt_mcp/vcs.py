"""Git operations on the session's dedicated worktree (GitPython).

The session owns two worktrees of the user's repository, both under `<repo>/.kopt/worktrees/`:
`<tag>` on branch `kernel-opt/<tag>` (where the agent edits candidates) and `<tag>-best`, detached
at BEST_COMMIT (where BEST is measured for the interleaved comparison). `.kopt/` is excluded through
the repository's `info/exclude`, so the worktrees never enter a diff or a commit; the session's
files live outside them, under the common git dir (`kopt_mcp.paths.session_dir`).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import NamedTuple

import git

EXCLUDE_LINE = ".kopt/"


class VcsError(RuntimeError):
    """A git operation was refused or failed; the message says what to do next."""


def open_repo(path: Path) -> git.Repo:
    """The git repository at `path`. Raises VcsError if it is none or has no commit yet."""
    try:
        repo = git.Repo(path)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as e:
        raise VcsError(f"{path} is not a git repository: run `git init && git commit` there first") from e
    if not repo.head.is_valid():
        raise VcsError(f"{path} has no commit yet: commit the kernel code first, the session starts from HEAD")
    return repo


def ensure_excluded(repo: git.Repo) -> None:
    """Add `.kopt/` to the repository's info/exclude (shared by all its worktrees) if missing."""
    exclude = Path(repo.git.rev_parse("--git-common-dir"))
    if not exclude.is_absolute():
        exclude = Path(repo.working_tree_dir) / exclude
    exclude = exclude / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    text = exclude.read_text() if exclude.exists() else ""
    if EXCLUDE_LINE not in text.split():
        exclude.write_text(text + ("" if text.endswith("\n") or not text else "\n") + EXCLUDE_LINE + "\n")


def _worktrees(repo: git.Repo) -> dict[str, str]:
    """worktree path -> branch ref (or 'detached')."""
    out: dict[str, str] = {}
    path = None
    for line in repo.git.worktree("list", "--porcelain").splitlines():
        if line.startswith("worktree "):
            path = str(Path(line[9:]).resolve())
            out[path] = "detached"
        elif line.startswith("branch ") and path:
            out[path] = line[7:]
    return out


def create_workspace(repo: git.Repo, path: Path, branch: str) -> git.Repo:
    """Create the dedicated worktree at `path` on a new `branch` made from HEAD.

    Raises VcsError if the branch already exists or the path is taken (a workspace that is not
    this session's own is never reset or reused).
    """
    if branch in [h.name for h in repo.heads]:
        raise VcsError(
            f"branch {branch} already exists but holds no session state: pass another --tag, or delete "
            f"the branch yourself (`git branch -D {branch}`) if it is an abandoned session"
        )
    if path.exists():
        raise VcsError(f"{path} already exists and is not this session's workspace: pass another --tag")
    path.parent.mkdir(parents=True, exist_ok=True)
    repo.git.worktree("add", "-b", branch, str(path), "HEAD")
    return git.Repo(path)


def open_workspace(repo: git.Repo, path: Path, branch: str) -> git.Repo:
    """Open an existing dedicated worktree, checking it is on `branch`. Raises VcsError otherwise."""
    wts = _worktrees(repo)
    ref = wts.get(str(path.resolve()))
    if ref is None:
        raise VcsError(f"{path} is not a worktree of {repo.working_tree_dir}: refusing to use it")
    if ref != f"refs/heads/{branch}":
        raise VcsError(
            f"the workspace {path} is on {ref}, not on {branch}: HEAD was moved behind the server's back; "
            f"check it out again with `git -C {path} checkout {branch}`"
        )
    return git.Repo(path)


def ensure_best_worktree(repo: git.Repo, path: Path, commit: str) -> git.Repo:
    """The detached worktree at `path` where BEST is measured, checked out at `commit`."""
    if str(path.resolve()) not in _worktrees(repo):
        if path.exists():
            raise VcsError(f"{path} exists but is not a worktree: move it away")
        path.parent.mkdir(parents=True, exist_ok=True)
        repo.git.worktree("add", "--detach", str(path), commit)
    best = git.Repo(path)
    if best.head.commit.hexsha != commit or best.is_dirty(untracked_files=True):
        best.git.checkout("--detach", "--force", commit)
        best.git.clean("-fd")
    return best


def head_sha(ws: git.Repo) -> str:
    """The commit the workspace's HEAD points at (40 hex)."""
    return ws.head.commit.hexsha


# Build outputs never enter an archived patch, a snapshot or a commit unless BEST_COMMIT already
# tracks them. `*.ptx` is deliberately NOT here: PTX is a text assembly language that kernel authors
# write by hand (inline or in .ptx files), so it is source; a generated .ptx that is neither ignored
# nor tracked shows up in the diff as text, where a reviewer sees it.
ARTIFACT_SUFFIXES = (".o", ".obj", ".so", ".a", ".dylib", ".pyc", ".pyo", ".cubin", ".fatbin", ".hsaco")
ARTIFACT_DIRS = ("build", "__pycache__", ".cache")
ARTIFACT_DIR_SUFFIXES = (".egg-info",)


def is_artifact(path: str) -> bool:
    """True for a build output: a file ending in ARTIFACT_SUFFIXES, or anything under a folder
    named in ARTIFACT_DIRS or ending in ARTIFACT_DIR_SUFFIXES (at any depth)."""
    parts = path.split("/")
    if any(d in ARTIFACT_DIRS or d.endswith(ARTIFACT_DIR_SUFFIXES) for d in parts[:-1]):
        return True
    return parts[-1].endswith(ARTIFACT_SUFFIXES)


class Snapshot(NamedTuple):
    """The workspace as a git tree object, and the new files left out of it (artifacts, binaries)."""

    tree: str
    left_out: list[str]


def snapshot(ws: git.Repo, base: str = "HEAD") -> Snapshot:
    """The exact working tree (tracked + untracked, minus ignored) as a git tree object, leaving out
    files that `base` does not track and that are build artifacts (`is_artifact`) or binary (git
    numstat `-`). Files `base` tracks are always included, binary or not.

    Uses a temporary index so the real index is untouched; identical trees give identical hashes.
    """
    fd, index = tempfile.mkstemp(prefix="kopt-index-")
    os.close(fd)
    os.unlink(index)
    try:
        env = {"GIT_INDEX_FILE": index}
        ws.git.read_tree("HEAD", env=env)
        ws.git.add("-A", env=env)
        out = ws.git.diff("--cached", "--numstat", "--no-renames", "--diff-filter=A", "-z", base, env=env)
        drop = []
        for rec in out.split("\0"):
            if not rec:
                continue
            added, _deleted, path = rec.split("\t", 2)
            if added == "-" or is_artifact(path):
                drop.append(path)
        for i in range(0, len(drop), 500):
            ws.git.rm("--cached", "-q", "--", *drop[i:i + 500], env=env)
        return Snapshot(ws.git.write_tree(env=env), sorted(drop))
    finally:
        if os.path.exists(index):
            os.unlink(index)


def snapshot_tree(ws: git.Repo, base: str = "HEAD") -> str:
    """`snapshot(ws, base).tree`."""
    return snapshot(ws, base).tree


def diff_tree(ws: git.Repo, base: str, tree: str) -> tuple[str, list[str]]:
    """(binary-safe patch text, changed paths) from commit `base` to tree object `tree`."""
    patch = ws.git.diff(base, tree, "--binary", "--no-color", "--no-ext-diff")
    names = ws.git.diff(base, tree, "--name-only", "--no-renames", "-z").split("\0")
    return (patch + "\n" if patch else ""), [n for n in names if n]


def diff_against(ws: git.Repo, base: str) -> tuple[str, list[str]]:
    """The workspace's full change against commit `base`: (binary-safe patch text, changed paths).

    Untracked files are included (as additions); ignored files, and new artifacts / binaries that
    `base` does not track (see `snapshot`), are not.
    """
    return diff_tree(ws, base, snapshot(ws, base).tree)


def reset_to(ws: git.Repo, commit: str) -> None:
    """Hard-reset the workspace to `commit` and remove untracked (not ignored) files.

    Callers archive the diff first (nothing is lost).
    """
    ws.git.reset("--hard", commit)
    ws.git.clean("-fd")


def restore_tree(ws: git.Repo, tree: str) -> None:
    """Make the working tree exactly the git tree object `tree` (from snapshot_tree), index = HEAD.

    Files of `tree` come back (untracked ones stay untracked); files not in it are removed.
    """
    ws.git.read_tree("-u", "--reset", tree)
    ws.git.clean("-fd")
    ws.git.reset("-q")


def commit_all(ws: git.Repo, message: str, base: str | None = None) -> str:
    """Commit the workspace as `snapshot(ws, base)` (artifacts and new binaries left out) with
    parent `base` (default HEAD) and move the branch to it in one atomic ref update; the index is
    then reset to the new commit. Returns the new sha.

    A crash leaves the branch at its old commit or at the complete new one, never half a commit,
    and never staged leftovers. With `base` given and HEAD moved past it (commits made in the
    workspace behind the server's back), those commits drop off the branch: their content is in
    the new commit, whose parent is `base`.
    """
    parent = base or ws.head.commit.hexsha
    tree = snapshot(ws, parent).tree
    sha = ws.git.commit_tree(tree, "-p", parent, "-m", message, env=_identity(ws)).strip()
    ref = ws.git.symbolic_ref("-q", "HEAD").strip()
    ws.git.update_ref("-m", "kopt-mcp: commit", ref, sha)
    ws.git.reset("-q")
    return sha


def commit_paths(ws: git.Repo, paths: list[str], message: str) -> str:
    """Commit only `paths` (e.g. performance.md), leaving any other edits in the workspace as they
    are; returns the new sha. Raises git.GitCommandError when there is nothing to commit."""
    ws.git.add("--", *paths)
    ws.git.commit("-m", message, "--no-verify", "--", *paths, env=_identity(ws))
    return ws.head.commit.hexsha


def _identity(ws: git.Repo) -> dict[str, str]:
    """Commit identity env: the user's git identity where configured, else `kopt-mcp`."""
    try:
        ws.git.config("user.email")
        return {}
    except git.GitCommandError:
        return {"GIT_AUTHOR_NAME": "kopt-mcp", "GIT_AUTHOR_EMAIL": "kopt-mcp@localhost",
                "GIT_COMMITTER_NAME": "kopt-mcp", "GIT_COMMITTER_EMAIL": "kopt-mcp@localhost"}
