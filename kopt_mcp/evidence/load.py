"""The foreign load on the device during one run (pure data): sampled from outside the benchmark by
kopt_mcp/gpus/load.py; which rounds count under it is the rule in kopt_mcp/rules/load.py."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class ForeignProcess(BaseModel):
    """One process outside kopt-mcp's tree seen during a run: on the CPU its share of ALL cores'
    time over the run (`pct`, %: the shares and `RunLoad.unattributed_pct` add up to the run's
    `other_pct`); on a GPU the memory it held (`mem_mib`, MiB; None where the probe does not say)."""

    pid: int
    name: str
    pct: float | None = None
    mem_mib: float | None = None


class RunLoad(BaseModel):
    """The foreign load on the device during one run. `duration_s`: how long it was sampled (s);
    `samples`: readings taken. CPU: `other_pct` (% of all `cores`' time used outside kopt-mcp's
    tree, 0..100), `processes` (the busiest, with their shares) and `unattributed_pct` (the part of
    other_pct no sampled process accounts for: processes that started and ended between two
    readings, the kernel's own work); the named processes' shares, `rest_pct` and `unattributed_pct`
    add up to `other_pct`. GPU: `processes` (other compute processes) and `util_pct`
    (the highest utilization seen, this run's own work included)."""

    device: Literal["cpu", "gpu"]
    duration_s: float = 0.0
    samples: int = 0
    other_pct: float | None = None
    cores: int | None = None
    unattributed_pct: float = 0.0
    processes: list[ForeignProcess] = Field(default_factory=list)
    #: CPU: the other processes not named in `processes`, and their share of all cores (%)
    rest_processes: int = 0
    rest_pct: float = 0.0
    util_pct: float | None = None
    #: CPU: the most cores the benchmark's own processes used at once (CPU s per wall s over ~1 s
    #: intervals); None where not measured
    bench_cores: float | None = None

    def _count(self) -> str:
        n = len(self.processes)
        return f"{n} other compute process{'es' if n != 1 else ''}"

    def share(self) -> str:
        """This run's load in a few words: '88%' (CPU, of all cores) or '2 other compute processes' (GPU)."""
        return self._count() if self.device == "gpu" else f"{self.other_pct or 0.0:.0f}%"

    def shown(self) -> str:
        """'other processes used 71% of 2 cores (pid 12 stress 50%, pid 13 python 19%, 3 more processes
        1%, 1% not attributed to a process)' or '1 other compute process (pid 400 python, 874 MiB); utilization up to 99%'."""
        if self.device == "gpu":
            parts = [f"pid {p.pid} {p.name}" + (f", {p.mem_mib:.0f} MiB" if p.mem_mib is not None else "")
                     for p in self.processes]
            text = f"{self._count()} ({'; '.join(parts)})" if parts else "no other compute process"
            return text + (f"; utilization up to {self.util_pct:.0f}%" if self.util_pct is not None else "")
        cores = self.cores or 1
        parts = [f"pid {p.pid} {p.name} {p.pct:.0f}%" for p in self.processes if p.pct is not None]
        if self.rest_processes:
            parts.append(f"{self.rest_processes} more process{'es' if self.rest_processes != 1 else ''} "
                         f"{self.rest_pct:.0f}%")
        if self.unattributed_pct >= 0.5:
            parts.append(f"{self.unattributed_pct:.0f}% not attributed to a process")
        return (f"other processes used {self.other_pct or 0.0:.0f}% of {cores} core{'s' if cores != 1 else ''}"
                + (f" ({', '.join(parts)})" if parts else "")
                + (f"; the benchmark used up to {self.bench_cores:.1f} cores" if self.bench_cores is not None else ""))
