"""The proposal `kopt-mcp init` last made, kept under the git directory so that `init --write` writes
what `init` just showed instead of running everything again.

An agent trying init on a CPU harness (issue 35) ran `init`, read the proposal, then `init --write`:
the second call ran the benchmark twice and the tests again (minutes) to write the same text. Now
every init saves its proposal in `<git-common-dir>/kopt/init/proposal.json` with a key: the working
tree as a git tree object (tracked and untracked files, ignored ones left out: `vcs.snapshot`, taken
after init's runs, which put the result files back) and init's flags. `init --write` with the same
flags on the same tree writes the saved proposal; any edit of the tree or another flag runs again.
Nothing is saved outside a git checkout.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import git

from kopt_mcp import __version__
from kopt_mcp.commands.init.render import Proposal
from kopt_mcp.paths import kopt_dir
from kopt_mcp.vcs import snapshot


def where(repo: Path) -> Path | None:
    """The saved proposal's file, or None outside a git checkout."""
    try:
        return kopt_dir(repo) / "init" / "proposal.json"
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None


def key(repo: Path, flags: dict) -> str | None:
    """sha256 over kopt-mcp's version, init's `flags` and the working tree's git tree id; None
    outside a git checkout or where git cannot snapshot the tree."""
    try:
        tree = snapshot(git.Repo(repo, search_parent_directories=True)).tree
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, git.GitCommandError, ValueError):
        return None
    text = json.dumps({"version": __version__, "flags": flags, "tree": tree,
                       "repo": str(Path(repo).resolve())}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def save(repo: Path, flags: dict, proposal: Proposal) -> None:
    """Keep `proposal` for `init --write` with the same `flags` on this tree (atomic write). Never
    raises: saving is a convenience."""
    path, k = where(repo), key(repo, flags)
    if path is None or k is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"key": k, "proposal": proposal.model_dump(mode="json")}))
        os.replace(tmp, path)
    except OSError:
        pass


def load(repo: Path, flags: dict) -> Proposal | None:
    """The saved proposal when it was made with the same `flags` on the same tree, else None."""
    path = where(repo)
    if path is None or not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if data.get("key") != key(repo, flags):
        return None
    try:
        return Proposal.model_validate(data["proposal"])
    except (KeyError, ValueError):
        return None
