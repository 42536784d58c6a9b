"""Where a session's things live: the repository, its names (tag, slot, branch, refs) and folders
(workspace, BEST worktree, state folder, caches), and the workspace's git repository."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from datetime import date
from pathlib import Path

import git

from kopt_mcp import vcs
from kopt_mcp.errors import RefereeError
from kopt_mcp.paths import kopt_dir, session_dir

SLOT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")


def default_tag() -> str:
    """Session tag from today's date, e.g. `2026-11-22`."""
    return date.today().isoformat()


def check_slot_name(slot: str) -> str:
    """`slot` if it is a valid slot name (letters, digits, `_.-`, at most 40, not starting with a
    sign); else ValueError saying so."""
    if not SLOT_RE.match(slot) or slot.endswith(".lock") or ".." in slot:
        raise ValueError(f"slot name {slot!r}: use letters, digits, '_', '.', '-' (at most 40 characters)")
    return slot


@dataclass(frozen=True, eq=False)
class Layout:
    """A session's names and folders, before its workspace is opened:

    - `repo_path` (resolved) and `repo` (git.Repo) of the repository the server was started on;
    - `tag`, `slot` (None: the main slot; referee/slots.py), `branch` (`kernel-opt/<tag>`, or
      `kopt-slot/<tag>/<slot>`), `ref_prefix` of the hidden attempt refs;
    - `workspace_path` (`<repo>/.kopt/worktrees/<tag>[@<slot>]`) and `best_path` (`...-best`);
    - `config_path` (resolved; default `<repo>/kopt.toml`);
    - `kopt_dir` (`<git-common-dir>/kopt`), `state_dir` (`<kopt_dir>/<tag>[/slots/<slot>]`),
      `pid_dir` (`<kopt_dir>/pids`) and `cache_dirs` (the JIT caches' environment variables)."""

    repo_path: Path
    repo: git.Repo
    tag: str
    slot: str | None
    branch: str
    ref_prefix: str
    workspace_path: Path
    best_path: Path
    config_path: Path
    kopt_dir: Path
    state_dir: Path
    pid_dir: Path
    cache_dirs: dict[str, str]

    @classmethod
    def locate(cls, repo: Path, config_path: Path | None = None, tag: str | None = None,
               slot: str | None = None) -> Layout:
        """The layout of session `tag` (default: today) slot `slot` on `repo`. Writes nothing; raises
        ValueError for a bad slot name and VcsError (kopt_mcp.errors) when `repo` is no git repository."""
        repo_path = repo.resolve()
        g = vcs.open_repo(repo_path)
        tag = tag or default_tag()
        slot = check_slot_name(slot) if slot else None
        name = f"{tag}@{slot}" if slot else tag
        cache = repo_path / ".kopt" / "cache"
        kd = kopt_dir(g)
        return cls(
            repo_path=repo_path, repo=g, tag=tag, slot=slot,
            branch=f"kopt-slot/{tag}/{slot}" if slot else f"kernel-opt/{tag}",
            ref_prefix=f"refs/kopt/{tag}/slots/{slot}" if slot else f"refs/kopt/{tag}",
            workspace_path=repo_path / ".kopt" / "worktrees" / name,
            best_path=repo_path / ".kopt" / "worktrees" / f"{name}-best",
            config_path=(config_path or repo_path / "kopt.toml").resolve(),
            kopt_dir=kd, state_dir=session_dir(g, tag) / "slots" / slot if slot else session_dir(g, tag),
            pid_dir=kd / "pids",
            cache_dirs={"TRITON_CACHE_DIR": str(cache / "triton"),
                        "TORCH_EXTENSIONS_DIR": str(cache / "torch_extensions"),
                        "CUDA_CACHE_PATH": str(cache / "cuda"), "MIOPEN_USER_DB_PATH": str(cache / "miopen")})

    def attempt_ref(self, n: int, suffix: str = "") -> str:
        """The hidden ref holding attempt `n`'s frozen snapshot (a commit whose parent is the
        BEST_COMMIT it was judged against)."""
        return f"{self.ref_prefix}/attempts/{n:04d}{suffix}"


@dataclass(frozen=True, eq=False)
class Where(Layout):
    """The layout with the session's workspace opened: `ws` is its git repository (on `branch`)."""

    ws: git.Repo

    @classmethod
    def opened(cls, layout: Layout, ws: git.Repo) -> Where:
        """`layout` with its workspace repository `ws`."""
        return cls(**{f.name: getattr(layout, f.name) for f in fields(Layout)}, ws=ws)

    def check_branch(self) -> None:
        """Refuse to touch a workspace that was switched to another branch or detached (RefereeError)."""
        head = self.ws.head
        ref = "detached HEAD" if head.is_detached else head.reference.path
        if ref != f"refs/heads/{self.branch}":
            raise RefereeError(
                f"the workspace {self.workspace_path} is on {ref}, not on {self.branch}: it was switched behind "
                f"the server's back and nothing there is reset. Check it out again with "
                f"`git -C {self.workspace_path} checkout {self.branch}`")
