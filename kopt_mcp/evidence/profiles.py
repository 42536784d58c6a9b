"""Typed evidence the keep metric judges (pure data): one profiled run's target kernels, and the
three profiled runs of an attempt in one lease (BEST, the candidate, BEST again: A/B/A)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from kopt_mcp.evidence.clock import RunClock
from kopt_mcp.evidence.load import RunLoad
from kopt_mcp.evidence.trace import KernelTrace


class TargetProfile(BaseModel):
    """One profiled run as the keep metric sees it: the whole `trace`, the target kernels' GPU time
    summed over the run (`us`), their `names`, how often they launched (`launches`), each launch's
    GPU time in launch order where the backend records it (`durations_us`, us), the SM clock
    the run ran at where it was sampled (`clock`), and the foreign load on the device while it ran
    (`load`, evidence/load.py; None: not sampled)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    trace: KernelTrace
    us: float
    names: list[str]
    launches: int
    durations_us: list[float] | None = None
    clock: RunClock | None = None
    load: RunLoad | None = None


class Profiles(BaseModel):
    """The A/B/A evidence of one attempt: BEST profiled `before` the candidate, the `candidate`, and
    BEST `after` it, all in one lease on one device."""

    before: TargetProfile
    candidate: TargetProfile
    after: TargetProfile

    @property
    def grouped(self) -> bool:
        """True where every run's trace has launch groups (per-launch times with launch shapes)."""
        return all(p.trace.groups is not None for p in (self.before, self.candidate, self.after))


__all__ = ["Profiles", "TargetProfile"]
