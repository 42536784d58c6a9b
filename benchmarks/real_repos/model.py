"""The real-repository check's model: a Project (where to get it, its commands, its kopt.toml) and its
scripted Candidates (exact text edits), with the edit helper. Imports nothing of benchmarks/, so
projects.py (the registry) and the per-project modules (fla.py, fla_ln.py) all stand on it without
importing one another in a circle."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path


class EditError(RuntimeError):
    """A candidate's anchor text is not in the file exactly once: the upstream file changed."""


def replace_once(path: Path, old: str, new: str) -> None:
    """Replace the one occurrence of `old` in `path` by `new`. Raises EditError if `old` occurs 0 or 2+ times."""
    text = path.read_text()
    n = text.count(old)
    if n != 1:
        raise EditError(f"{path}: anchor found {n} times (want 1): {old[:80]!r}")
    path.write_text(text.replace(old, new))


@dataclass
class Candidate:
    """One scripted candidate: a name, the verdict a correct referee gives, what it does, and its edit."""

    name: str
    expected: str
    hypothesis: str
    file: str
    old: str = ""
    new: str = ""
    append: str = ""
    #: the config class the agent names as its target in save_and_test ("global": all classes)
    target: str = "global"
    #: anchors to replace instead of `old` where `old` is gone because an earlier candidate of the same
    #: session was committed over it (`--commit-wins`), e.g. fla-ln's NS line after its win: tried in order
    after_keep: tuple[str, ...] = ()

    def apply(self, workspace: Path) -> None:
        """Edit the workspace copy of `file` (append text, or replace `old` by `new`; where `old` is not
        in the file, the first of `after_keep` that is). Raises EditError when none is there exactly once."""
        path = workspace / self.file
        if self.append:
            path.write_text(path.read_text() + self.append)
            return
        text = path.read_text()
        anchor = next((a for a in (self.old, *self.after_keep) if a in text), self.old)
        replace_once(path, anchor, self.new)


@dataclass
class Project:
    """A fetched public project: its GitHub name, the paths to take from its snapshot, the benchmark
    command (as the project documents it), `kopt-mcp init` flags, the hand-finished kopt.toml, and the
    candidates in the order they are tried."""

    name: str
    github: str
    paths: list[str]
    command: str
    init_flags: list[str]
    toml: str
    candidates: list[Candidate] = field(default_factory=list)
    #: edits the snapshot needs on the GPU machine's Triton/torch, committed before kopt.toml
    compat: list[Candidate] = field(default_factory=list)
    #: `kopt-mcp init --command` gets the finished kopt.toml's command instead of the documented one
    #: (which fails on the GPU machine's torch; the failure itself is recorded once, in the results)
    init_with_toml_command: bool = False

    @property
    def toml_command(self) -> str:
        """The benchmark command of the hand-finished kopt.toml (`toml`)."""
        return tomllib.loads(self.toml)["benchmark"]["command"]

    @property
    def init_command(self) -> str:
        """The command `kopt-mcp init --command` runs: `command`, or kopt.toml's (init_with_toml_command)."""
        return self.toml_command if self.init_with_toml_command else self.command
