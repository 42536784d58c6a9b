"""A run that ends while the machine is being read is counted once (gpus/cpu.py `read_cpu`).

CI's run of 42e6890 read 0.0 cores for a run that spun one core for 2 s: the sampler read this
process's finished children's time, then the run ended and was reaped, then the scan reached the
run's pid and found it gone, so that reading held the run's time nowhere. Both orders are planted
here with a real child whose CPU time is exact (it is read as a zombie, before it is reaped); the
bounds leave room for children that other threads of this test process reap meanwhile, not for a
second count of the run's."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
from kopt_mcp.gpus import cpu as cpu_mod
from kopt_mcp.gpus.cpu import read_cpu

BURN = "import time\nt=time.process_time()+{s}\nwhile time.process_time()<t: pass"


def _ended_child(cpu_s: float = 0.5) -> tuple[subprocess.Popen, float]:
    """A child that burned `cpu_s` of CPU and exited, not yet reaped; with its CPU seconds."""
    child = subprocess.Popen([sys.executable, "-c", BURN.format(s=cpu_s)])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, still a zombie
    t = psutil.Process(child.pid).cpu_times()
    return child, t.user + t.system


def test_a_run_reaped_after_the_servers_entry_was_read_still_counts(monkeypatch):
    """The scan reads this process first, the run is reaped, the scan goes on without it."""
    a = read_cpu()
    child, used = _ended_child()
    real = psutil.process_iter

    def scan(attrs):
        me = psutil.Process()
        me.info = me.as_dict(attrs)
        yield me
        child.wait()  # reaped between this process's entry and the run's
        yield from (p for p in real(attrs) if p.pid != os.getpid())

    monkeypatch.setattr(cpu_mod.psutil, "process_iter", scan)
    b = read_cpu()
    assert child.returncode == 0 and used >= 0.5
    assert used - 0.02 <= b.bench_s - a.bench_s < 1.5 * used  # other threads of this process may reap theirs
    assert b.own_s - a.own_s >= used - 0.02


def test_a_run_reaped_between_its_reading_and_the_servers_counts_once(monkeypatch):
    """The scan sees the run; it is reaped just after its own times are read again, before this
    process's are: its time is both in its entry and in this process's finished children."""
    a = read_cpu()
    child, used = _ended_child()
    real_iter, real_times = psutil.process_iter, psutil.Process.cpu_times
    scanned = []

    def scan(attrs):
        yield from real_iter(attrs)
        scanned.append(True)

    def times(self):
        out = real_times(self)
        if scanned and self.pid == child.pid and child.returncode is None:
            child.wait()
        return out

    times.cache_activate, times.cache_deactivate = real_times.cache_activate, real_times.cache_deactivate  # oneshot()
    monkeypatch.setattr(cpu_mod.psutil, "process_iter", scan)
    monkeypatch.setattr(psutil.Process, "cpu_times", times)
    b = read_cpu()
    assert child.returncode == 0 and used >= 0.5
    assert used - 0.02 <= b.bench_s - a.bench_s < 1.5 * used  # not twice
