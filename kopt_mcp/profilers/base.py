"""The protocol every profiler backend implements, and what a profiled run adds to the benchmark's
environment. What a backend reports (KernelTrace and its parts) is evidence: kopt_mcp/evidence/.

A backend never runs a process itself: it wraps the fixed benchmark command (`wrap`) and parses
what that wrapped run left behind (`parse`). The runner executes, so timeouts and process-tree
kills stay in one place.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from kopt_mcp.evidence.trace import KernelTrace


class Profiler(Protocol):
    """A kernel profiler backend. `name` is "ncu", "none", ..."""

    name: str
    #: True where `parse` fills KernelStat.durations_us (each launch's GPU time, in launch order)
    per_launch: bool

    def available(self) -> bool:
        """True where the backend's binary or library is present on this machine."""
        ...

    def wrap(self, command: str, out_dir: Path) -> str:
        """The shell command that runs `command` under this profiler, writing into `out_dir`."""
        ...

    def parse(self, out_dir: Path) -> KernelTrace:
        """Read what the wrapped run wrote into `out_dir`. Raises ProfilerError."""
        ...


def profile_env(profiler: object) -> dict[str, str]:
    """What a profiled run adds to the benchmark's environment (docs/config.md, "What the benchmark
    gets"): KOPT_PROFILE=1 under a profiler that replays or serialises kernels (Nsight Compute,
    rocprof), so the benchmark may run fewer repetitions; nothing under a trace whose runs are also the
    verdict's script-metric runs (`measures_script`: CUPTI, 0.95-1.00x of a plain run). Such a run must
    time as a plain run does: on an H100 (2026-11-27) the Triton example's KOPT_PROFILE mode, one
    CUDA-event timing as a placeholder, read BEST 50% slow and made a +19.4% GPU-time win `regressed`.
    Nothing either where the profiler measures the harness's own units (`keeps_harness`: ncu's
    confirmation by unit profiles a few marked invocations of each unit, so the harness must run as
    it always does: the Triton example skips do_bench under KOPT_PROFILE, and ncu then found no unit)."""
    if getattr(profiler, "measures_script", False) or getattr(profiler, "keeps_harness", False):
        return {}
    return {"KOPT_PROFILE": "1"}
