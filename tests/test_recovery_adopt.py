"""Recovery's adoption of a keep committed by a server killed before saving it (referee/recovery.py,
`_recover_commit`), when that keep's commit step had been overtaken: slot b's first commit round is
overtaken by the main slot's commit (b's candidate run is held by a file handshake until the main slot
has committed), its second round re-applies and commits, and the server is SIGKILLed right after the
git commit (KOPT_FAULT, kopt_mcp/faults.py). The restart must adopt that commit once, carrying the
job's overtaken_rounds into the ledger's `commit` record. Real git repositories, the real server over
stdio for the killed slot, the toy benchmark; the fixtures of tests/test_slots.py."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import anyio
from mcp import Client

from kopt_mcp.events import Commit, last
from kopt_mcp.ledger import render_performance
from kopt_mcp.referee.slots import shared_events
from tests.test_slots import KERNEL, _kernel, _line, _slot_params, repo  # noqa: F401 - fixtures

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
    base = a.state.best.commit
    _kernel(a.workspace_path, 50.0, 200.0)
    assert a.save_and_test("n=1", "a").verdict == "improved"
    b_ws = repo / ".kopt" / "worktrees" / "t@b"
    gate = tmp_path / "gate"
    a_done: dict = {}

    def main_slot_commits_during_bs_re_measure():
        if _wait_for(Path(f"{gate}.entered")):  # b's first commit round is measuring its candidate
            a_done["r"] = a.commit_improvement()
        Path(f"{gate}.release").write_text("")

    async def b_killed_after_its_git_commit() -> str:
        try:
            with anyio.fail_after(240):
                async with Client(_slot_params(repo, "b", "commit_improvement.after_git_commit")) as c:
                    (b_ws / "kernel.py").write_text(KERNEL.format(one=100.0, two=100.0)
                                                    + HANDSHAKE.format(gate=str(gate)))
                    r = await c.call_tool("save_and_test", {"target": "n=2", "hypothesis": "b"})
                    assert r.structured_content["verdict"] == "improved", r
                    gate.write_text("")  # armed: the next candidate run (commit round 1) waits for a's commit
                    helper = threading.Thread(target=main_slot_commits_during_bs_re_measure)
                    helper.start()
                    try:
                        await c.call_tool("commit_improvement", {})
                    finally:
                        await anyio.to_thread.run_sync(helper.join, 180)
                    return "not killed"
        except TimeoutError:
            raise
        except BaseException:  # noqa: BLE001 - the server died under the client
            return "killed"

    assert anyio.run(b_killed_after_its_git_commit) == "killed"
    ca = a_done["r"]
    assert ca.committed, ca.reason
    assert Path(f"{gate}.taken").exists()  # the handshake ran: a committed during b's first round
    stale = _rev(repo, "kopt-slot/t/b")  # b's commit, made in round 2 on a's keep, not published
    assert _rev(repo, "kernel-opt/t") == ca.commit != stale
    assert "kopt-mcp attempt 1, " in a.repo.commit(stale).message and a.repo.commit(stale).parents[0].hexsha == ca.commit
    job = json.loads((repo / ".git" / "kopt" / "t" / "slots" / "b" / "state.json").read_text())["in_progress"]
    assert job["tool"] == "commit_improvement" and job["overtaken_rounds"] == 1  # what the killed job left

    b = make_referee(repo, slot="b")  # the restart: recovery adopts the commit
    st = b.status()
    assert st.phase == "ready" and st.kept == 1 and st.problems == []
    line = _rev(repo, "kernel-opt/t")
    assert b.state.best.commit == line == stale and b.state.in_progress is None
    assert json.loads((repo / ".git" / "kopt" / "t" / "best.json").read_text())["commit"] == stale
    # nothing committed twice: each keep once on the BEST line, b's on top of a's on top of the baseline
    assert _line(repo)[:2] == ["b", "a"] and _line(repo).count("b") == 1
    assert a.repo.commit(stale).parents[0].hexsha == ca.commit and a.repo.commit(ca.commit).parents[0].hexsha == base
    text = subprocess.run(["git", "show", "kernel-opt/t:kernel.py"], cwd=repo, capture_output=True, text=True,
                          check=True).stdout
    assert 'TIMES["1"] = 50.0' in text and 'TIMES["2"] = 100.0' in text  # both keeps on one BEST line
    # the ledger's `commit` record: one, adopted by recovery, with the killed job's overtaken_rounds
    commits = [e for e in b.store.ledger() if e["event"] == "commit"]
    assert len(commits) == 1 and commits[0]["commit"] == stale and commits[0]["recovered"] is True
    rec = last(b.store.events(), Commit)
    assert rec.overtaken_rounds == 1 and rec.previous == ca.commit and rec.metrics == {"n=1": 50.0, "n=2": 100.0}
    assert rec.reapplied_from == base  # judged against the baseline, re-applied onto a's keep
    assert b.store.verify() == []
    assert any(e["event"] == "recovered" and e["job"]["tool"] == "commit_improvement" for e in b.store.ledger())
    # performance.md as committed: b's keep rows once, and exactly what the shared ledgers render
    perf = subprocess.run(["git", "show", "kernel-opt/t:performance.md"], cwd=repo, capture_output=True,
                          text=True, check=True).stdout
    assert perf.count("| keep |") == 4 and perf.count("attempt 1: b (") == 2  # a row per class, per keep
    assert perf == render_performance(shared_events(b), "us_per_call")
    # the session goes on: the main slot follows b's adopted keep
    assert a.run_benchmark().ok and a.state.best.commit == stale
    assert (a.workspace_path / "performance.md").read_text() == perf
