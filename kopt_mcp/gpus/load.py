"""The foreign load on the leased device during one measured run, sampled from outside the benchmark.

Like the SM clock (kopt_mcp.gpus.clocks.ClockSampler), a sampler runs in a daemon thread of the
referee's process while the benchmark command runs (bench.measure wraps exactly that command, not
the correctness command after it), so nothing the benchmark process does can write its figures:

- `CpuLoadSampler` (the CPU device): machine readings (kopt_mcp.gpus.cpu.read_cpu) at the start,
  every `period_s` and at the end; other processes' share of all cores over the whole run, the
  busiest named with their shares (each process's CPU seconds summed over the readings);
- `GpuLoadSampler` (a GPU): the gate's probe read every `period_s`: other compute processes on the
  leased GPU (kopt-mcp's own tree left out) and the highest utilization seen.

`summary()` gives the run's `kopt_mcp.evidence.load.RunLoad` (None where nothing could be read); a
read that fails ends the sampling, never the run. `LoadFactory` builds a fresh sampler per run.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from kopt_mcp.evidence.load import ForeignProcess, RunLoad
from kopt_mcp.gpus.base import GpuProbe, GpuReading
from kopt_mcp.gpus.cpu import TOP, CpuReading, cpu_load_between, own_tree, process_seconds, read_cpu
from kopt_mcp.gpus.sampler import PeriodicSampler

#: seconds between two readings while a run lasts (a reading walks the process table: ~10 ms)
CPU_PERIOD_S = 1.0
GPU_PERIOD_S = 2.0  # a probe read may spawn nvidia-smi (~0.1 s of CPU): sparser on a GPU


class CpuLoadSampler(PeriodicSampler):
    """Other processes' load on the cores while a run lasts (module docstring). `own_pids`: more
    roots of kopt-mcp's own tree besides this process."""

    def __init__(self, own_pids: frozenset[int] = frozenset(), period_s: float = CPU_PERIOD_S, top: int = TOP) -> None:
        super().__init__(period_s, "kopt-load-sampler")
        self._roots, self._top = frozenset(own_pids), top
        self._first: CpuReading | None = None
        self._last: CpuReading | None = None
        self._used: dict[int, tuple[str, float]] = {}

    def _read(self) -> None:
        r = read_cpu(self._roots)
        if self._last is not None:
            for pid, (name, s) in process_seconds(self._last, r).items():
                self._used[pid] = (name, self._used.get(pid, (name, 0.0))[1] + s)
        self._first = self._first or r
        self._last = r

    def summary(self) -> RunLoad | None:
        """The run's load (evidence.load.RunLoad, device "cpu"), or None with fewer than 2 readings."""
        if self._first is None or self._last is None or self._last is self._first:
            return None
        return cpu_load_between(self._first, self._last, dict(self._used), self._top).as_run_load(self.reads)


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


__all__ = ["CpuLoadSampler", "GpuLoadSampler", "LoadFactory", "LoadSources", "load_factory"]
