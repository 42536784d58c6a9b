"""The GPU availability gate, over NvidiaSmiProbe replaying recorded output, with a fake clock."""

from __future__ import annotations

import os
import threading

import pytest

from kopt_mcp.gpus.base import GpuReading
from kopt_mcp.gpus.gate import CPU_NOTE, GpuGate, IdleThresholds, busy_reasons
from kopt_mcp.gpus.lease import LeaseManager
from kopt_mcp.gpus.none import NoGpuProbe
from kopt_mcp.gpus.smi import NvidiaSmiProbe
from tests.gpus.conftest import BUSY, IDLE, X8, SmiReplay

TH = IdleThresholds()


def _read(pair):
    return NvidiaSmiProbe(SmiReplay(pair)).read()


def _gate(tmp_path, fake_time, *polls, wait_s=3600.0, poll_s=600.0, th=TH, tag="t"):
    probe = NvidiaSmiProbe(SmiReplay(*polls))
    return GpuGate(probe, LeaseManager(tmp_path, tag), th, wait_s=wait_s, poll_s=poll_s,
                   sleep=fake_time.sleep, clock=fake_time)


def test_busy_reasons_busy_h200():
    [g] = _read(BUSY)
    assert busy_reasons(g, TH) == ["1 compute process (pid 400 /opt/torch/.venv/bin/python3, 874 MiB)",
                                   "utilization 99% >= 10%"]
    assert busy_reasons(g, TH, frozenset({400})) == ["utilization 99% >= 10%"]  # own pid ignored
    assert busy_reasons(g, IdleThresholds(util_pct=100)) == [busy_reasons(g, TH)[0]]


def test_busy_reasons_idle_and_8x_gpu7_memory_busy_at_zero_util():
    assert busy_reasons(_read(IDLE)[0], TH) == []
    g7 = _read(X8)[7]
    assert busy_reasons(g7, TH) == ["1 compute process (pid 1758887, 58060 MiB)",
                                    "memory used 58071 MiB >= 2048 MiB"]
    assert busy_reasons(g7, TH, frozenset({1758887})) == ["memory used 58071 MiB >= 2048 MiB"]


def test_unknown_util_and_memory_are_no_reason():
    g = GpuReading(index=0, uuid="GPU-x", name="", vendor="nvidia", util_pct=None, mem_used_mib=None)
    assert busy_reasons(g, IdleThresholds(util_pct=0, mem_mib=0)) == []


def test_cpu_probe_passes_at_once(tmp_path):
    gate = GpuGate(NoGpuProbe(), LeaseManager(tmp_path, "t"), TH, wait_s=10, poll_s=1,
                   sleep=lambda s: pytest.fail("must not wait"))
    out = gate.acquire()
    assert out.lease.vendor == "cpu" and out.lease.env == {} and out.lease.lock_path == ""
    assert (out.polls, out.reason, out.device_note) == (0, "", CPU_NOTE)
    assert gate.held == out.lease
    gate.release()
    assert gate.held is None


def test_idle_gpu_is_leased_and_bound(tmp_path, fake_time):
    gate = _gate(tmp_path, fake_time, IDLE)
    out = gate.acquire()
    assert out.lease.uuid == "GPU-12d4823c-c93c-be36-630b-84be7a395e90"
    assert out.lease.env == {"CUDA_VISIBLE_DEVICES": "0"}
    assert (out.polls, out.waited_s, out.reason, fake_time.slept) == (1, 0.0, "", [])
    assert out.checks[0].busy == [] and out.checks[0].mem_total_mib == 143771.0
    assert LeaseManager(tmp_path, "other").try_acquire(_read(IDLE)[0]) is None  # really locked


def test_busy_then_idle_waits_one_poll_and_reports_progress(tmp_path, fake_time):
    gate = _gate(tmp_path, fake_time, BUSY, IDLE)
    seen = []
    out = gate.acquire(progress=lambda w, t, m: seen.append((w, t, m)))
    assert out.lease is not None and out.polls == 2 and fake_time.slept == [600.0]
    assert out.waited_s == 600.0
    [(waited, total, msg)] = seen
    assert (waited, total) == (0.0, 3600.0)
    assert "GPU 0: 1 compute process (pid 400" in msg and "utilization 99% >= 10%" in msg


def test_no_idle_gpu_for_the_whole_wait(tmp_path, fake_time):
    gate = _gate(tmp_path, fake_time, BUSY, wait_s=1000, poll_s=600)
    out = gate.acquire()
    assert out.lease is None and gate.held is None
    assert fake_time.slept == [600.0, 400.0]  # the last pause is cut to the time left
    assert out.polls == 3 and out.waited_s == 1000.0
    # the gate's message is the product: it names what keeps each device busy
    assert out.reason == ("no idle GPU after 1000 s: GPU 0: 1 compute process "
                          "(pid 400 /opt/torch/.venv/bin/python3, 874 MiB), utilization 99% >= 10%")


def test_8x_all_busy_names_every_gpu(tmp_path, fake_time):
    out = _gate(tmp_path, fake_time, X8, wait_s=0).acquire()
    assert out.lease is None and out.polls == 1 and fake_time.slept == []
    assert all(c.busy for c in out.checks) and len(out.checks) == 8
    for i in range(8):
        # the gate's message is the product: it names what keeps each device busy
        assert f"GPU {i}: 1 compute process" in out.reason
    assert "GPU 7: 1 compute process (pid 1758887, 58060 MiB), memory used 58071 MiB" in out.reason


def test_cancel_stops_the_wait(tmp_path, fake_time):
    cancel = threading.Event()
    gate = _gate(tmp_path, fake_time, BUSY)
    out = gate.acquire(progress=lambda *a: cancel.set(), cancel=cancel)
    # "cancelled" is the gate's marker of a cancelled wait (GateOutcome has no code)
    assert out.lease is None and out.reason == "cancelled" and out.polls == 1


def test_cancel_interrupts_a_real_wait_without_fake_sleep(tmp_path):
    cancel = threading.Event()
    gate = GpuGate(NvidiaSmiProbe(SmiReplay(BUSY)), LeaseManager(tmp_path, "t"), TH,
                   wait_s=3600, poll_s=600)  # real sleep: must be cut short by cancel
    threading.Timer(0.2, cancel.set).start()
    out = gate.acquire(cancel=cancel)
    # "cancelled" is the gate's marker of a cancelled wait (GateOutcome has no code)
    assert out.reason == "cancelled" and out.waited_s < 60


def test_gpu_leased_by_another_kopt_process_is_busy(tmp_path, fake_time):
    other = LeaseManager(tmp_path, "other-session")
    assert other.try_acquire(_read(IDLE)[0]) is not None
    out = _gate(tmp_path, fake_time, IDLE, wait_s=0).acquire()
    assert out.lease is None
    [busy] = out.checks[0].busy
    assert busy.startswith(f"leased by kopt-mcp pid {os.getpid()} (tag other-session) since ")


def test_held_lease_is_kept_while_only_own_processes_run(tmp_path, fake_time):
    gate = _gate(tmp_path, fake_time, BUSY, th=IdleThresholds(util_pct=100))
    first = gate.acquire(own_pids=frozenset({400}))  # our benchmark (pid 400) runs on it
    assert first.lease is not None
    gate.thresholds = IdleThresholds()  # 99% util would now be busy for a fresh search ...
    again = gate.acquire(own_pids=frozenset({400}))
    assert again.lease is first.lease and again.polls == 1  # ... but the held GPU is ours


def test_held_gpu_that_gets_a_foreign_process_is_given_up(tmp_path, fake_time):
    gate = _gate(tmp_path, fake_time, X8, wait_s=0, th=IdleThresholds(mem_mib=60000))
    first = gate.acquire(own_pids=frozenset({1758887}))
    assert first.lease.index == 7
    out = gate.acquire()  # pid 1758887 is no longer ours: a foreign process on our GPU
    assert out.lease is None and gate.held is None
    # the gate's message is the product: it names what keeps each device busy
    assert "GPU 7: 1 compute process (pid 1758887" in out.reason
    assert LeaseManager(tmp_path, "x").try_acquire(_read(X8)[7]) is not None  # lock released


def test_probe_that_sees_no_gpu(tmp_path, fake_time):
    class Empty:
        name = "nvml"

        def read(self):
            return []

    out = GpuGate(Empty(), LeaseManager(tmp_path, "t"), TH, sleep=fake_time.sleep,
                  clock=fake_time).acquire()
    # the gate's message is the product: it names what keeps each device busy
    assert out.lease is None and out.reason == "the probe 'nvml' sees no GPU"


def test_a_zero_poll_interval_is_refused(tmp_path):
    with pytest.raises(ValueError, match="poll_s > 0"):
        GpuGate(NoGpuProbe(), LeaseManager(tmp_path, "t"), TH, wait_s=10, poll_s=0)


# --- the CPU device's gate (probe "none" with a CpuLoadProbe): real psutil readings --------------

class _Hog:
    """A busy loop that is NOT in this process's tree (started by a shell that exits at once, so it
    is re-parented away): to the probe, another job on the cores."""

    def __init__(self, seconds: float = 60.0) -> None:
        import subprocess
        import sys

        from kopt_mcp.testing.toy import SPIN_LOOP

        loop = SPIN_LOOP.format(s=seconds)
        out = subprocess.run(["bash", "-c", f'{sys.executable} -c "{loop}" >/dev/null 2>&1 & echo $!'],
                             capture_output=True, text=True, check=True)
        self.pid = int(out.stdout.split()[0])

    def kill(self) -> None:
        import psutil

        try:
            psutil.Process(self.pid).kill()
        except psutil.NoSuchProcess:
            pass

    def wait(self) -> None:
        pass


def _hog(seconds: float = 60.0) -> _Hog:
    return _Hog(seconds)


def test_cpu_probe_sees_a_planted_busy_process_and_not_its_own_tree():
    import time

    import psutil

    from kopt_mcp.gpus.cpu import CpuLoadProbe

    hog = _hog()
    try:
        deadline = time.monotonic() + 30  # a loaded machine may start it slowly
        while psutil.Process(hog.pid).cpu_times().user < 0.2 and time.monotonic() < deadline:
            time.sleep(0.1)
        other = CpuLoadProbe(interval_s=2.0, top=10_000).read()  # every process that ran: a loaded
        [seen] = [p for p in other.top if p.pid == hog.pid]     # machine may have busier ones
        assert 0.0 < seen.pct <= 110.0  # % of one core
        assert other.other_pct >= seen.pct / other.cores * 0.9
        own = CpuLoadProbe(interval_s=2.0, top=10_000).read(own_pids=frozenset({hog.pid}))
        assert hog.pid not in [p.pid for p in own.top] and own.own_pct > 0.0
    finally:
        hog.kill()
        hog.wait()


def test_cpu_gate_waits_while_others_load_the_cores_then_proceeds(tmp_path):
    from kopt_mcp.gpus.cpu import CpuLoadProbe

    hog = _hog()
    try:
        seen = []
        gate = GpuGate(NoGpuProbe(), LeaseManager(tmp_path, "t"), IdleThresholds(cpu_pct=1.0), wait_s=10,
                       poll_s=600, cpu_probe=CpuLoadProbe(interval_s=0.5), cpu_wait_s=1.0)
        out = gate.acquire(progress=lambda w, t, m: seen.append(m))
        assert out.lease.vendor == "cpu" and out.polls >= 2 and out.waited_s >= 1.0
        assert "stayed busy" in out.device_note and out.cpu_load.other_pct >= 1.0
        assert seen and "CPU busy" in seen[0]
    finally:
        hog.kill()
        hog.wait()


def test_cpu_gate_passes_at_once_under_the_threshold(tmp_path):
    # a typed reading under the threshold (the real probe is tested above with a planted busy process;
    # read live here, a machine whose two cores are saturated by other work made this test wait)
    from kopt_mcp.gpus.cpu import CpuLoad

    class Quiet:
        name = "cpu-load"

        def read(self, own_pids=frozenset()):
            return CpuLoad(cores=2, interval_s=0.2, other_pct=30.0, own_pct=0.0)

    gate = GpuGate(NoGpuProbe(), LeaseManager(tmp_path, "t"), IdleThresholds(cpu_pct=50.0), wait_s=10,
                   poll_s=1, cpu_probe=Quiet(), cpu_wait_s=60, sleep=lambda s: pytest.fail("must not wait"))
    out = gate.acquire()
    assert out.lease.vendor == "cpu" and out.polls == 1 and out.cpu_load.other_pct == 30.0
    assert "under [gates] idle_cpu_pct = 50%" in out.device_note


def test_cpu_gate_cancelled_while_waiting(tmp_path, fake_time):
    from kopt_mcp.gpus.cpu import CpuLoad

    class Busy:
        name = "cpu-load"

        def read(self, own_pids=frozenset()):
            return CpuLoad(cores=2, interval_s=1.0, other_pct=100.0, own_pct=0.0)

    cancel = threading.Event()
    gate = GpuGate(NoGpuProbe(), LeaseManager(tmp_path, "t"), TH, poll_s=600, cpu_probe=Busy(), cpu_wait_s=60,
                   sleep=lambda s: cancel.set(), clock=fake_time)
    out = gate.acquire(cancel=cancel)
    # "cancelled" is the gate's marker of a cancelled wait (GateOutcome has no code)
    assert out.lease is None and out.reason == "cancelled"


def test_a_gpu_held_by_a_kopt_job_lease_is_checked_again_within_seconds(tmp_path, fake_time):
    """Two slots on one GPU: the waiting slot must not sleep the 600 s meant for a foreign job while
    the other slot measures: first its benchmark process shows on the GPU, then (between its runs)
    only its job lease; at its end the lease is released and the waiting slot takes the GPU."""
    from kopt_mcp.gpus.gate import JOB_POLL_S

    other = LeaseManager(tmp_path, "t")
    for recorded in (BUSY, IDLE):  # two recordings (two GPU uuids) stand for the one GPU here
        assert other.try_acquire(_read(recorded)[0]) is not None

    def sleep(s: float) -> None:
        fake_time.sleep(s)
        if len(fake_time.slept) == 2:
            other.release()  # the other slot's measuring call ended

    gate = GpuGate(NvidiaSmiProbe(SmiReplay(BUSY, IDLE, IDLE)), LeaseManager(tmp_path, "t"), TH,
                   wait_s=3600, poll_s=600, sleep=sleep, clock=fake_time)
    out = gate.acquire()
    assert out.lease is not None and out.polls == 3
    assert fake_time.slept == [JOB_POLL_S, JOB_POLL_S]


def test_a_foreign_job_without_a_kopt_lease_still_waits_poll_s(tmp_path, fake_time):
    out = _gate(tmp_path, fake_time, BUSY, IDLE).acquire()
    assert out.lease is not None and fake_time.slept == [600.0]


class _Readings:
    """A probe answering poll n with the n-th list of typed readings (the last repeats)."""

    name = "readings"

    def __init__(self, *polls: list[GpuReading]) -> None:
        self.polls, self.n = list(polls), 0

    def read(self) -> list[GpuReading]:
        self.n += 1
        return self.polls[min(self.n - 1, len(self.polls) - 1)]


def _h100(util: float, pids: tuple[int, ...] = ()) -> list[GpuReading]:
    from kopt_mcp.gpus.base import GpuProcess

    return [GpuReading(index=0, uuid="GPU-h100", name="NVIDIA H100 80GB HBM3", vendor="nvidia", util_pct=util,
                       mem_used_mib=1.0, mem_total_mib=81559.0, processes=[GpuProcess(pid=p) for p in pids])]


def _linger_gate(tmp_path, fake_time, *polls):
    msgs: list[str] = []
    gate = GpuGate(_Readings(*polls), LeaseManager(tmp_path, "t"), TH, wait_s=3600.0, poll_s=600.0,
                   sleep=fake_time.sleep, clock=fake_time)
    return gate, msgs


def test_utilization_lingering_after_kopts_own_job_is_checked_again_in_seconds(tmp_path, fake_time):
    """The H100 stall: warm_up_harness gave its lease back, and kernel_trace_analysis read "utilization
    11%" with no process left; it waited the 600 s meant for a foreign job."""
    from kopt_mcp.gpus.gate import JOB_POLL_S

    mine = LeaseManager(tmp_path, "t")
    assert mine.try_acquire(_h100(0.0)[0]) is not None
    mine.release()  # the previous measuring call's lease, given back just now
    gate, msgs = _linger_gate(tmp_path, fake_time, _h100(11.0), _h100(0.0))
    out = gate.acquire(progress=lambda w, t, m: msgs.append(m))
    assert out.lease is not None and fake_time.slept == [JOB_POLL_S]
    assert "utilization 11% >= 10%" in msgs[0] and "own job here ended" in msgs[0]


def test_utilization_without_a_recent_kopt_job_is_a_foreign_job(tmp_path, fake_time):
    import json
    import time

    from kopt_mcp.gpus.gate import JOB_GRACE_S

    gate, _ = _linger_gate(tmp_path, fake_time, _h100(11.0), _h100(0.0))
    assert gate.acquire().lease is not None and fake_time.slept == [600.0]  # never leased here
    gate.release()  # (stamps the release: overwritten next, as if it had been longer than JOB_GRACE_S ago)
    LeaseManager(tmp_path, "t").released_path("GPU-h100").write_text(json.dumps({"at": time.time() - JOB_GRACE_S - 1}))
    fake_time.slept.clear()
    gate2, _ = _linger_gate(tmp_path, fake_time, _h100(11.0), _h100(0.0))
    assert gate2.acquire().lease is not None and fake_time.slept == [600.0]


def test_a_compute_process_of_this_servers_own_run_is_waited_for_in_seconds(tmp_path, fake_time):
    import subprocess
    import sys

    from kopt_mcp.gpus.gate import JOB_POLL_S

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        gate, msgs = _linger_gate(tmp_path, fake_time, _h100(50.0, (child.pid,)), _h100(0.0))
        assert gate.acquire(progress=lambda w, t, m: msgs.append(m)).lease is not None
        assert fake_time.slept == [JOB_POLL_S] and f"pid {child.pid} is this server's own run" in msgs[0]
        gate.release()
        fake_time.slept.clear()
        stranger = os.getppid()  # pytest's parent: no descendant of this process
        gate2, _ = _linger_gate(tmp_path, fake_time, _h100(50.0, (stranger,)), _h100(0.0))
        assert gate2.acquire().lease is not None and fake_time.slept == [600.0]
    finally:
        child.kill()
