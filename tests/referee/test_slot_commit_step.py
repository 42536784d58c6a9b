"""The serialized commit step of candidate slots (referee/commit.py): the re-measure runs outside the
BEST lock, so another slot may commit meanwhile; the overtaken commit is re-applied onto the newest
BEST and measured again, and its last round holds the lock. A slot killed between its git commit
and publishing it does not drop a keep another slot published in between (referee/recovery.py).
Real git repositories and the toy benchmark; the fixtures of tests/referee/test_slots.py."""

from __future__ import annotations

import json
import subprocess
import threading

import anyio
import pytest
from filelock import FileLock, Timeout
from mcp import Client

from kopt_mcp.events import Commit, last, parse_event
from kopt_mcp.referee import commit as commit_step
from kopt_mcp.referee import commit_measure
from tests.referee.test_slots import _kernel, _line, _slot_params, b_commits_under_fault, pair, repo  # noqa: F401 - fixtures

BEST_LOCK = (".git", "kopt", "t", "best.lock")


def _branch(repo, ref: str) -> str:  # noqa: F811
    return subprocess.run(["git", "rev-parse", ref], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def test_a_commit_overtaken_during_its_re_measure_is_reapplied_and_measured_again(pair, repo, monkeypatch):  # noqa: F811
    a, b = pair
    _kernel(a.where.workspace_path, 50.0, 200.0)
    _kernel(b.where.workspace_path, 100.0, 100.0)
    assert a.save_and_test("n=1", "a").verdict == "improved"
    assert b.save_and_test("n=2", "b").verdict == "improved"
    old = a.books.state.best.commit
    monkeypatch.setattr(commit_step, "ROUNDS", 2)
    real = commit_measure.measure_run
    seen: list[str] = []
    a_result = {}

    def measure(sess, att, tree, label):
        if sess.where.slot == "b" and label == "commit-candidate":
            seen.append(label)
            if len(seen) == 1:  # b's first re-measure: a commits meanwhile, not waiting for b's lock
                t = threading.Thread(target=lambda: a_result.update(r=a.commit_improvement()))
                t.start()
                t.join(120)
                assert not t.is_alive(), "a's commit waited for b's re-measure: the lock is held while measuring"
            else:  # the last round holds the BEST lock from its start: nobody else can commit now
                other = FileLock(str(repo.joinpath(*BEST_LOCK)), thread_local=False)
                with pytest.raises(Timeout):
                    other.acquire(timeout=0.2)
        return real(sess, att, tree, label)

    monkeypatch.setattr(commit_measure, "measure_run", measure)
    cb = b.commit_improvement()
    ca = a_result["r"]
    assert ca.committed and cb.committed, (ca.reason, cb.reason)
    assert len(seen) == 2 and cb.code == "script_only"  # the toy repo has no profiler
    assert cb.overtaken_rounds == 1 and ca.overtaken_rounds == 0  # structured: nobody parses the reason
    assert _branch(repo, "kernel-opt/t") == cb.commit
    assert a.where.repo.commit(cb.commit).parents[0].hexsha == ca.commit and a.where.repo.commit(ca.commit).parents[0].hexsha == old
    text = subprocess.run(["git", "show", "kernel-opt/t:kernel.py"], cwd=repo, capture_output=True, text=True,
                          check=True).stdout
    assert 'TIMES["1"] = 50.0' in text and 'TIMES["2"] = 100.0' in text  # both keeps on one BEST line
    events = [e["event"] for e in b.books.store.ledger()]
    assert events.count("commit") == 1 and "best_moved" in events
    assert last(b.books.store.events(), Commit).overtaken_rounds == 1 and last(a.books.store.events(), Commit).overtaken_rounds == 0
    assert b.books.store.verify() == [] and b.status().phase == "ready" and b.books.state.best.commit == cb.commit


def test_a_slot_killed_after_its_git_commit_does_not_drop_a_keep_published_meanwhile(repo, make_referee, lease_dir):  # noqa: F811
    """Slot b's server is SIGKILLed after its git commit, before publishing it; the main slot then
    commits its own keep. On restart b must not adopt its stale commit (that would move the BEST line
    back past the main slot's keep): phase stays improved, and its commit re-applies onto the newest BEST."""
    a = make_referee(repo)
    a.run_benchmark()
    b_ws = repo / ".kopt" / "worktrees" / "t@b"

    assert b_commits_under_fault(repo, b_ws, "commit_improvement.after_git_commit") == "killed"
    stale = _branch(repo, "kopt-slot/t/b")
    assert "kopt-mcp attempt 1" in a.where.repo.commit(stale).message  # b's commit exists, unpublished
    _kernel(a.where.workspace_path, 50.0, 200.0)
    assert a.save_and_test("n=1", "a").verdict == "improved"
    ca = a.commit_improvement()
    assert ca.committed and _branch(repo, "kernel-opt/t") == ca.commit

    async def restart_and_commit():
        with anyio.fail_after(180):
            async with Client(_slot_params(repo, "b", None)) as c:
                st = (await c.call_tool("status", {})).structured_content
                cr = (await c.call_tool("commit_improvement", {})).structured_content
                return st, cr

    st, cr = anyio.run(restart_and_commit)
    assert st["phase"] == "improved" and st["kept"] == 0  # the stale commit was not adopted
    assert cr["committed"] and cr["overtaken_rounds"] == 0, cr["reason"]  # re-applied at its start, not overtaken
    line = _branch(repo, "kernel-opt/t")
    assert line == cr["commit"] != stale and a.where.repo.commit(line).parents[0].hexsha == ca.commit
    assert json.loads(repo.joinpath(".git", "kopt", "t", "best.json").read_text())["commit"] == line
    assert _line(repo)[:2] == ["b", "a"]  # both keeps on the BEST line, b's on top of a's
    text = subprocess.run(["git", "show", "kernel-opt/t:kernel.py"], cwd=repo, capture_output=True, text=True,
                          check=True).stdout
    assert 'TIMES["1"] = 50.0' in text and 'TIMES["2"] = 100.0' in text


def test_a_commit_record_written_before_overtaken_rounds_existed_reads_as_zero():
    old = {"at": "2026-11-20T10:00:00Z", "event": "commit", "attempt": 3, "commit": "a" * 40, "previous": "b" * 40,
           "metrics": {"n=1": 50.0}, "gpu_us": None, "formatted": False, "classes": [], "rows": []}
    e = parse_event(old)
    assert isinstance(e, Commit) and e.overtaken_rounds == 0 and e.attempt == 3
