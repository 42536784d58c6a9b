"""Crash safety: the real server over stdio, SIGKILLed at each fault point of save_and_test and
commit_improvement (KOPT_FAULT, see kopt_mcp/testing/faults.py), then restarted: the state is consistent
with git, no attempt's diff is lost, no half commit exists, and the dead process's GPU lease is free."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from kopt_mcp.paths import session_dir
from kopt_mcp.testing.faults import BASELINE_POINTS, POINTS, STOP_POINTS
from kopt_mcp.testing.toy import kernel_source, make_toy_repo

FASTER = {"1": 80.0, "2": 160.0}
SLOWER = {"1": 120.0, "2": 240.0}
NEXT = {"1": 70.0, "2": 140.0}


def _params(repo: Path, fault: str | None) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k != "KOPT_FAULT"}
    if fault:
        env["KOPT_FAULT"] = fault
    return StdioServerParameters(command=sys.executable, args=["-m", "kopt_mcp.app.cli", "serve", "--repo", str(repo),
                                                               "--tag", "t"], env=env)


def git(ws: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=ws, capture_output=True, text=True, check=check)


async def _drive_until_killed(repo: Path, fault: str) -> list[str]:
    """Baseline, one candidate, (commit): the server must die at `fault`. Returns the calls made."""
    ws = repo / ".kopt" / "worktrees" / "t"
    done: list[str] = []
    try:
        with anyio.fail_after(60):
            async with Client(_params(repo, fault)) as c:
                r = await c.call_tool("run_benchmark", {})
                assert not r.is_error, r
                done.append("run_benchmark")
                revert_path = fault in ("save_and_test.before_revert", "save_and_test.after_revert")
                (ws / "kernel.py").write_text(kernel_source(SLOWER if revert_path else FASTER))
                r = await c.call_tool("save_and_test", {"target": "global", "hypothesis": "h1"})
                done.append("save_and_test")
                assert r.structured_content["verdict"] == "improved"
                await c.call_tool("commit_improvement", {"message": "faster"})
                done.append("commit_improvement")
    except TimeoutError:
        raise
    except BaseException:  # the connection closes under the client when the server is killed
        pass
    return done


def assert_ledger_consistent(sd: Path) -> None:
    """The ledger's chain verifies against the state, and no attempt has two final verdicts."""
    from kopt_mcp.ledger import Store

    store = Store(sd)
    store.load_state_json()
    assert store.verify() == []
    verdicts: dict[int, list[str]] = {}
    for e in store.ledger():
        if e["event"] == "attempt":
            verdicts.setdefault(e["attempt"], []).append(e["verdict"])
    assert all(len(v) == 1 for v in verdicts.values()), verdicts
    commits = [e["attempt"] for e in store.ledger() if e["event"] == "commit"]
    assert len(commits) == len(set(commits)), commits


def render_of(sd: Path) -> str:
    from kopt_mcp.ledger import TIME_COLUMN_CPU, Store, render_performance

    return render_performance(Store(sd).ledger(), "us_per_call", TIME_COLUMN_CPU)  # the toy measures on the CPU


async def _restart(repo: Path, then) -> tuple[dict, object]:
    with anyio.fail_after(60):
        async with Client(_params(repo, None)) as c:
            status = (await c.call_tool("status", {})).structured_content
            return status, await then(c)


@pytest.mark.parametrize("fault", POINTS)
def test_sigkill_at_each_fault_point_recovers(toy_repo, lease_dir, fault):
    ws = toy_repo / ".kopt" / "worktrees" / "t"
    done = anyio.run(_drive_until_killed, toy_repo, fault)
    assert done[-1] != "commit_improvement", f"the server did not die at {fault}"
    baseline = git(ws, "rev-list", "-1", "--grep", "kopt: baseline", "HEAD").stdout.strip()

    committed = fault in ("commit_improvement.after_git_commit", "commit_improvement.after_best_worktree",
                          "commit_improvement.after_state_save")
    sd = session_dir(toy_repo, "t")

    def check_recovered(status: dict) -> None:
        head = git(ws, "rev-parse", "HEAD").stdout.strip()
        # the phase agrees with git
        assert git(ws, "symbolic-ref", "HEAD").stdout.strip() == "refs/heads/kernel-opt/t"
        assert status["best_commit"] == head
        if committed:
            assert status["phase"] == "ready" and status["kept"] == 1 and head != baseline
            assert "kopt-mcp attempt 1, " in git(ws, "log", "-1", "--format=%B").stdout
            assert git(ws, "rev-parse", "HEAD^").stdout.strip() == baseline
            shown = git(ws, "show", "--stat", "--format=", "HEAD").stdout
            assert "kernel.py" in shown and "performance.md" in shown
            assert git(ws, "status", "--porcelain").stdout == ""
            assert status["best_metrics"] == {"n=1": 80.0, "n=2": 160.0}
        elif fault.startswith("commit_improvement."):
            # no commit yet: the exact tested tree is back, performance.md as committed, phase improved
            assert status["phase"] == "improved" and head == baseline and status["kept"] == 0
            assert git(ws, "status", "--porcelain").stdout.split() == ["M", "kernel.py"]
            assert '"1": 80.0' in (ws / "kernel.py").read_text()
        else:
            assert status["phase"] == "ready" and head == baseline
            assert git(ws, "status", "--porcelain").stdout == ""  # reverted to BEST
            patch = (sd / "attempts" / "0001-interrupted.patch").read_text()
            assert ('"1": 120.0' if "revert" in fault else '"1": 80.0') in patch
        assert git(ws, "diff", "--cached", "--quiet", check=False).returncode == 0  # nothing staged
        # performance.md (committed and in the tree) is exactly what the ledger's records render
        assert git(ws, "show", "HEAD:performance.md").stdout == render_of(sd) == (ws / "performance.md").read_text()
        assert_ledger_consistent(sd)

    async def follow_up(c):  # checked as found after the restart, then the session goes on
        s = (await c.call_tool("status", {})).structured_content
        check_recovered(s)
        if s["phase"] == "improved":
            return (await c.call_tool("commit_improvement", {"message": "again"})).structured_content
        (ws / "kernel.py").write_text(kernel_source(NEXT))
        return (await c.call_tool("save_and_test", {"target": "global", "hypothesis": "h2"})).structured_content

    status, after = anyio.run(_restart, toy_repo, follow_up)
    if fault.startswith("commit_improvement.") and not committed:
        assert after["committed"] is True  # the commit can be done again
    else:
        assert after["attempt"] == 2 and after["verdict"] == "improved"  # numbering goes on, nothing overwritten
    # every attempt archived, none left `pending`
    patches = sorted(p.name for p in (sd / "attempts").glob("*.patch"))
    attempts = status["attempts"]
    assert attempts >= 1
    for n in range(1, attempts + 1):
        assert any(p.startswith(f"{n:04d}-") for p in patches), (n, patches)
    assert not any("pending" in p for p in patches), patches
    ledger = (sd / "ledger.jsonl").read_text()
    if fault != "commit_improvement.after_state_save":
        assert '"event": "recovered"' in ledger
    assert_ledger_consistent(sd)


@pytest.mark.parametrize("fault", BASELINE_POINTS)
def test_sigkill_while_recording_the_baseline_leaves_no_half_commit_and_no_duplicate_rows(toy_repo, lease_dir, fault):
    ws = toy_repo / ".kopt" / "worktrees" / "t"

    async def killed():
        try:
            with anyio.fail_after(60):
                async with Client(_params(toy_repo, fault)) as c:
                    await c.call_tool("run_benchmark", {})
        except TimeoutError:
            raise
        except BaseException:  # the connection closes under the client when the server is killed
            return True
        return False

    assert anyio.run(killed), f"the server did not die at {fault}"
    start = git(toy_repo, "rev-parse", "HEAD").stdout.strip()
    if fault == "baseline.after_git_commit":  # the half-done commit is really there before the restart
        assert git(ws, "log", "-1", "--format=%s").stdout.strip() == "kopt: baseline"

    async def after(c):
        s = (await c.call_tool("status", {})).structured_content
        head = git(ws, "rev-parse", "HEAD").stdout.strip()
        assert s["phase"] == "needs_baseline" and head == start == s["best_commit"]
        assert git(ws, "status", "--porcelain").stdout == ""  # no stray performance.md rows
        r = (await c.call_tool("run_benchmark", {})).structured_content
        return r

    _, r = anyio.run(_restart, toy_repo, after)
    assert r["baseline_recorded"]
    perf = (ws / "performance.md").read_text()
    assert perf.count("| baseline |") == 2  # one row per class, recorded once
    assert perf == render_of(session_dir(toy_repo, "t"))
    assert git(ws, "log", "--format=%s").stdout.count("kopt: baseline") == 1
    assert '"event": "recovered"' in (session_dir(toy_repo, "t") / "ledger.jsonl").read_text()
    assert_ledger_consistent(session_dir(toy_repo, "t"))


@pytest.mark.parametrize("fault", STOP_POINTS)
def test_sigkill_while_writing_the_stop_summary_finishes_it_once_on_restart(tmp_path, lease_dir, fault):
    repo = make_toy_repo(tmp_path / "repo", {"1": 100.0, "2": 200.0}, extra_gates="max_consecutive_regressions = 1")
    ws = repo / ".kopt" / "worktrees" / "t"

    async def killed():
        try:
            with anyio.fail_after(60):
                async with Client(_params(repo, fault)) as c:
                    assert not (await c.call_tool("run_benchmark", {})).is_error
                    (ws / "kernel.py").write_text(kernel_source(SLOWER))  # one regression stops the session
                    await c.call_tool("save_and_test", {"target": "global", "hypothesis": "slower"})
        except TimeoutError:
            raise
        except BaseException:
            return True
        return False

    assert anyio.run(killed), f"the server did not die at {fault}"
    baseline = git(ws, "rev-list", "-1", "--grep", "kopt: baseline", "HEAD").stdout.strip()

    async def after(c):
        return (await c.call_tool("status", {})).structured_content

    status, _ = anyio.run(_restart, repo, lambda c: after(c))
    # the stop reason is the Stop Summary's line: the text is the product
    assert status["phase"] == "stopped" and "1 consecutive measured regressions" in status["stop_reason"]
    assert git(ws, "status", "--porcelain").stdout == ""
    assert git(ws, "log", "-1", "--format=%s").stdout.startswith("kopt: stop summary")
    assert git(ws, "rev-parse", "HEAD^").stdout.strip() == baseline  # on top of BEST_COMMIT, no candidate
    assert (ws / "performance.md").read_text().count("## Stop Summary") == 1
    assert git(ws, "log", "--format=%s").stdout.count("kopt: stop summary") == 1
    assert any(p.name == "0001-regressed.patch" for p in (session_dir(repo, "t") / "attempts").glob("*.patch"))
    assert_ledger_consistent(session_dir(repo, "t"))
    assert (ws / "performance.md").read_text() == render_of(session_dir(repo, "t"))


HOLDER = """
import sys, time
from pathlib import Path
from kopt_mcp.gpus.base import GpuReading
from kopt_mcp.gpus.lease import LeaseManager
m = LeaseManager(Path(sys.argv[1]), "dead")
assert m.try_acquire(GpuReading(index=0, uuid="GPU-crash", name="fake", vendor="nvidia")) is not None
print("held", flush=True)
time.sleep(600)
"""


def test_gpu_lease_of_a_sigkilled_holder_process_is_reclaimed(tmp_path):
    from kopt_mcp.gpus.base import GpuReading
    from kopt_mcp.gpus.lease import LeaseManager

    reading = GpuReading(index=0, uuid="GPU-crash", name="fake", vendor="nvidia")
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        mine = LeaseManager(tmp_path, "alive")
        assert mine.try_acquire(reading) is None and mine.holder("GPU-crash")["pid"] == proc.pid
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 5
    while mine.holder("GPU-crash") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mine.holder("GPU-crash") is None  # the stale .json of the dead holder means nothing
    lease = mine.try_acquire(reading)
    assert lease is not None and lease.uuid == "GPU-crash"
    mine.release()


def test_kill_between_state_save_and_archive_archives_the_tree_on_restart(ref, toy_repo, make_referee):
    """save_and_test saves the attempt number before writing the patch: a kill in between leaves the
    tree untouched, and recovery archives it as `interrupted` (a later attempt never overwrites it)."""
    from kopt_mcp.testing.toy import set_kernel

    set_kernel(ref.where.workspace_path, {"1": 90.0, "2": 180.0})
    n = ref.books.state.next_attempt
    ref.books.state.next_attempt += 1
    ref.books.state.in_progress = {"attempt": n, "tool": "save_and_test", "since": "x"}
    ref.books.save()
    ref.close()
    again = make_referee(toy_repo)
    assert '"1": 90.0' in (again.books.store.attempts / f"{n:04d}-interrupted.patch").read_text()
    assert again.books.store.root == session_dir(toy_repo, "t") and not (again.where.workspace_path / ".kopt").exists()
    assert again.books.state.in_progress is None and again.status().phase == "ready"
    assert '"1": 100.0' in (again.where.workspace_path / "kernel.py").read_text()


def test_stale_in_progress_marker_is_cleared(ref, toy_repo, make_referee):
    ref.books.state.in_progress = {"tool": "warm_up_harness"}
    ref.books.save()
    ref.close()
    again = make_referee(toy_repo)
    assert again.books.state.in_progress is None and again.status().phase == "ready"
    assert any(e["event"] == "recovered" for e in again.books.store.ledger())


def test_gpu_lease_held_by_a_real_server_killed_mid_attempt_is_reclaimed(tmp_path, lease_dir, monkeypatch):
    """The real server (stdio) leases the GPU that a replayed nvidia-smi shows idle (recorded H200
    output), is SIGKILLed after the candidate's run while it holds that lease, and the next
    LeaseManager on the host gets the GPU at once."""
    import json

    from kopt_mcp.gpus.base import GpuReading
    from kopt_mcp.gpus.lease import LeaseManager
    from tests.gpus.conftest import FIXTURES, IDLE

    repo = make_toy_repo(tmp_path / "repo", {"1": 100.0, "2": 200.0})
    cfg = repo / "kopt.toml"
    cfg.write_text(cfg.read_text().replace('gpu_probe = "none"', 'gpu_probe = "nvidia-smi"'))
    git(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qam", "probe nvidia-smi")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\ncase "$1" in --query-gpu=*) cat "{FIXTURES / IDLE[0]}";;\n'
                   f'--query-compute-apps=*) cat "{FIXTURES / IDLE[1]}";; esac\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")

    done = anyio.run(_drive_until_killed, repo, "save_and_test.after_candidate_run")
    assert done == ["run_benchmark"]
    uuid = "GPU-12d4823c-c93c-be36-630b-84be7a395e90"  # the recorded idle H200
    left = json.loads(next(lease_dir.glob("*.json")).read_text())
    assert left["uuid"] == uuid and left["pid"] != os.getpid()  # the dead server held it when killed
    mine = LeaseManager(lease_dir, "next")
    assert mine.holder(uuid) is None  # its .json means nothing: the lock died with it
    lease = mine.try_acquire(GpuReading(index=0, uuid=uuid, name="NVIDIA H200", vendor="nvidia"))
    assert lease is not None and lease.uuid == uuid
    mine.release()


# --- one commit point per transition ------------------------------------------------------------------


@pytest.mark.parametrize("fault", ["ledger.after_append:attempt", "state.after_save#5"])
def test_kill_after_the_verdict_is_committed_rolls_forward_with_one_verdict_record(toy_repo, lease_dir, fault):
    """The issue's case: killed between the verdict's ledger record and the end of the job. The state
    save is the commit point, so a restart keeps the verdict (phase improved) and the ledger holds
    exactly one record for the attempt (state.after_save#5: the 5th state save is save_and_test's
    final one, before its record reached the ledger)."""
    done = anyio.run(_drive_until_killed, toy_repo, fault)
    assert done == ["run_benchmark"], f"the server did not die at {fault}"
    sd = session_dir(toy_repo, "t")

    async def after(c):
        return (await c.call_tool("status", {})).structured_content

    status, _ = anyio.run(_restart, toy_repo, after)
    assert status["phase"] == "improved" and status["last_verdict"]["verdict"] == "improved"
    assert status["problems"] == []
    records = [e for e in _events(sd) if e["event"] == "attempt"]
    assert [(e["attempt"], e["verdict"]) for e in records] == [(1, "improved")]
    assert_ledger_consistent(sd)


def _events(sd: Path) -> list[dict]:
    from kopt_mcp.ledger import Store

    return Store(sd).ledger()


def test_failed_final_save_changes_nothing_in_memory_and_the_next_call_recovers(ref, monkeypatch):
    """Disk full at save_and_test's commit point: the in-memory state stays what state.json holds, no
    verdict reaches the ledger, and the next call recovers the attempt (archived, interrupted)."""
    import kopt_mcp.ledger as ledger_mod
    from kopt_mcp.errors import StateSaveError
    from kopt_mcp.testing.toy import set_kernel

    before = ref.books.state.model_copy(deep=True)
    real, saves = ledger_mod.atomic_write, []

    def full_disk(path, text):
        if path.name == "state.json":
            saves.append(path)
            if len(saves) == 2:  # 1: the job marker, 2: the verdict
                raise OSError(28, "No space left on device")
        real(path, text)

    monkeypatch.setattr(ledger_mod, "atomic_write", full_disk)
    set_kernel(ref.where.workspace_path, {"1": 120.0, "2": 240.0})  # regressed: reverted before the save
    with pytest.raises(StateSaveError, match="No space left.*nothing changed"):
        ref.save_and_test(target="global", hypothesis="slower")
    on_disk = json.loads(ref.books.store.state_path.read_text())
    on_disk.pop("ledger_anchor")
    assert ref.books.state.model_dump(mode="json") == on_disk  # memory == the last successful save
    assert ref.books.state.last == before.last and ref.books.state.regressions == before.regressions
    assert ref.books.state.in_progress["attempt"] == 1 and ref.books.state.outbox == []
    assert not [e for e in ref.books.store.ledger() if e["event"] == "attempt"]
    monkeypatch.setattr(ledger_mod, "atomic_write", real)  # space is back
    ref.revert_to_best()  # any operation first recovers the interrupted job
    verdicts = [(e["attempt"], e["verdict"], e["code"]) for e in ref.books.store.ledger() if e["event"] == "attempt"]
    assert verdicts == [(1, "interrupted", "interrupted")] and ref.books.state.in_progress is None
    assert '"1": 120.0' in ref.books.store.find_patch(1).read_text()


def test_failed_first_save_leaves_the_state_exactly_as_before(ref, monkeypatch):
    import kopt_mcp.ledger as ledger_mod
    from kopt_mcp.errors import StateSaveError
    from kopt_mcp.testing.toy import set_kernel

    before = ref.books.state.model_dump(mode="json")
    real = ledger_mod.atomic_write

    def read_only(path, text):
        if path.name == "state.json":
            raise OSError(30, "Read-only file system")
        real(path, text)

    monkeypatch.setattr(ledger_mod, "atomic_write", read_only)
    set_kernel(ref.where.workspace_path, {"1": 80.0, "2": 160.0})
    with pytest.raises(StateSaveError, match="Read-only"):
        ref.save_and_test(target="global", hypothesis="faster")
    assert ref.books.state.model_dump(mode="json") == before
    assert '"1": 80.0' in (ref.where.workspace_path / "kernel.py").read_text()  # the candidate is untouched


def _git_dir(worktree: Path) -> Path:
    return Path((worktree / ".git").read_text().split(":", 1)[1].strip())


def test_a_stale_index_lock_from_a_killed_git_does_not_stop_the_server(ref, toy_repo, make_referee):
    """A git process killed holding index.lock during a job: the restarted server removes the stale
    locks of its own worktrees, finishes the job and starts (before: a raw GitCommandError)."""
    from kopt_mcp.testing.toy import set_kernel

    set_kernel(ref.where.workspace_path, {"1": 90.0, "2": 180.0})
    ref.books.state.in_progress = {"attempt": ref.books.state.next_attempt, "tool": "save_and_test", "since": "x"}
    ref.books.state.next_attempt += 1
    ref.books.save()
    ref.close()
    locks = [_git_dir(ref.where.workspace_path) / "index.lock", _git_dir(ref.where.best_path) / "index.lock",
             toy_repo / ".git" / "refs" / "heads" / "kernel-opt" / "t.lock"]
    for lock in locks:
        lock.write_text("")
    again = make_referee(toy_repo)
    st = again.status()
    assert st.problems == [] and st.phase == "ready" and not any(x.exists() for x in locks)
    assert again.books.store.latest("stale_git_locks_removed")["paths"] == [str(x) for x in (locks[2], locks[0], locks[1])]
    assert '"1": 90.0' in again.books.store.find_patch(1).read_text()


def test_recovery_that_git_refuses_is_a_status_problem_not_a_traceback(ref, toy_repo, make_referee, monkeypatch):
    from kopt_mcp import vcs
    from kopt_mcp.errors import RefereeError
    from kopt_mcp.testing.toy import set_kernel

    set_kernel(ref.where.workspace_path, {"1": 90.0, "2": 180.0})
    ref.books.state.in_progress = {"attempt": ref.books.state.next_attempt, "tool": "save_and_test", "since": "x"}
    ref.books.state.next_attempt += 1
    ref.books.save()
    ref.close()
    real = vcs.reset_to

    def refuse(ws, commit):  # git refuses (a lock of a git process that still runs)
        ws.git.reset("--hard", "no-such-revision")

    monkeypatch.setattr(vcs, "reset_to", refuse)
    again = make_referee(toy_repo)  # starts anyway
    assert any("recovery at start failed" in p for p in again.status().problems)
    with pytest.raises(RefereeError, match="could not finish the interrupted job"):
        again.revert_to_best()
    monkeypatch.setattr(vcs, "reset_to", real)
    again.revert_to_best()  # recovered first, then reverted
    assert again.status().problems == []
    assert [e["verdict"] for e in again.books.store.ledger() if e["event"] == "attempt"] == ["interrupted"]


def test_a_second_server_on_the_workspace_is_refused_naming_the_running_session(ref, toy_repo, lease_dir):
    from kopt_mcp.errors import RefereeError
    from kopt_mcp.referee import Referee

    with pytest.raises(RefereeError, match=r'already runs on this git repository \(\{"tag": "t", "pid": \d+'):
        Referee(ref.where.workspace_path, tag="nested", lease_dir=lease_dir)
    ref.close()
    with pytest.raises(RefereeError, match="is the workspace of kopt-mcp session 't'"):
        Referee(ref.where.workspace_path, tag="nested", lease_dir=lease_dir)
    assert not (ref.where.workspace_path / ".kopt").exists()


@pytest.mark.parametrize("damage", ["edit", "truncate", "delete"])
def test_a_damaged_ledger_is_reported_in_status_and_the_server_starts(ref, toy_repo, make_referee, damage):
    ref.revert_to_best(reason="one more committed record")
    p = ref.books.store.ledger_path
    lines = p.read_text().splitlines()
    ref.close()
    if damage == "edit":
        lines[0] = lines[0].replace('"event": ', '"forged": 1, "event": ', 1)
        p.write_text("\n".join(lines) + "\n")
    elif damage == "truncate":
        p.write_text("\n".join(lines[:1]) + "\n")
    else:
        p.unlink()
    again = make_referee(toy_repo)
    problems = again.status().problems
    word = {"edit": "does not chain", "truncate": "truncated", "delete": "deleted"}[damage]
    assert any(word in x for x in problems), problems


def test_a_lock_of_a_git_process_still_running_in_the_workspace_is_left_alone(ref, toy_repo, make_referee):
    ref.close()
    lock = _git_dir(ref.where.workspace_path) / "index.lock"
    lock.write_text("")
    busy = subprocess.Popen(["git", "hash-object", "--stdin"], cwd=ref.where.workspace_path, stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL)  # a git process at work in the workspace (waits on stdin)
    try:
        again = make_referee(toy_repo)
        assert lock.exists() and again.status().phase == "ready"
    finally:
        busy.communicate(b"x")
