"""Recovery's adoption of a keep committed by a server killed before saving it (referee/recovery.py,
`_recover_commit`), when that keep's commit step had been overtaken: slot b's first commit round is
overtaken by the main slot's commit (b's candidate run is held by a file handshake until the main slot
has committed), its second round re-applies and commits, and the server is SIGKILLed right after the
git commit (KOPT_FAULT, kopt_mcp/testing/faults.py). The restart must adopt that commit once, carrying the
job's overtaken_rounds into the ledger's `commit` record. Also: the main slot killed the same way never
adopts another slot's commit that moved the BEST line meanwhile, and a job marker left after its step
was saved undoes nothing. Real git repositories, the real server over stdio for the killed slot, the
toy benchmark; the fixtures of tests/referee/test_slots.py."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import anyio

from kopt_mcp.events import Commit, last
from kopt_mcp.ledger import TIME_COLUMN_CPU, render_performance
from kopt_mcp.referee.slots import shared_events
from tests.referee.test_slots import KERNEL, _kernel, _line, _slot_params, repo, until_killed  # noqa: F401 - fixtures

# appended to b's kernel.py: imported by the toy benchmark, so the first run that finds `gate` claims it
# (an atomic rename: exactly one run), says so and waits for `release` (at most 120 s)
HANDSHAKE = '''
import os as _os, time as _time
try:
    _os.rename({gate!r}, {gate!r} + ".taken")
except FileNotFoundError:
    pass
else:
    open({gate!r} + ".entered", "w").close()
    _end = _time.monotonic() + 120
    while not _os.path.exists({gate!r} + ".release") and _time.monotonic() < _end:
        _time.sleep(0.05)
'''


def _rev(repo: Path, ref: str) -> str:  # noqa: F811
    return subprocess.run(["git", "rev-parse", ref], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def _wait_for(path: Path, timeout_s: float = 120) -> bool:
    end = time.monotonic() + timeout_s
    while not path.exists():
        if time.monotonic() > end:
            return False
        time.sleep(0.05)
    return True


def test_a_keep_committed_after_an_overtaken_round_is_adopted_once_with_its_overtaken_rounds(
        repo, make_referee, lease_dir, tmp_path):  # noqa: F811
    a = make_referee(repo)
    a.run_benchmark()
    base = a.books.state.best.commit
    _kernel(a.where.workspace_path, 50.0, 200.0)
    assert a.save_and_test("n=1", "a").verdict == "improved"
    b_ws = repo / ".kopt" / "worktrees" / "t@b"
    gate = tmp_path / "gate"
    a_done: dict = {}

    def main_slot_commits_during_bs_re_measure():
        if _wait_for(Path(f"{gate}.entered")):  # b's first commit round is measuring its candidate
            a_done["r"] = a.commit_improvement()
        Path(f"{gate}.release").write_text("")

    async def b_killed_after_its_git_commit(c) -> None:
        (b_ws / "kernel.py").write_text(KERNEL.format(one=100.0, two=100.0) + HANDSHAKE.format(gate=str(gate)))
        r = await c.call_tool("save_and_test", {"target": "n=2", "hypothesis": "b"})
        assert r.structured_content["verdict"] == "improved", r
        gate.write_text("")  # armed: the next candidate run (commit round 1) waits for a's commit
        helper = threading.Thread(target=main_slot_commits_during_bs_re_measure)
        helper.start()
        try:
            await c.call_tool("commit_improvement", {})
        finally:
            await anyio.to_thread.run_sync(helper.join, 180)

    params = _slot_params(repo, "b", "commit_improvement.after_git_commit")
    assert anyio.run(until_killed, params, b_killed_after_its_git_commit, 240) == "killed"
    ca = a_done["r"]
    assert ca.committed, ca.reason
    assert Path(f"{gate}.taken").exists()  # the handshake ran: a committed during b's first round
    stale = _rev(repo, "kopt-slot/t/b")  # b's commit, made in round 2 on a's keep, not published
    assert _rev(repo, "kernel-opt/t") == ca.commit != stale
    assert "kopt-mcp attempt 1, " in a.where.repo.commit(stale).message and a.where.repo.commit(stale).parents[0].hexsha == ca.commit
    job = json.loads((repo / ".git" / "kopt" / "t" / "slots" / "b" / "state.json").read_text())["in_progress"]
    assert job["tool"] == "commit_improvement" and job["overtaken_rounds"] == 1  # what the killed job left

    b = make_referee(repo, slot="b")  # the restart: recovery adopts the commit
    st = b.status()
    assert st.phase == "ready" and st.kept == 1 and st.problems == []
    line = _rev(repo, "kernel-opt/t")
    assert b.books.state.best.commit == line == stale and b.books.state.in_progress is None
    assert json.loads((repo / ".git" / "kopt" / "t" / "best.json").read_text())["commit"] == stale
    # nothing committed twice: each keep once on the BEST line, b's on top of a's on top of the baseline
    assert _line(repo)[:2] == ["b", "a"] and _line(repo).count("b") == 1
    assert a.where.repo.commit(stale).parents[0].hexsha == ca.commit and a.where.repo.commit(ca.commit).parents[0].hexsha == base
    text = subprocess.run(["git", "show", "kernel-opt/t:kernel.py"], cwd=repo, capture_output=True, text=True,
                          check=True).stdout
    assert 'TIMES["1"] = 50.0' in text and 'TIMES["2"] = 100.0' in text  # both keeps on one BEST line
    # the ledger's `commit` record: one, adopted by recovery, with the killed job's overtaken_rounds
    commits = [e for e in b.books.store.ledger() if e["event"] == "commit"]
    assert len(commits) == 1 and commits[0]["commit"] == stale and commits[0]["recovered"] is True
    rec = last(b.books.store.events(), Commit)
    assert rec.overtaken_rounds == 1 and rec.previous == ca.commit and rec.metrics == {"n=1": 50.0, "n=2": 100.0}
    assert rec.reapplied_from == base  # judged against the baseline, re-applied onto a's keep
    assert b.books.store.verify() == []
    assert any(e["event"] == "recovered" and e["job"]["tool"] == "commit_improvement" for e in b.books.store.ledger())
    # performance.md as committed: b's keep rows once, and exactly what the shared ledgers render
    perf = subprocess.run(["git", "show", "kernel-opt/t:performance.md"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout
    assert perf.count("| keep |") == 4 and perf.count("attempt 1: b (") == 2  # a row per class, per keep
    assert perf == render_performance(shared_events(b), "us_per_call", TIME_COLUMN_CPU)  # a CPU session's column
    # the session goes on: the main slot follows b's adopted keep
    assert a.run_benchmark().ok and a.books.state.best.commit == stale
    assert (a.where.workspace_path / "performance.md").read_text() == perf


# --- a job marker left after its transition was saved: recovery must undo nothing ------------------------
# (a marker can outlive its job: a save of the marker's end that failed, a server killed between two saves)


def _reopen(ref, toy_repo, make_referee, job: dict):
    """Leave `job` as the in-progress marker of `ref`'s saved state, close it, start again (recovery)."""
    ref.books.state.in_progress = {"since": "x", **job}
    ref.books.save()
    ref.close()
    return make_referee(toy_repo)


def _recovered(r) -> list[dict]:
    return [e for e in r.books.store.ledger() if e["event"] == "recovered"]


def test_a_save_and_test_marker_after_its_saved_improved_verdict_keeps_the_candidate(ref, toy_repo, make_referee):
    """Phase improved with this attempt pending: the verdict was saved, so the improved candidate stays in
    the workspace (not archived as interrupted, not reset) and can still be committed."""
    from kopt_mcp.testing.toy import set_kernel

    set_kernel(ref.where.workspace_path, {"1": 80.0, "2": 160.0})
    assert ref.save_and_test("global", "faster").verdict == "improved"
    again = _reopen(ref, toy_repo, make_referee, {"tool": "save_and_test", "attempt": 1})
    assert [e["action"] for e in _recovered(again)] == ["the verdict was saved: nothing to undo"]
    assert again.status().phase == "improved" and again.books.state.in_progress is None
    assert '"1": 80.0' in (again.where.workspace_path / "kernel.py").read_text()  # the candidate is still there
    assert [e["verdict"] for e in again.books.store.ledger() if e["event"] == "attempt"] == ["improved"]
    assert again.books.store.find_patch(1).name == "0001-improved.patch"  # not relabelled interrupted
    assert again.commit_improvement().committed


def test_a_commit_marker_after_its_saved_commit_leaves_best_and_the_agents_new_edit(ref, toy_repo, make_referee):
    """Phase ready: the keep was saved. The next edit the agent is making stays in the workspace, BEST and
    the branch stay where they are, and no commit record is added."""
    from kopt_mcp.testing.toy import set_kernel

    set_kernel(ref.where.workspace_path, {"1": 80.0, "2": 160.0})
    assert ref.save_and_test("global", "faster").verdict == "improved"
    c = ref.commit_improvement()
    assert c.committed
    set_kernel(ref.where.workspace_path, {"1": 70.0, "2": 140.0})  # the agent's next edit, not yet tested
    again = _reopen(ref, toy_repo, make_referee, {"tool": "commit_improvement", "attempt": 1})
    assert [e["action"] for e in _recovered(again)] == ["the commit was saved: nothing to undo"]
    assert again.status().phase == "ready" and again.books.state.best.commit == c.commit == again.where.ws.head.commit.hexsha
    assert '"1": 70.0' in (again.where.workspace_path / "kernel.py").read_text()
    assert [e["event"] for e in again.books.store.ledger()].count("commit") == 1 and again.books.store.verify() == []


def test_a_baseline_marker_after_its_saved_baseline_keeps_the_baseline_commit(ref, toy_repo, make_referee):
    """Phase ready: the baseline was saved. Its `kopt: baseline` commit (on top of the marker's base) is
    not dropped and performance.md is not restored, so the baseline is never recorded twice."""
    best = ref.books.state.best.commit
    base = ref.where.ws.head.commit.parents[0].hexsha
    perf = (ref.where.workspace_path / "performance.md").read_text()
    assert ref.where.ws.head.commit.message.strip() == "kopt: baseline" and "| baseline |" in perf
    again = _reopen(ref, toy_repo, make_referee, {"tool": "baseline", "base": base})
    assert [e["action"] for e in _recovered(again)] == ["the baseline was saved: nothing to undo"]
    assert again.status().phase == "ready" and again.books.state.best.commit == best == again.where.ws.head.commit.hexsha
    assert (again.where.workspace_path / "performance.md").read_text() == perf
    assert again.run_benchmark().baseline_recorded is False


def test_a_stop_marker_in_a_session_that_did_not_stop_writes_no_stop_summary(ref, toy_repo, make_referee):
    best = ref.books.state.best.commit
    again = _reopen(ref, toy_repo, make_referee, {"tool": "stop", "base": best})
    assert [e["action"] for e in _recovered(again)] == ["the session did not stop: nothing to finish"]
    assert again.status().phase == "ready" and again.where.ws.head.commit.hexsha == best
    assert "## Stop Summary" not in (again.where.workspace_path / "performance.md").read_text()
    assert not [e for e in again.books.store.ledger() if e["event"] == "stopped"]


def test_the_main_slot_killed_after_its_git_commit_does_not_adopt_another_slots_commit_as_its_own(
        repo, make_referee, lease_dir):  # noqa: F811
    """The main slot's workspace branch is the BEST line. Killed after its git commit (not published),
    then slot b commits its own attempt 1 on the same BEST and publishes it (the branch moves to b's
    commit). On restart the main slot's HEAD is b's commit, with the same `kopt-mcp attempt 1` trailer
    and parent: it must not be adopted as the main slot's keep (its candidate is not in it); the main
    slot's tested tree comes back, phase improved, and its commit re-applies onto b's keep."""
    ws = repo / ".kopt" / "worktrees" / "t"

    async def main_killed_after_its_git_commit(c) -> None:
        assert not (await c.call_tool("run_benchmark", {})).is_error
        _kernel(ws, 50.0, 200.0)
        r = await c.call_tool("save_and_test", {"target": "n=1", "hypothesis": "a"})
        assert r.structured_content["verdict"] == "improved", r
        await c.call_tool("commit_improvement", {})

    params = _slot_params(repo, None, "commit_improvement.after_git_commit")
    assert anyio.run(until_killed, params, main_killed_after_its_git_commit) == "killed"
    mine = _rev(repo, "kernel-opt/t")  # the main slot's unpublished commit
    base = json.loads((repo / ".git" / "kopt" / "t" / "best.json").read_text())["commit"]
    assert mine != base
    b = make_referee(repo, slot="b")
    assert b.run_benchmark().ok and b.books.state.best.commit == base
    _kernel(b.where.workspace_path, 100.0, 100.0)
    assert b.save_and_test("n=2", "b").verdict == "improved"
    cb = b.commit_improvement()
    assert cb.committed and _rev(repo, "kernel-opt/t") == cb.commit  # b's keep moved the BEST line
    assert "kopt-mcp attempt 1, " in b.where.repo.commit(cb.commit).message

    a = make_referee(repo)  # the restart of the main slot
    st = a.status()
    assert st.phase == "improved" and st.kept == 0, [e for e in a.books.store.ledger() if e["event"] == "recovered"]
    assert not [e for e in a.books.store.ledger() if e["event"] == "commit"]  # no keep recorded for a commit without it
    assert 'TIMES["1"] = 50.0' in (ws / "kernel.py").read_text()  # the tested candidate is back
    ca = a.commit_improvement()
    assert ca.committed, ca.reason
    line = _rev(repo, "kernel-opt/t")
    assert line == ca.commit and a.where.repo.commit(line).parents[0].hexsha == cb.commit
    text = subprocess.run(["git", "show", "kernel-opt/t:kernel.py"], cwd=repo, capture_output=True, text=True,
                          check=True).stdout
    assert 'TIMES["1"] = 50.0' in text and 'TIMES["2"] = 100.0' in text  # both keeps on one BEST line
    perf = subprocess.run(["git", "show", "kernel-opt/t:performance.md"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout
    assert perf.count("| keep |") == 4 and perf.count("attempt 1: a (") == 2 and perf.count("attempt 1: b (") == 2
