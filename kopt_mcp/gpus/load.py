"""The foreign load on the leased device during one measured run, sampled from outside the benchmark.

Like the SM clock (kopt_mcp.gpus.clocks.ClockSampler), a sampler runs in a daemon thread of the
referee's process while the benchmark command runs (bench.measure wraps exactly that command, not
the correctness command after it), so nothing the benchmark process does can write its figures:

- `CpuLoadSampler` (the CPU device): machine readings (kopt_mcp.gpus.cpu.read_cpu) at the start,
  every `period_s` and at the end; other processes' share of all cores over the whole run, the
  busiest named with their shares (each process's own CPU seconds summed over the readings), and
  the most cores the benchmark's own processes used (`RunLoad.bench_cores`: their CPU seconds per
  wall second between two readings at least MIN_PEAK_S apart, the whole run's where none is);
- `GpuLoadSampler` (a GPU): the gate's probe read every `period_s`: other compute processes on the
  leased GPU (kopt-mcp's own tree left out) and the highest utilization seen.

`summary()` gives the run's `kopt_mcp.evidence.load.RunLoad` (None where nothing could be read); a
read that fails ends the sampling, never the run. `LoadFactory` builds a fresh sampler per run.
"""

from __future__ import annotations

import os
import threading
import time
from collections import deque
from collections.abc import Callable

from kopt_mcp.evidence.load import ForeignProcess, RunLoad
from kopt_mcp.gpus.base import GpuProbe, GpuReading
from kopt_mcp.gpus.cpu import TOP, CpuReading, cpu_load_between, own_tree, process_seconds, read_cpu
from kopt_mcp.gpus.sampler import PeriodicSampler

#: seconds between two readings while a run lasts (a reading walks the process table: ~10 ms)
CPU_PERIOD_S = 1.0
#: the shortest interval between two readings whose benchmark CPU time gives a peak (s): over shorter
#: ones the process table's own reading time (~10 ms) weighs too much
MIN_PEAK_S = 0.5
GPU_PERIOD_S = 2.0  # a probe read may spawn nvidia-smi (~0.1 s of CPU): sparser on a GPU


#: the benchmark's peak cores in this server's last RECENT_RUNS sampled CPU runs (`recent_bench_cores`)
RECENT_RUNS = 5
_recent: deque[float] = deque(maxlen=RECENT_RUNS)
_recent_lock = threading.Lock()


def recent_bench_cores() -> float | None:
    """The most cores the benchmark used in this process's last RECENT_RUNS sampled CPU runs (the CPU
    gate judges a neighbour against it before a run: gpus/gate.py); None before the first."""
    with _recent_lock:
        return max(_recent, default=None)


def forget_bench_cores() -> None:
    """Forget the runs `recent_bench_cores` remembers (a new benchmark, a test)."""
    with _recent_lock:
        _recent.clear()


class CpuLoadSampler(PeriodicSampler):
    """Other processes' load on the cores while a run lasts (module docstring). `own_pids`: more
    roots of kopt-mcp's own tree besides this process."""

    def __init__(self, own_pids: frozenset[int] = frozenset(), period_s: float = CPU_PERIOD_S, top: int = TOP) -> None:
        super().__init__(period_s, "kopt-load-sampler")
        self._roots, self._top = frozenset(own_pids), top
        self._first: CpuReading | None = None
        self._last: CpuReading | None = None
        self._used: dict[int, tuple[str, float]] = {}
        self._peak: float | None = None
        self._remembered = False

    def _read(self) -> None:
        r = read_cpu(self._roots)
        if self._last is not None:
            for pid, (name, s) in process_seconds(self._last, r).items():
                self._used[pid] = (name, self._used.get(pid, (name, 0.0))[1] + s)
            if r.t - self._last.t >= MIN_PEAK_S:
                self._peak = max(self._peak or 0.0, bench_cores(self._last, r))
        self._first = self._first or r
        self._last = r

    def summary(self) -> RunLoad | None:
        """The run's load (evidence.load.RunLoad, device "cpu"), or None with fewer than 2 readings."""
        if self._first is None or self._last is None or self._last is self._first:
            return None
        load = cpu_load_between(self._first, self._last, dict(self._used), self._top)
        peak = round(min(self._peak if self._peak is not None else bench_cores(self._first, self._last), load.cores), 2)
        if not self._remembered:
            self._remembered = True
            with _recent_lock:
                _recent.append(peak)
        return load.as_run_load(self.reads).model_copy(update={"bench_cores": peak})


def bench_cores(a: CpuReading, b: CpuReading) -> float:
    """The cores the benchmark's own processes used between readings `a` and `b`: their CPU seconds
    (`CpuReading.bench_s`) per wall second, 0 for readings less than 1 ms apart."""
    dt = b.t - a.t
    return max(0.0, b.bench_s - a.bench_s) / dt if dt >= 1e-3 else 0.0


class GpuLoadSampler(PeriodicSampler):
    """Other compute processes on the GPU `uuid` while a run lasts, through `probe` (the gate's);
    kopt-mcp's own tree (this process, `own_pids` and their descendants) is left out."""

    def __init__(self, probe: GpuProbe, uuid: str, own_pids: frozenset[int] = frozenset(),
                 period_s: float = GPU_PERIOD_S) -> None:
        super().__init__(period_s, "kopt-load-sampler")
        self._probe, self._uuid, self._roots = probe, uuid, frozenset(own_pids) | {os.getpid()}
        self._procs: dict[int, ForeignProcess] = {}
        self._util: float | None = None
        self._t0: float | None = None
        self._t1: float | None = None

    def _read(self) -> None:
        mine: GpuReading | None = next((r for r in self._probe.read() if r.uuid == self._uuid), None)
        now = time.monotonic()
        self._t0, self._t1 = self._t0 or now, now
        if mine is None:
            return
        if mine.util_pct is not None:
            self._util = max(self._util or 0.0, float(mine.util_pct))
        foreign = [p for p in mine.processes if p.pid not in self._roots]
        if foreign:
            own = own_tree(self._roots)
            for p in foreign:
                if p.pid in own:
                    continue
                seen = self._procs.get(p.pid)
                mems = [m for m in (p.used_mib, seen.mem_mib if seen else None) if m is not None]
                self._procs[p.pid] = ForeignProcess(pid=p.pid, name=p.name or "?", mem_mib=max(mems) if mems else None)

    def summary(self) -> RunLoad | None:
        """The run's load (evidence.load.RunLoad, device "gpu"), or None when no reading succeeded."""
        if not self.reads:
            return None
        return RunLoad(device="gpu", duration_s=round((self._t1 or 0.0) - (self._t0 or 0.0), 3), samples=self.reads,
                       processes=sorted(self._procs.values(), key=lambda p: p.pid), util_pct=self._util)


#: a fresh sampler for one run (a context manager with `summary() -> RunLoad | None`)
LoadFactory = Callable[[], "CpuLoadSampler | GpuLoadSampler"]


#: (vendor, uuid, the gate's probe) -> the leased device's sampler factory, or None (`load_factory`)
LoadSources = Callable[[str, str, "GpuProbe | None"], "LoadFactory | None"]


def load_factory(vendor: str, uuid: str, probe: GpuProbe | None) -> LoadFactory | None:
    """The sampler factory for a leased device: the CPU's for vendor "cpu", the probe's GPU sampler
    for a GPU the probe reads; None without a probe."""
    if vendor == "cpu":
        return CpuLoadSampler
    if probe is None or probe.name == "none":
        return None
    return lambda: GpuLoadSampler(probe, uuid)


__all__ = ["CpuLoadSampler", "GpuLoadSampler", "LoadFactory", "LoadSources", "bench_cores", "forget_bench_cores", "load_factory",
           "recent_bench_cores"]
