"""Git operations on the session's dedicated worktree (GitPython).

The session owns two worktrees of the user's repository, both under `<repo>/.kopt/worktrees/`:
`<tag>` on branch `kernel-opt/<tag>` (where the agent edits candidates) and `<tag>-best`, detached
at BEST_COMMIT (kept for recovery; nothing is measured there any more). `.kopt/` is excluded through
the repository's `info/exclude`, so the worktrees never enter a diff or a commit; the session's
files live outside them, under the common git dir (`kopt_mcp.paths.session_dir`).

Snapshot, run, verify, commit the snapshot: a candidate is frozen as a tree (`snapshot`) and a commit
on a hidden ref (`freeze`) before anything runs. Every run executes in a disposable checkout of its
snapshot made by `export`: a plain copy of the tree's files (a temporary index, then
`checkout-index --prefix`), with no `.git` inside, outside the workspace and the repository, so
nothing the run does can reach the repository through a relative path or git discovery. After the
run, `run_changes` compares the checkout with its snapshot through a fresh temporary index (every
file is re-hashed, nothing trusts timestamps; nothing is written to the object store). Commits are
built from a snapshot tree plus server-written files (`commit_snapshot`), never from a tree left
after a run.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

import git

from kopt_mcp.errors import VcsError
from kopt_mcp.rules.protect import FileChange

EXCLUDE_LINE = ".kopt/"


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


def has_branch(repo: git.Repo, name: str) -> bool:
    """True if `repo` has the local branch `name` (e.g. `kernel-opt/<tag>`, without `refs/heads/`).
    Tags, remote-tracking branches and other refs of that name do not count."""
    return name in {h.name for h in repo.heads}


def create_workspace(repo: git.Repo, path: Path, branch: str) -> git.Repo:
    """Create the dedicated worktree at `path` on a new `branch` made from HEAD.

    Raises VcsError if the branch already exists or the path is taken (a workspace that is not
    this session's own is never reset or reused).
    """
    if has_branch(repo, branch):
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


def snapshot(ws: git.Repo, base: str = "HEAD", keep_from_base: Iterable[str] = ()) -> Snapshot:
    """The exact working tree (tracked + untracked, minus ignored) as a git tree object, leaving out
    files that `base` does not track and that are build artifacts (`is_artifact`) or binary (git
    numstat `-`). Files `base` tracks are always included, binary or not. Paths in
    `keep_from_base` (the benchmark's own outputs) are taken as they are in `base` (absent there:
    left out), whatever the workspace holds.

    Uses a temporary index so the real index is untouched; identical trees give identical hashes.
    """
    keep = sorted(set(keep_from_base))
    with temp_index() as env:
        ws.git.read_tree("HEAD", env=env)
        ws.git.add("-A", env=env)
        if keep:
            ws.git.reset("-q", base, "--", *keep, env=env)
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


class temp_index:
    """Context manager: env {GIT_INDEX_FILE: a fresh path} for git commands, removed afterwards."""

    def __enter__(self) -> dict[str, str]:
        fd, self.path = tempfile.mkstemp(prefix="kopt-index-")
        os.close(fd)
        os.unlink(self.path)  # git creates it; an empty file is no valid index
        return {"GIT_INDEX_FILE": self.path}

    def __exit__(self, *exc) -> None:
        for p in (self.path, self.path + ".lock"):
            if os.path.exists(p):
                os.unlink(p)


def tree_of(ws: git.Repo, commit: str) -> str:
    """The tree object id (40 hex) of `commit`."""
    return ws.git.rev_parse(f"{commit}^{{tree}}").strip()


def freeze(ws: git.Repo, tree: str, parent: str, ref: str, message: str) -> str:
    """Record tree object `tree` as a commit with parent `parent` on the hidden ref `ref` (e.g.
    `refs/kopt/<tag>/attempts/0007`), so the exact tested tree stays reachable (no gc, no later
    edit can change it). Returns the commit's sha. Raises git.GitCommandError on a bad tree/ref."""
    sha = ws.git.commit_tree(tree, "-p", parent, "-m", message, env=_identity(ws)).strip()
    ws.git.update_ref("-m", "kopt-mcp: freeze", ref, sha)
    return sha


def symlinks(ws: git.Repo, tree: str) -> dict[str, str]:
    """Every symlink of tree object `tree`: repo path -> its target text."""
    out = {}
    for rec in ws.git.ls_tree("-r", "-z", tree).split("\0"):
        if rec.startswith("120000 "):
            meta, path = rec.split("\t", 1)
            out[path] = ws.git.cat_file("blob", meta.split()[2], strip_newline_in_stdout=False)
    return out


def tree_files(ws: git.Repo, tree: str) -> list[str]:
    """Every path of tree object `tree` (repo-relative, posix; files, symlinks and submodules)."""
    return [p for p in ws.git.ls_tree("-r", "--name-only", "-z", tree).split("\0") if p]


def export(ws: git.Repo, tree: str, dest: Path) -> None:
    """Write the files of tree object `tree` into the new folder `dest` (symlinks and executable bits
    as recorded; no `.git`, no index). Raises FileExistsError if `dest` exists."""
    dest.mkdir(parents=True)
    with temp_index() as env:
        ws.git.read_tree(tree, env=env)
        ws.git.checkout_index("-a", "-f", f"--prefix={dest}/", env=env)


def run_changes(ws: git.Repo, tree: str, checkout: Path) -> list[FileChange]:
    """What differs in `checkout` (an `export` of `tree`) from `tree`: tracked files rewritten
    (content, mode or type) or deleted, and new files that the checkout's ignore rules do not ignore
    (build artifacts, see `is_artifact`, are not reported). Every file is re-hashed through a fresh
    temporary index (nothing trusts the run's timestamps); nothing is written to the object store.
    Files and folders the run made unreadable are made readable again first (the checkout is
    ours), so a chmod cannot hide a change or fail the check."""
    _make_readable(checkout)
    g = git.Git(str(checkout))
    with temp_index() as env:
        env = {**env, "GIT_DIR": ws.git_dir, "GIT_WORK_TREE": str(checkout)}
        g.read_tree(tree, env=env)
        out = g.status("--porcelain", "-z", "--untracked-files=all", "--no-renames", "--ignore-submodules=all",
                       env=env, strip_newline_in_stdout=False)
    changes = []
    for rec in out.split("\0"):
        if len(rec) < 4:
            continue
        xy, path = rec[:2], rec[3:]
        if xy == "??":
            if not is_artifact(path.rstrip("/")):
                changes.append(FileChange("added", path.rstrip("/")))
        elif xy[1] == "D":
            changes.append(FileChange("deleted", path))
        elif xy[1] in "MT":
            changes.append(FileChange("rewrote", path))
    return changes


def _make_readable(root: Path) -> None:
    """Give the owner read (and, on folders, write and search) permission on everything under
    `root`, symlinks left alone; executable bits are kept."""
    os.chmod(root, os.stat(root).st_mode | 0o700)
    for d, dirs, files in os.walk(root):
        for name in dirs:
            p = os.path.join(d, name)
            if not os.path.islink(p):
                os.chmod(p, os.lstat(p).st_mode | 0o700)
        for name in files:
            p = os.path.join(d, name)
            if not os.path.islink(p):
                os.chmod(p, os.lstat(p).st_mode | 0o600)


def tree_changes(ws: git.Repo, old: str, new: str) -> list[FileChange]:
    """How tree `new` differs from tree `old`, file by file."""
    kinds = {"A": "added", "D": "deleted"}
    out = ws.git.diff("--name-status", "--no-renames", "-z", old, new).split("\0")
    return [FileChange(kinds.get(k[0], "rewrote"), p) for k, p in zip(out[0::2], out[1::2]) if p]


def file_at(ws: git.Repo, commit: str, path: str) -> bytes | None:
    """The bytes of `path` in `commit`, or None where the commit has no such file."""
    try:
        return ws.git.show(f"{commit}:{path}", stdout_as_string=False, strip_newline_in_stdout=False)
    except git.GitCommandError:
        return None


def commit_snapshot(ws: git.Repo, tree: str, files: dict[str, bytes], parent: str, message: str) -> str:
    """Commit tree object `tree` with `files` (repo path -> content, mode 100644) put in or replaced,
    on top of `parent`, and move the workspace's branch there in one atomic ref update; the workspace
    (index and files) is then reset to the new commit (untracked files stay). Returns the new sha.

    Never `git add`s the working tree: what is committed is exactly the tested snapshot plus the
    server's files. A crash leaves the branch at its old commit or at the complete new one."""
    with temp_index() as env:
        ws.git.read_tree(tree, env=env)
        for path, data in files.items():
            fd, tmp = tempfile.mkstemp(prefix="kopt-blob-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                blob = ws.git.hash_object("-w", "--no-filters", tmp).strip()
            finally:
                os.unlink(tmp)
            ws.git.update_index("--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
        full = ws.git.write_tree(env=env).strip()
    sha = ws.git.commit_tree(full, "-p", parent, "-m", message, env=_identity(ws)).strip()
    ref = ws.git.symbolic_ref("-q", "HEAD").strip()
    ws.git.update_ref("-m", "kopt-mcp: commit", ref, sha)
    ws.git.reset("-q", "--hard", sha)
    return sha


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
