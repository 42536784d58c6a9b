"""Per-job leases (issue 13 item 1): a device is leased for one measuring call and released at its
end, the session prefers the device it used last, the A/B runs of one verdict share one lease, the
ledger names the device of every run, and a lost device is retried once, then `failed`."""

from __future__ import annotations

import pytest

from kopt_mcp.bench.local import LocalExecutor
from kopt_mcp.errors import DeviceLost
from kopt_mcp.gpus.gate import IdleThresholds
from kopt_mcp.gpus.lease import LeaseManager
from kopt_mcp.gpus.smi import NvidiaSmiProbe
from kopt_mcp.testing.toy import RecordingRunner, fake_services, set_kernel
from tests.gpus.conftest import IDLE, SmiReplay

# 8 recorded H200s (index, uuid, memory) with the recorded idle process list: only leases decide
X8_IDLE = ("h200x8_query_gpu_index_uuid_mem_util_before.csv", IDLE[1])
ANY_LOAD = IdleThresholds(util_pct=101.0, mem_mib=1e9)
X8_UUIDS = ["GPU-a44622e3-2296-6285-0a86-84d0f6c67900", "GPU-4f31bb83-f8dc-d0af-029e-bc4356e6afeb"]


def _x8_executor(tmp_path, clock=None, tag="t") -> LocalExecutor:
    timing = {"sleep": clock.sleep, "clock": clock} if clock else {}
    return LocalExecutor(probe=NvidiaSmiProbe(SmiReplay(X8_IDLE)), lease_dir=tmp_path / "leases", tag=tag,
                         thresholds=ANY_LOAD, wait_s=0.0, **timing)


def test_two_jobs_of_one_process_get_two_devices_and_release_them(tmp_path):
    ex = _x8_executor(tmp_path)
    a, b = ex.acquire().lease, ex.acquire().lease
    assert (a.device.index, b.device.index) == (0, 1) and a.device_id == f"nvidia:0:{X8_UUIDS[0]}"
    assert a.device.env == {"CUDA_VISIBLE_DEVICES": "0"} and len(ex.held) == 2
    a.release()
    a.release()  # idempotent
    assert ex.held == [b]
    assert ex.acquire().lease.device.index == 0  # free again
    ex.close()
    assert ex.held == []


def test_the_device_used_last_is_preferred_when_idle(tmp_path):
    ex = _x8_executor(tmp_path)
    other = LeaseManager(tmp_path / "leases", "other")
    first = ex.acquire(prefer=X8_UUIDS[1]).lease
    assert first.device.index == 1  # GPU 0 is idle too, but the session used GPU 1 last
    first.release()
    r1 = NvidiaSmiProbe(SmiReplay(X8_IDLE)).read()[1]
    assert other.try_acquire(r1) is not None  # another server's job holds GPU 1 now
    assert ex.acquire(prefer=X8_UUIDS[1]).lease.device.index == 0  # so another idle GPU is taken
    other.release()


def test_a_job_holding_the_only_gpu_makes_another_server_wait_only_for_that_job(tmp_path):
    from kopt_mcp.gpus.gate import JOB_POLL_S
    from kopt_mcp.testing.toy import FakeClock

    idle1 = (IDLE[0], IDLE[1])
    mine = LocalExecutor(probe=NvidiaSmiProbe(SmiReplay(idle1)), lease_dir=tmp_path / "l", tag="a", wait_s=0.0)
    clock = FakeClock()
    theirs = LocalExecutor(probe=NvidiaSmiProbe(SmiReplay(idle1)), lease_dir=tmp_path / "l", tag="b", wait_s=1200.0,
                           poll_s=600.0, sleep=clock.sleep, clock=clock)
    job = mine.acquire().lease
    out = theirs.acquire()
    # the gate's message is the product: it names what keeps each device busy
    assert out.lease is None and "leased by kopt-mcp" in out.outcome.reason
    # a kopt-mcp job lease ends with its measuring call: checked every JOB_POLL_S, not every poll_s
    assert set(clock.slept) == {JOB_POLL_S} and sum(clock.slept) == 1200.0
    job.release()  # the measuring call ends
    assert theirs.acquire().lease is not None


def _gpu_referee(make_referee, toy_repo, **services):
    runner = RecordingRunner()
    probe = NvidiaSmiProbe(SmiReplay(IDLE))
    r = make_referee(toy_repo, services=fake_services(probe=probe, run=runner, **services))
    return r, runner


def test_every_run_of_a_verdict_runs_on_one_leased_device_recorded_in_the_ledger(toy_repo, make_referee):
    r, runner = _gpu_referee(make_referee, toy_repo)
    r.run_benchmark()
    assert r.jobs.executor.held == [] and r.jobs.job is None  # released after the baseline
    set_kernel(r.where.workspace_path, {"1": 50.0, "2": 100.0})
    v = r.save_and_test("global", "half")
    assert v.verdict == "improved" and r.jobs.executor.held == []
    assert {c[2]["CUDA_VISIBLE_DEVICES"] for c in runner.calls} == {"0"}  # every run bound to the leased GPU
    dev = "nvidia:0:GPU-12d4823c-c93c-be36-630b-84be7a395e90"
    events = r.books.store.ledger()
    assert next(e for e in events if e["event"] == "baseline")["device_id"] == dev
    assert next(e for e in events if e["event"] == "attempt")["device"] == dev
    c = r.commit_improvement()
    assert c.committed and next(e for e in r.books.store.ledger() if e["event"] == "commit")["device"] == dev
    assert r.jobs.last_device == "GPU-12d4823c-c93c-be36-630b-84be7a395e90" and r.jobs.executor.held == []


class _Losing:
    """An executor over a real LocalExecutor whose first `lose` job leases lose their device at their
    first run (as a Ray node that dies mid-job): the run raises DeviceLost."""

    def __init__(self, inner: LocalExecutor, lose: int) -> None:
        self.inner, self.lose, self.leases = inner, lose, 0

    def acquire(self, progress=None, cancel=None, prefer=None):
        grant = self.inner.acquire(progress, cancel, prefer)
        self.leases += 1
        if grant.lease is not None and self.leases <= self.lose:
            def lost(*a, **k):
                raise DeviceLost("node 10.0.0.7 died (planted)")

            grant.lease.measure = lost
        return grant

    def close(self):
        self.inner.close()

    @property
    def held(self):
        return self.inner.held


def _losing_referee(make_referee, toy_repo, lose_after_baseline: int):
    from kopt_mcp.referee.opening import local_executor

    made = []

    def executor(where, what, services):
        made.append(_Losing(local_executor(where, what, services), 0))
        return made[0]

    r = make_referee(toy_repo, services=fake_services(executor=executor))
    r.run_benchmark()
    made[0].lose, made[0].leases = lose_after_baseline, 0
    return r, made[0]


def test_a_device_lost_mid_verdict_is_retried_once_on_a_new_lease(toy_repo, make_referee):
    r, ex = _losing_referee(make_referee, toy_repo, lose_after_baseline=1)
    set_kernel(r.where.workspace_path, {"1": 50.0, "2": 100.0})
    v = r.save_and_test("global", "half")
    assert v.verdict == "improved" and ex.leases == 2
    assert any("device was lost" in w for w in v.warnings)
    [lost] = [e for e in r.books.store.ledger() if e["event"] == "device_lost"]
    assert lost["retrying"] is True and lost["device"] == "cpu" and r.jobs.executor.held == []


def test_a_device_lost_twice_is_a_failed_verdict_and_the_candidate_is_archived(toy_repo, make_referee):
    r, ex = _losing_referee(make_referee, toy_repo, lose_after_baseline=2)
    set_kernel(r.where.workspace_path, {"1": 50.0, "2": 100.0})
    v = r.save_and_test("global", "half")
    assert (v.verdict, v.code) == ("failed", "device_lost") and v.reverted and ex.leases == 2
    assert "50.0" in (r.books.store.attempts / f"{v.attempt:04d}-failed.patch").read_text()
    rec = next(e for e in r.books.store.ledger() if e["event"] == "attempt")
    assert len(rec["lost_devices"]) == 2 and r.status().phase == "ready"


def test_a_device_lost_twice_in_a_check_run_is_an_error_saying_so(toy_repo, make_referee):
    r, ex = _losing_referee(make_referee, toy_repo, lose_after_baseline=2)
    from kopt_mcp.errors import RefereeError

    with pytest.raises(RefereeError, match="lost twice"):
        r.run_benchmark()
    ex.lose, ex.leases = 1, 0
    assert r.run_benchmark().ok and ex.leases == 2  # once lost, then measured on a new lease
