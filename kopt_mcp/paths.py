"""Where things live: bundled files (`resources/` and `examples/` from a source checkout, or their
copies inside the installed package, `kopt_mcp/_resources`, `kopt_mcp/_examples`), and a session's
state folder, out of every tree a benchmark runs in: `<git-common-dir>/kopt/<tag>/`."""

from __future__ import annotations

from pathlib import Path

import git

_PKG = Path(__file__).resolve().parent


def _find(name: str) -> Path:
    for candidate in (_PKG / f"_{name}", _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"bundled folder {name!r} not found next to {_PKG}: reinstall kopt-mcp")


def resources_dir() -> Path:
    """The folder holding program.md and the skill docs."""
    return _find("resources")


def examples_dir() -> Path:
    """The folder holding the bundled example kernel repositories."""
    return _find("examples")


def common_git_dir(repo: Path | git.Repo) -> Path:
    """The repository's COMMON git directory (shared by the main checkout and all its worktrees),
    absolute. Raises git.InvalidGitRepositoryError / git.NoSuchPathError for a path outside git."""
    r = repo if isinstance(repo, git.Repo) else git.Repo(repo, search_parent_directories=False)
    return Path(r.common_dir).resolve()


def kopt_dir(repo: Path | git.Repo) -> Path:
    """`<git-common-dir>/kopt`: the server lock and one state folder per session tag."""
    return common_git_dir(repo) / "kopt"


def session_dir(repo: Path | git.Repo, tag: str) -> Path:
    """The state folder of session `tag`: state.json, ledger.jsonl, attempts/, runs/."""
    return kopt_dir(repo) / tag
