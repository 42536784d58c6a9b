"""The SM clock a profiled run ran at, sampled from outside the benchmark process.

Why: an H100 whose clocks nobody locks (kopt-mcp never changes a GPU's clocks) steps its SM clock
between levels during a session, e.g. 1980 and 1965 MHz. A compute-bound kernel's GPU time follows
the clock: on 2026-11-24 the do_bench decision-quality harness's median launch sat at 379.9 or
382.8 us (0.76% apart, 1980/1965 = 1.0076), and a step between BEST's two profiles raised the A/B/A
floor above a 1% win (benchmarks/results/2026-11-24-h100-decision-quality-dobench-n11.md). Knowing each run's
clock, the keep metric compares the candidate with a BEST profile at its own clock
(`kopt_mcp.rules.clocks`).

`ClockSampler` reads a `ClockSource` every `period_s` in a thread of the referee's process while
the benchmark runs; only samples taken while the GPU is busy count (NVML's GpuIdle clock-event
reason is off), so process start-up and idle gaps do not pull the figure down. Nothing the
benchmark process does can write these samples.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import BaseModel

from kopt_mcp.evidence.clock import LEVEL_TOLERANCE_PCT, RunClock
from kopt_mcp.gpus.sampler import PeriodicSampler

#: seconds between two samples: a do_bench call of 100 ms still gets several
SAMPLE_PERIOD_S = 0.05
#: fewer busy samples than this give no clock figure (the run was too short to say)
MIN_BUSY_SAMPLES = 5


class ClockSample(BaseModel):
    """One reading: `t_s` (monotonic s), the SM clock in MHz, and whether the GPU was idle (NVML's
    GpuIdle clock-event reason)."""

    t_s: float
    sm_mhz: float
    idle: bool


class ClockSource(Protocol):
    """Reads one device's SM clock. `read` returns (SM MHz, idle) and raises on failure;
    `period_s`: seconds between two reads while a run goes on."""

    period_s: float

    def read(self) -> tuple[float, bool]:
        ...


def summarise(samples: list[ClockSample]) -> RunClock | None:
    """The RunClock of `samples` (busy ones only), or None with fewer than MIN_BUSY_SAMPLES busy
    samples or a non-positive clock. Pure; never raises."""
    busy = [s.sm_mhz for s in samples if not s.idle and s.sm_mhz > 0]
    if len(busy) < MIN_BUSY_SAMPLES:
        return None
    med = statistics.median(busy)
    near = sum(1 for v in busy if abs(v - med) <= med * LEVEL_TOLERANCE_PCT / 100.0)
    return RunClock(sm_mhz=med, min_mhz=min(busy), max_mhz=max(busy), busy_samples=len(busy),
                    steady_pct=100.0 * near / len(busy))


class ClockSampler(PeriodicSampler):
    """Samples `source` every `source.period_s` s in a daemon thread between `__enter__` and
    `__exit__`.

    `samples` keeps what was read; a read that raises ends the sampling (the run goes on; `error`
    says why) and the summary is taken from what was read before. `clock`: monotonic seconds."""

    read_at_exit = False

    def __init__(self, source: ClockSource, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(source.period_s, "kopt-clock-sampler")
        self._source, self._clock = source, clock
        self.samples: list[ClockSample] = []

    def _read(self) -> None:
        mhz, idle = self._source.read()
        self.samples.append(ClockSample(t_s=self._clock(), sm_mhz=float(mhz), idle=bool(idle)))

    def summary(self) -> RunClock | None:
        """`summarise(self.samples)`."""
        return summarise(list(self.samples))


class NvmlClockSource:
    """The SM clock of the NVIDIA device `uuid` through NVML: nvmlDeviceGetClockInfo(NVML_CLOCK_SM)
    in MHz, idle = the GpuIdle bit of nvmlDeviceGetCurrentClocksEventReasons. Read-only."""

    period_s = SAMPLE_PERIOD_S

    def __init__(self, uuid: str) -> None:
        # lazy: nvidia-ml-py loads only where an NVIDIA clock is read
        from kopt_mcp.gpus.nvml import _call, _nvml

        self._nv: Any = _nvml()
        self._call = _call
        self._handle = _call(self._nv, "nvmlDeviceGetHandleByUUID", uuid)
        self._idle_bit = int(getattr(self._nv, "nvmlClocksEventReasonGpuIdle", 1))
        self._reasons = ("nvmlDeviceGetCurrentClocksEventReasons"
                         if hasattr(self._nv, "nvmlDeviceGetCurrentClocksEventReasons")
                         else "nvmlDeviceGetCurrentClocksThrottleReasons")

    def read(self) -> tuple[float, bool]:
        """(SM clock MHz, idle). Raises ProbeError naming the NVML call that failed."""
        mhz = self._call(self._nv, "nvmlDeviceGetClockInfo", self._handle, self._nv.NVML_CLOCK_SM)
        reasons = int(self._call(self._nv, self._reasons, self._handle))
        return float(mhz), bool(reasons & self._idle_bit)


#: (vendor, uuid) -> the device's ClockSource or None: how executors get a leased device's source
ClockFactory = Callable[[str, str], ClockSource | None]


def clock_source(vendor: str, uuid: str) -> ClockSource | None:
    """The default ClockSource for a leased device: NVML for an NVIDIA device it can open by
    `uuid`; None for any other vendor, or when NVML is missing or does not know the device (the
    keep metric then judges without clocks). Never raises."""
    if vendor != "nvidia":
        return None
    try:
        return NvmlClockSource(uuid)
    except Exception:  # noqa: BLE001 - no clock figure is a weaker, still valid, measurement
        return None


__all__ = ["ClockFactory", "ClockSample", "ClockSampler", "ClockSource", "NvmlClockSource", "RunClock", "clock_source", "summarise"]
