"""Candidate slots (issue 13 item 2): several agents share one session and one BEST line, each with
its own workspace, repair counter and pending verdict; BEST moves through one serialized commit step
that re-applies a candidate judged against an older BEST and re-measures it (or rules `conflict`).
Real git repositories, the toy benchmark, two slots in one process (and in two threads)."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from kopt_mcp.errors import RefereeError
from kopt_mcp.testing.toy import make_toy_repo

# one line per class, far apart: two slots' edits of different classes merge cleanly
KERNEL = 'TIMES = {{}}\nERRORS = {{}}\nTIMES["1"] = {one}\n#\n#\n#\n#\nTIMES["2"] = {two}\n'


def _kernel(ws: Path, one: float, two: float) -> None:
    (ws / "kernel.py").write_text(KERNEL.format(one=one, two=two))


@pytest.fixture
def repo(tmp_path) -> Path:
    r = make_toy_repo(tmp_path / "repo", {"1": 100.0, "2": 200.0})
    _kernel(r, 100.0, 200.0)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qam", "two lines"],
                   cwd=r, check=True)
    return r


@pytest.fixture
def pair(repo, make_referee):
    """The main slot (baseline taken) and slot `b` of the same session."""
    a = make_referee(repo)
    a.run_benchmark()
    b = make_referee(repo, slot="b")
    return a, b


def _line(repo: Path) -> list[str]:
    out = subprocess.run(check=False, args=["git", "log", "--format=%s", "kernel-opt/t"], cwd=repo, capture_output=True, text=True)
    return out.stdout.split("\n")[:-1]


def test_a_slot_joins_the_session_on_its_own_workspace_and_branch(pair, repo):
    a, b = pair
    assert b.where.workspace_path != a.where.workspace_path and b.where.branch == "kopt-slot/t/b"
    assert b.run_benchmark().ok  # no second baseline: the slot adopts the session's
    assert b.books.state.best.commit == a.books.state.best.commit and b.status().phase == "ready"
    assert [s["slot"] for s in a.status().slots] == ["main", "b"]
    from kopt_mcp.referee import Referee

    with pytest.raises(RefereeError, match="one process per slot"):
        Referee(repo, tag="t", slot="b")


def test_the_main_slot_joins_a_session_that_a_slot_started(repo, make_referee):
    b = make_referee(repo, slot="b")
    assert b.run_benchmark().baseline_recorded  # the session's baseline, taken by slot b
    a = make_referee(repo)  # the main slot opens later: it joins b's BEST line (kernel-opt/t)
    r = a.run_benchmark()
    assert r.ok and not r.baseline_recorded and a.status().phase == "ready"
    assert a.books.state.best.commit == b.books.state.best.commit and a.where.workspace_path.name == "t"
    _kernel(a.where.workspace_path, 50.0, 200.0)
    assert a.save_and_test("n=1", "a").verdict == "improved"
    ca = a.commit_improvement()
    assert ca.committed and _line(repo)[0] == "a"
    assert b.run_benchmark().ok and b.books.state.best.commit == ca.commit  # and b follows


def test_one_commits_while_the_other_was_judged_against_the_old_best(pair, repo):
    a, b = pair
    _kernel(a.where.workspace_path, 50.0, 200.0)
    _kernel(b.where.workspace_path, 100.0, 100.0)
    verdicts = {}

    def judge(name, ref, target):  # both measure at once (two threads), each in its own checkout
        verdicts[name] = ref.save_and_test(target, f"{name} faster")

    threads = [threading.Thread(target=judge, args=("a", a, "n=1")), threading.Thread(target=judge, args=("b", b, "n=2"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert verdicts["a"].verdict == verdicts["b"].verdict == "improved"
    old = a.books.state.best.commit
    ca = a.commit_improvement()
    assert ca.committed
    cb = b.commit_improvement()  # judged against the old BEST: re-applied onto a's commit and re-measured
    assert cb.committed, cb.reason
    head = subprocess.run(check=False, args=["git", "rev-parse", "kernel-opt/t"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert head == cb.commit and a.where.repo.commit(cb.commit).parents[0].hexsha == ca.commit != old
    text = subprocess.run(check=False, args=["git", "show", "kernel-opt/t:kernel.py"], cwd=repo, capture_output=True, text=True).stdout
    assert 'TIMES["1"] = 50.0' in text and 'TIMES["2"] = 100.0' in text  # both keeps on one BEST line
    assert b.books.state.best.metrics == {"n=1": 50.0, "n=2": 100.0}
    reapplied = [e for e in b.books.store.ledger() if e["event"] == "snapshot" and e.get("reapplied")]
    assert reapplied and reapplied[0]["best_commit"] == ca.commit
    # the main slot follows the moved BEST before its next call; performance.md holds both keeps once
    assert a.run_benchmark().ok and a.books.state.best.commit == cb.commit
    perf = subprocess.run(check=False, args=["git", "show", "kernel-opt/t:performance.md"], cwd=repo, capture_output=True,
                          text=True).stdout
    assert perf.count("| keep |") == 4 and perf.count("| baseline |") == 2  # a row per class: 2 keeps, 1 baseline
    assert (a.where.workspace_path / "performance.md").read_text() == perf


def test_a_conflicting_pair_is_a_conflict_and_the_loser_is_archived(pair, repo):
    a, b = pair
    _kernel(a.where.workspace_path, 50.0, 200.0)
    _kernel(b.where.workspace_path, 40.0, 200.0)
    assert a.save_and_test("n=1").verdict == "improved"
    assert b.save_and_test("n=1").verdict == "improved"
    ca = a.commit_improvement()
    cb = b.commit_improvement()
    assert ca.committed and not cb.committed and cb.code == "conflict" and cb.best_commit == ca.commit
    assert b.status().last_verdict["verdict"] == "conflict" and b.status().phase == "ready"
    assert 'TIMES["1"] = 40.0' in next(b.books.store.attempts.glob("*-conflict.patch")).read_text()  # nothing lost
    assert 'TIMES["1"] = 50.0' in (b.where.workspace_path / "kernel.py").read_text()  # b is at the newest BEST


def test_revert_in_one_slot_leaves_the_other_slots_candidate_and_counters(pair):
    a, b = pair
    _kernel(a.where.workspace_path, 50.0, 200.0)
    assert a.save_and_test("n=1").verdict == "improved"
    _kernel(b.where.workspace_path, 300.0, 200.0)
    assert b.save_and_test("n=1").verdict == "regressed"  # counted in b only
    _kernel(b.where.workspace_path, 100.0, 150.0)
    b.revert_to_best("changed my mind")
    assert 'TIMES["1"] = 50.0' in (a.where.workspace_path / "kernel.py").read_text()
    sa, sb = a.status(), b.status()
    assert (sa.phase, sa.consecutive_regressions, sb.consecutive_regressions) == ("improved", 0, 1)
    assert a.commit_improvement().committed  # a's pending verdict survived b's revert


def test_a_slots_edit_in_progress_follows_a_moved_best(pair):
    a, b = pair
    _kernel(a.where.workspace_path, 50.0, 200.0)
    assert a.save_and_test("n=1").verdict == "improved" and a.commit_improvement().committed
    _kernel(b.where.workspace_path, 100.0, 100.0)  # b edited before it heard of a's keep
    v = b.save_and_test("n=2")  # synced first: b's edit is re-applied onto the newest BEST
    assert v.verdict == "improved" and v.classes and {c.key for c in v.classes} == {"n=1", "n=2"}
    assert 'TIMES["1"] = 50.0' in (b.where.workspace_path / "kernel.py").read_text()
    assert any(e["event"] == "best_moved" for e in b.books.store.ledger())


def _slot_params(repo: Path, slot: str | None, fault: str | None):
    """A stdio server of session t on `repo` for `slot` (None: the main slot), with KOPT_FAULT=`fault`."""
    import os
    import sys

    from mcp.client.stdio import StdioServerParameters

    env = {k: v for k, v in os.environ.items() if k != "KOPT_FAULT"}
    if fault:
        env["KOPT_FAULT"] = fault
    return StdioServerParameters(command=sys.executable, env=env, args=[
        "-m", "kopt_mcp.app.cli", "serve", "--repo", str(repo), "--tag", "t", *(["--slot", slot] if slot else [])])


async def until_killed(params, steps, timeout_s: float = 120) -> str:
    """Run `await steps(client)` against the stdio server of `params`: "killed" when the server died
    under the client, else "not killed". A TimeoutError after `timeout_s` s is raised."""
    import anyio
    from mcp import Client

    try:
        with anyio.fail_after(timeout_s):
            async with Client(params) as c:
                await steps(c)
                return "not killed"
    except TimeoutError:
        raise
    except BaseException:  # noqa: BLE001 - the server died under the client
        return "killed"


def b_commits_under_fault(repo: Path, b_ws: Path, fault: str) -> str:
    """Slot b's server (KOPT_FAULT=`fault`) judges its n=2 edit `improved` and commits it: "killed"
    when the server died under the client, else "not killed"."""
    import anyio

    async def steps(c):
        _kernel(b_ws, 100.0, 100.0)
        r = await c.call_tool("save_and_test", {"target": "n=2", "hypothesis": "b"})
        assert r.structured_content["verdict"] == "improved", r
        await c.call_tool("commit_improvement", {})

    return anyio.run(until_killed, _slot_params(repo, "b", fault), steps)


def test_a_slot_server_killed_after_moving_the_best_line_is_recovered_and_the_others_follow(
        repo, make_referee, lease_dir):
    """SIGKILL of slot b's server between moving the branch kernel-opt/t and writing best.json / its
    state: on restart b adopts its commit and publishes it; the main slot's edit follows it."""
    import anyio
    from mcp import Client

    from kopt_mcp.ledger import Store

    a = make_referee(repo)
    a.run_benchmark()
    b_ws = repo / ".kopt" / "worktrees" / "t@b"
    _kernel(a.where.workspace_path, 50.0, 200.0)  # the main slot's edit, not yet tested

    assert b_commits_under_fault(repo, b_ws, "slots.after_best_branch") == "killed"

    async def restart():
        with anyio.fail_after(120):
            async with Client(_slot_params(repo, "b", None)) as c:
                return (await c.call_tool("status", {})).structured_content

    st = anyio.run(restart)
    line = subprocess.run(check=False, args=["git", "rev-parse", "kernel-opt/t"], cwd=repo, capture_output=True, text=True).stdout.strip()
    assert st["phase"] == "ready" and st["kept"] == 1 and st["best_commit"] == line
    import json

    assert json.loads((repo / ".git" / "kopt" / "t" / "best.json").read_text())["commit"] == line
    sd = repo / ".git" / "kopt" / "t" / "slots" / "b"
    store = Store(sd)
    store.load_state_json()
    assert store.verify() == [] and [e["event"] for e in store.ledger()].count("commit") == 1
    v = a.save_and_test("n=1", "a")  # the main slot follows: its edit re-applied onto b's keep
    assert v.verdict == "improved" and a.books.state.best.commit == line
    assert 'TIMES["2"] = 100.0' in (a.where.workspace_path / "kernel.py").read_text()


def test_each_mcp_session_gets_its_own_slot(repo, make_referee):
    from kopt_mcp.app.slot_pool import SlotPool

    main = make_referee(repo)
    pool = SlotPool(main, lambda name: make_referee(repo, slot=name))
    assert pool.for_session("session-1") is main and pool.for_session("session-1") is main
    second = pool.for_session("session-2")
    assert second is not main and second.where.slot == "http-1" and second.where.workspace_path.name == "t@http-1"
    assert pool.for_session("session-2") is second and pool.for_session("session-3").where.slot == "http-2"
