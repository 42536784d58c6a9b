"""Re-applying a candidate onto a newer BEST with git's three-way merge (referee.reapply), on real
repositories: a change in another file merges; overlapping edits of one file are a conflict."""

from __future__ import annotations

from pathlib import Path

import git

from kopt_mcp import vcs
from kopt_mcp.referee.reapply import reapply
from kopt_mcp.testing.toy import kernel_source, make_toy_repo


def _commit(repo: git.Repo, parent: str, files: dict[str, str]) -> str:
    """A commit with `files` written on top of `parent` (made in a detached checkout)."""
    repo.git.checkout("-q", "--detach", parent)
    for path, text in files.items():
        (Path(repo.working_tree_dir) / path).write_text(text)
    repo.git.add(*files)
    repo.git.commit("-q", "-m", "change", env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost",
                                               "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@localhost"})
    return repo.head.commit.hexsha


def test_a_change_to_another_file_merges_onto_the_newer_best(tmp_path):
    repo = git.Repo(make_toy_repo(tmp_path / "r", {"1": 100.0, "2": 200.0}))
    base = repo.head.commit.hexsha
    cand = _commit(repo, base, {"kernel.py": kernel_source({"1": 50.0, "2": 200.0})})
    newer = _commit(repo, base, {"NOTES.md": "another slot's keep\n"})
    out = reapply(repo, cand, newer)
    assert out.conflicts == [] and out.tree
    assert vcs.file_at(repo, _commit_of(repo, out.tree, newer), "NOTES.md") == b"another slot's keep\n"
    assert b"50.0" in vcs.file_at(repo, _commit_of(repo, out.tree, newer), "kernel.py")


def test_overlapping_edits_of_one_file_are_a_conflict(tmp_path):
    repo = git.Repo(make_toy_repo(tmp_path / "r", {"1": 100.0, "2": 200.0}))
    base = repo.head.commit.hexsha
    cand = _commit(repo, base, {"kernel.py": kernel_source({"1": 50.0, "2": 200.0})})
    newer = _commit(repo, base, {"kernel.py": kernel_source({"1": 90.0, "2": 200.0})})
    assert reapply(repo, cand, newer) == (None, ["kernel.py"])


def _commit_of(repo: git.Repo, tree: str, parent: str) -> str:
    return repo.git.commit_tree(tree, "-p", parent, "-m", "merged", env={
        "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@localhost", "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@localhost"}).strip()


def _another_slot_commits(ref, files: dict[str, str]) -> str:
    """Another slot keeps a change: a commit on top of BEST_COMMIT (made in the BEST worktree) becomes
    the newest BEST of the shared line (branch and state), as the serialized commit step leaves it."""
    best = git.Repo(ref.where.best_path)
    new = _commit(best, ref.books.state.best.commit, files)
    from kopt_mcp.referee.slots import best_lock, publish

    ref.where.repo.git.update_ref(f"refs/heads/{ref.where.branch}", new)
    ref.books.state.best.commit = new
    with best_lock(ref):
        publish(ref)  # the shared BEST (best.json) every slot follows
    ref.books.save()
    return new


def test_a_candidate_judged_against_an_older_best_is_reapplied_and_remeasured(ref):
    from kopt_mcp.testing.toy import set_kernel

    set_kernel(ref.where.workspace_path, {"1": 50.0, "2": 100.0})
    v = ref.save_and_test("global", "half the time")
    assert v.verdict == "improved" and ref.books.state.pending.base
    newer = _another_slot_commits(ref, {"NOTES.md": "another slot's keep\n"})
    runs_before = len(list(ref.where.state_dir.rglob("benchmark.log")))
    c = ref.commit_improvement()
    assert c.committed, c.reason
    head = ref.where.repo.commit(c.commit)
    assert [p.hexsha for p in head.parents] == [newer]  # on top of the newest BEST
    assert (ref.where.workspace_path / "NOTES.md").read_text() == "another slot's keep\n"
    assert "50.0" in (ref.where.workspace_path / "kernel.py").read_text()
    rec = next(e for e in reversed(ref.books.store.ledger()) if e["event"] == "commit")
    assert rec["reapplied_from"] != newer and rec["reapplied_from"] == head.parents[0].parents[0].hexsha
    # re-measured against the newest BEST: new runs of the candidate and of BEST
    assert len(list(ref.where.state_dir.rglob("benchmark.log"))) >= runs_before + 2


def test_a_candidate_overlapping_a_newer_best_is_a_conflict_and_archived(ref):
    from kopt_mcp.testing.toy import set_kernel

    set_kernel(ref.where.workspace_path, {"1": 50.0, "2": 100.0})
    v = ref.save_and_test("global", "half the time")
    assert v.verdict == "improved"
    newer = _another_slot_commits(ref, {"kernel.py": kernel_source({"1": 90.0, "2": 200.0})})
    c = ref.commit_improvement()
    assert not c.committed and c.code == "conflict" and c.best_commit == newer
    assert "kernel.py" in c.reason  # the text is the product: it names the overlapping file
    patch = (ref.books.store.attempts / f"{v.attempt:04d}-conflict.patch").read_text()
    assert "50.0" in patch  # nothing lost
    assert "90.0" in (ref.where.workspace_path / "kernel.py").read_text()  # the workspace is at the newest BEST
    s = ref.status()
    assert s.phase == "ready" and s.last_verdict["verdict"] == "conflict" and s.best_commit == newer
    rec = next(e for e in reversed(ref.books.store.ledger()) if e["event"] == "attempt")
    assert (rec["verdict"], rec["code"]) == ("conflict", "conflict") and rec["changed"] == ["kernel.py"]
