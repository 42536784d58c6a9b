"""The CPU device's availability probe: how much of the cores other processes use right now.

On a host without a GPU the CPU is the device, and a neighbour's job on the cores moves the
script metric as surely as a neighbour's kernel moves GPU time. `CpuLoadProbe.read` samples the
machine's CPU time twice, `interval_s` apart (psutil), and reports the share of all cores'
time spent outside the caller's own process tree (the server and everything it started), with
the busiest other processes named. The gate (`kopt_mcp.gpus.gate.GpuGate`) waits while that
share is at or above `[gates] idle_cpu_pct`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import psutil
from pydantic import BaseModel

__all__ = ["CpuLoad", "CpuLoadProbe", "CpuProcessLoad", "own_tree"]


class CpuProcessLoad(BaseModel):
    """One other process's CPU use over the sample: `pct` in % of ONE core (200 = two cores busy)."""

    pid: int
    name: str
    pct: float


class CpuLoad(BaseModel):
    """One sample: `other_pct` = % of ALL cores' time used by processes outside the own tree
    (0..100), over `interval_s` seconds on `cores` logical cores; `top` = the busiest of them."""

    cores: int
    interval_s: float
    other_pct: float
    own_pct: float
    top: list[CpuProcessLoad] = []

    def shown(self) -> str:
        """'other processes used 97% of 2 cores (pid 12 python 99%, pid 13 python 98%)'."""
        names = ", ".join(f"pid {p.pid} {p.name} {p.pct:.0f}%" for p in self.top)
        return (f"other processes used {self.other_pct:.0f}% of {self.cores} core"
                f"{'s' if self.cores != 1 else ''}" + (f" ({names})" if names else ""))


def own_tree(roots: frozenset[int]) -> set[int]:
    """The pids of `roots` and all their descendants still alive."""
    out = set()
    for pid in roots:
        try:
            p = psutil.Process(pid)
            out.add(pid)
            out.update(c.pid for c in p.children(recursive=True))
        except psutil.Error:
            pass
    return out


def _busy_s(t) -> float:
    """Busy seconds of a psutil.cpu_times() reading: all but idle and iowait (guest time is already
    inside user on Linux)."""
    idle = t.idle + getattr(t, "iowait", 0.0)
    total = sum(getattr(t, f) for f in t._fields if f not in ("guest", "guest_nice"))
    return total - idle


def _proc_times() -> dict[int, tuple[str, float]]:
    out = {}
    for p in psutil.process_iter(["name", "cpu_times"]):
        ct = p.info.get("cpu_times")
        if ct is not None:
            out[p.pid] = (p.info.get("name") or "?", ct.user + ct.system)
    return out


class CpuLoadProbe:
    """Reads other processes' load on the cores (module docstring). `interval_s`: the sample's
    length (s); `sleep` injectable. Raises ValueError for interval_s <= 0."""

    name = "cpu-load"

    def __init__(self, interval_s: float = 1.0, sleep: Callable[[float], None] = time.sleep, top: int = 3) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.interval_s = interval_s
        self._sleep = sleep
        self._top = top

    def read(self, own_pids: frozenset[int] = frozenset()) -> CpuLoad:
        """One sample. Processes in the tree of this process and of `own_pids` count as own.

        other_pct = (machine busy time - own tree's time) / (interval x cores) x 100, clipped to
        0..100: it also counts processes that started and ended inside the sample. Never raises
        for processes that end while being read."""
        roots = frozenset(own_pids) | {os.getpid()}
        cores = psutil.cpu_count() or 1
        own0 = own_tree(roots)
        p0, m0, t0 = _proc_times(), psutil.cpu_times(), time.monotonic()
        self._sleep(self.interval_s)
        p1, m1, t1 = _proc_times(), psutil.cpu_times(), time.monotonic()
        own = own0 | own_tree(roots)
        wall = max(t1 - t0, 1e-6)
        used = {pid: (name, max(0.0, s - p0[pid][1])) for pid, (name, s) in p1.items() if pid in p0}
        own_s = sum(s for pid, (_, s) in used.items() if pid in own)
        busy = max(0.0, _busy_s(m1) - _busy_s(m0))
        other = min(100.0, max(0.0, (busy - own_s) / (wall * cores) * 100.0))
        foreign = sorted(((pid, name, s) for pid, (name, s) in used.items() if pid not in own and s > 0),
                         key=lambda x: -x[2])[: self._top]
        return CpuLoad(cores=cores, interval_s=round(wall, 3), other_pct=round(other, 1),
                       own_pct=round(min(100.0, own_s / (wall * cores) * 100.0), 1),
                       top=[CpuProcessLoad(pid=pid, name=name, pct=round(s / wall * 100.0, 1))
                            for pid, name, s in foreign])
