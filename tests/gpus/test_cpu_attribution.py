"""Who used the CPU and how many cores the benchmark used (gpus/cpu.py, gpus/load.py; issue 36, item 4).

Attribution on a fake process table (psutil.process_iter and psutil.cpu_times replaced): each process
is named with its own CPU time, never its reaped children's, so a shell that only waited is not
blamed; its ended children are named apart. The benchmark's peak cores come from scripted readings,
and one real planted child bounds them from above (one process cannot use more than one core)."""

from __future__ import annotations

import subprocess
import sys
from collections import namedtuple
from types import SimpleNamespace

import psutil
import pytest

from kopt_mcp.gpus import cpu as cpu_mod
from kopt_mcp.gpus import load as load_mod
from kopt_mcp.gpus.cpu import CpuReading, cpu_load_between, process_seconds, read_cpu
from kopt_mcp.gpus.load import CpuLoadSampler, bench_cores, forget_bench_cores, recent_bench_cores
from kopt_mcp.testing.toy import SPIN_LOOP, spinning_thread

Times = namedtuple("Times", "user system children_user children_system")
Machine = namedtuple("Machine", "user nice system idle iowait")
SHELL, CHILD, HOG = 4_100_001, 4_100_002, 4_100_003  # pids no real process holds at once


def _proc(pid, name, ppid, user, children=0.0, created=1000.0):
    info = {"name": name, "cpu_times": Times(user, 0.0, children, 0.0), "create_time": created, "ppid": ppid}
    return SimpleNamespace(pid=pid, info=info)


def _reading(monkeypatch, procs, busy_s) -> CpuReading:
    monkeypatch.setattr(cpu_mod.psutil, "process_iter", lambda attrs: iter(procs))
    monkeypatch.setattr(cpu_mod.psutil, "cpu_times", lambda: Machine(busy_s, 0.0, 0.0, 1e6, 0.0))
    return read_cpu()


def test_a_shell_that_only_reaped_its_children_is_not_blamed_for_them(monkeypatch):
    """At `a` the shell (0.1 s of its own) runs a child that has used 0.5 s; by `b` the child ended
    after 1.5 s in all (the shell's children time holds it) and a hog used 1.2 s of its own."""
    a = _reading(monkeypatch, [_proc(SHELL, "bash", 1, 0.1), _proc(CHILD, "python", SHELL, 0.5),
                               _proc(HOG, "stress", 1, 10.0)], busy_s=100.0)
    b = _reading(monkeypatch, [_proc(SHELL, "bash", 1, 0.1, children=1.5), _proc(HOG, "stress", 1, 11.2)],
                 busy_s=102.2)
    a.t, b.t = 0.0, 2.0  # two seconds apart
    used = process_seconds(a, b)
    assert used[SHELL] == ("bash", 0.0)  # its own time did not move
    assert used[-SHELL] == ("(ended children of bash)", pytest.approx(1.0))  # 1.5 s, less the 0.5 s before `a`
    assert used[HOG] == ("stress", pytest.approx(1.2))
    load = cpu_load_between(a, b, used)
    cores = psutil.cpu_count()
    shares = {(p.pid, p.name): p.share_pct for p in load.top}
    assert shares == {(HOG, "stress"): round(1.2 / (2.0 * cores) * 100, 1),  # % of all cores over 2 s
                      (SHELL, "(ended children of bash)"): round(1.0 / (2.0 * cores) * 100, 1)}
    assert load.other_pct == pytest.approx(round(2.2 / (2.0 * cores) * 100, 1), abs=0.05)
    assert "pid 4100001 bash " not in load.shown()


def test_a_new_process_counts_its_own_time_and_its_ended_children_apart(monkeypatch):
    a = _reading(monkeypatch, [], busy_s=50.0)
    b = _reading(monkeypatch, [_proc(SHELL, "make", 1, 0.2, children=0.9, created=a.wall + 0.5)], busy_s=51.1)
    used = process_seconds(a, b)
    assert used[SHELL] == ("make", pytest.approx(0.2)) and used[-SHELL] == ("(ended children of make)", pytest.approx(0.9))


def _scripted(bench: list[tuple[float, float]]):
    """CpuReadings at (t s, the benchmark's CPU s so far) with no other process."""
    return iter([CpuReading(t=t, wall=1000.0 + t, busy_s=s, own_s=s, bench_s=s) for t, s in bench])


def test_the_benchmarks_peak_cores_are_its_busiest_interval(monkeypatch):
    forget_bench_cores()
    # 1 s at one core (start-up), 1 s at 1.9 cores (threads), 0.2 s at 2 cores: too short a tail to count
    readings = _scripted([(0.0, 0.0), (1.0, 1.0), (2.0, 2.9), (2.2, 3.3)])
    monkeypatch.setattr(load_mod, "read_cpu", lambda roots: next(readings))
    s = CpuLoadSampler(period_s=60.0)
    for _ in range(4):
        s._read()
    s.reads = 4
    run = s.summary()
    assert run.bench_cores == pytest.approx(min(1.9, psutil.cpu_count()))
    assert recent_bench_cores() == run.bench_cores
    s.summary()  # asking twice remembers the run once
    forget_bench_cores()
    assert recent_bench_cores() is None
    a, b = _scripted([(0.0, 0.0), (0.4, 0.2)])
    assert bench_cores(a, b) == pytest.approx(0.5)


def test_a_single_process_run_is_never_more_than_one_core_and_the_servers_threads_are_not_its():
    """A planted run (one spinning child) beside a busy thread of this process: the thread is the
    server's, not the benchmark's, so the run used at most one core (plus reading jitter)."""
    with CpuLoadSampler() as s, spinning_thread():
        subprocess.run([sys.executable, "-c", SPIN_LOOP.format(s=2.0)], check=True)
    run = s.summary()
    forget_bench_cores()
    assert run is not None and 0.0 < run.bench_cores <= 1.15


class _WholeCore:
    """A neighbour holding one whole core of a 2-core machine, as the gate's probe reads it."""

    name = "cpu-load"

    def read(self, own_pids=frozenset()):
        from kopt_mcp.gpus.cpu import CpuLoad

        return CpuLoad(cores=2, interval_s=1.0, other_pct=49.6, own_pct=0.0)


def test_the_cpu_gate_waits_on_a_whole_foreign_core_for_a_benchmark_that_used_two(tmp_path, fake_time):
    from kopt_mcp.gpus.gate import GpuGate, IdleThresholds
    from kopt_mcp.gpus.lease import LeaseManager
    from kopt_mcp.gpus.none import NoGpuProbe

    def gate():
        return GpuGate(NoGpuProbe(), LeaseManager(tmp_path, "t"), IdleThresholds(cpu_pct=50.0), poll_s=5,
                       cpu_probe=_WholeCore(), cpu_wait_s=20, sleep=fake_time.sleep, clock=fake_time)

    forget_bench_cores()
    single = gate().acquire()
    assert single.lease.vendor == "cpu" and (single.polls, single.waited_s) == (1, 0)  # single-threaded: 49.6 < 50%
    load_mod._recent.append(1.9)  # the last sampled run used 1.9 cores
    try:
        out = gate().acquire()
    finally:
        forget_bench_cores()
    assert out.lease is not None and (out.polls, out.waited_s) == (5, 20)  # waited it out: the limit is 12.5%
    assert "12.5%" in out.device_note and "1.9 cores" in out.device_note
