"""What the gates judge a device by: the idle thresholds, a GPU's busy reasons, the check of one GPU
and the outcome of a gate (kopt_mcp/gpus/gate.py: the GPU gate; kopt_mcp/gpus/cpu_gate.py: the CPU's)."""

from __future__ import annotations

from pydantic import BaseModel

from kopt_mcp.gpus.base import GpuReading, Vendor
from kopt_mcp.gpus.cpu import CpuLoad
from kopt_mcp.gpus.lease import Lease
from kopt_mcp.rules.load import cpu_limit_pct, limit_shown


class IdleThresholds(BaseModel):
    """A GPU is busy at `util_pct` % utilization or `mem_mib` MiB memory used, or above; the CPU
    device at `cpu_pct` % of all cores' time used by other processes, or above; with `cpu_exclusive`
    (`[gates] exclusive_cpu`) at a quarter of one core (rules.load.EXCLUSIVE_CORE_PCT)."""

    util_pct: float = 10.0
    mem_mib: float = 2048.0
    cpu_pct: float = 50.0
    cpu_exclusive: bool = False

    def cpu_limit_pct(self, cores: int, bench_cores: float | None = None) -> float:
        """The CPU gate's limit in % of all `cores`' time for a benchmark using up to `bench_cores` cores
        (rules.load.cpu_limit_pct; 100: off)."""
        limit = cpu_limit_pct(self.cpu_pct, self.cpu_exclusive, cores, bench_cores)
        return 100.0 if limit is None else limit

    def cpu_limit_shown(self) -> str:
        """'[gates] idle_cpu_pct = 50%' or '[gates] exclusive_cpu (other processes under 25% of one core)'."""
        return limit_shown(self.cpu_pct, self.cpu_exclusive)


def num_shown(x: float) -> str:
    """A number for a message: 874.0 -> "874", 12.25 -> "12.2"."""
    return str(int(x)) if float(x).is_integer() else f"{x:.1f}"


def busy_reasons(reading: GpuReading, th: IdleThresholds,
                 own_pids: frozenset[int] = frozenset()) -> list[str]:
    """Why `reading`'s GPU is not idle, as sentences; [] when idle.

    E.g. "1 compute process (pid 400 /opt/torch/.venv/bin/python3, 874 MiB)",
    "utilization 99% >= 10%", "memory used 58071 MiB >= 2048 MiB". Processes whose pid is in
    `own_pids` are ignored; unknown (None) utilization or memory is no reason.
    """
    out = []
    foreign = [p for p in reading.processes if p.pid not in own_pids]
    if foreign:
        parts = []
        for p in foreign:
            s = f"pid {p.pid}" + (f" {p.name}" if p.name else "")
            parts.append(s + (f", {num_shown(p.used_mib)} MiB" if p.used_mib is not None else ""))
        word = "process" if len(foreign) == 1 else "processes"
        out.append(f"{len(foreign)} compute {word} ({'; '.join(parts)})")
    if reading.util_pct is not None and reading.util_pct >= th.util_pct:
        out.append(f"utilization {num_shown(reading.util_pct)}% >= {num_shown(th.util_pct)}%")
    if reading.mem_used_mib is not None and reading.mem_used_mib >= th.mem_mib:
        out.append(f"memory used {num_shown(reading.mem_used_mib)} MiB >= {num_shown(th.mem_mib)} MiB")
    return out


class GpuCheck(BaseModel):
    """One GPU as the gate judged it: the reading's numbers (%, MiB) and why it is busy."""

    index: int
    uuid: str
    name: str
    vendor: Vendor
    util_pct: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    busy: list[str] = []


class GateOutcome(BaseModel):
    """What `GpuGate.acquire` found. `lease` None: no device; `reason` says why.

    `waited_s` in seconds, `polls` = probe reads made, `checks` = the last poll's GPUs.
    """

    lease: Lease | None
    checks: list[GpuCheck] = []
    waited_s: float = 0.0
    polls: int = 0
    reason: str = ""
    device_note: str = ""
    cpu_load: CpuLoad | None = None
