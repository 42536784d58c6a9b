"""Opening a session where a branch of its name already exists (referee/opening.py through
vcs.has_branch): a branch that holds no session state is refused, never reused or reset; a new
candidate slot starts from the session's BEST, not from HEAD. Real git repositories, the toy benchmark."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kopt_mcp.errors import VcsError
from kopt_mcp.testing.toy import make_toy_repo, set_kernel


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path) -> Path:
    return make_toy_repo(tmp_path / "repo", {"1": 100.0, "2": 200.0})


def test_a_main_branch_without_session_state_is_refused_and_left_as_it_is(repo, make_referee):
    _git(repo, "branch", "kernel-opt/t")
    before = _git(repo, "rev-parse", "kernel-opt/t")
    with pytest.raises(VcsError, match="kernel-opt/t already exists but holds no session state"):
        make_referee(repo)
    assert _git(repo, "rev-parse", "kernel-opt/t") == before
    assert not (repo / ".kopt" / "worktrees" / "t").exists()


def test_a_slot_branch_without_slot_state_is_refused(repo, make_referee):
    _git(repo, "branch", "kopt-slot/t/b")
    with pytest.raises(VcsError, match="slot 'b': branch kopt-slot/t/b .* holds no slot state"):
        make_referee(repo, slot="b")
    assert not (repo / ".kopt" / "worktrees" / "t@b").exists()


def test_a_slot_starts_from_the_sessions_best_not_from_head(repo, make_referee):
    a = make_referee(repo)
    a.run_benchmark()
    set_kernel(a.where.workspace_path, {"1": 50.0, "2": 200.0})
    assert a.save_and_test("n=1", "halve n=1").verdict == "improved" and a.commit_improvement().committed
    line = _git(repo, "rev-parse", "kernel-opt/t")
    assert line != _git(repo, "rev-parse", "HEAD")
    b = make_referee(repo, slot="b")
    assert _git(repo, "rev-parse", "kopt-slot/t/b") == line and b.where.workspace_path.is_dir()
