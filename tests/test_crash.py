"""Crash safety: the real server over stdio, SIGKILLed at each fault point of save_and_test and
commit_improvement (KOPT_FAULT, see kopt_mcp/faults.py), then restarted: the state is consistent
with git, no attempt's diff is lost, no half commit exists, and the dead process's GPU lease is free."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from kopt_mcp.faults import BASELINE_POINTS, POINTS, STOP_POINTS
from kopt_mcp.paths import session_dir
from kopt_mcp.testing import kernel_source, make_toy_repo

FASTER = {"1": 80.0, "2": 160.0}
SLOWER = {"1": 120.0, "2": 240.0}
NEXT = {"1": 70.0, "2": 140.0}


def _params(repo: Path, fault: str | None) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k != "KOPT_FAULT"}
    if fault:
        env["KOPT_FAULT"] = fault
    return StdioServerParameters(command=sys.executable, args=["-m", "kopt_mcp.cli", "serve", "--repo", str(repo),
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
    from kopt_mcp.ledger import Store, render_performance

    return render_performance(Store(sd).ledger(), "us_per_call")


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
    from kopt_mcp.testing import set_kernel

    set_kernel(ref.workspace_path, {"1": 90.0, "2": 180.0})
    n = ref.state.next_attempt
    ref.state.next_attempt += 1
    ref.state.in_progress = {"attempt": n, "tool": "save_and_test", "since": "x"}
    ref.save()
    ref.close()
    again = make_referee(toy_repo)
    assert '"1": 90.0' in (again.store.attempts / f"{n:04d}-interrupted.patch").read_text()
    assert again.store.root == session_dir(toy_repo, "t") and not (again.workspace_path / ".kopt").exists()
    assert again.state.in_progress is None and again.status().phase == "ready"
    assert '"1": 100.0' in (again.workspace_path / "kernel.py").read_text()


def test_stale_in_progress_marker_is_cleared(ref, toy_repo, make_referee):
    ref.state.in_progress = {"tool": "warm_up_harness"}
    ref.save()
    ref.close()
    again = make_referee(toy_repo)
    assert again.state.in_progress is None and again.status().phase == "ready"
    assert any(e["event"] == "recovered" for e in again.store.ledger())


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
