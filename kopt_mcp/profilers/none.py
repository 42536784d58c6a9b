"""The "none" profiler backend: no kernel profiler on this machine, or the user turned it off.

The command runs unwrapped and the trace is empty, so the keep metric falls back to the
benchmark script's own metric; the trace's warning says so wherever it is reported.
"""

from __future__ import annotations

from pathlib import Path

from kopt_mcp.evidence.trace import KernelTrace

NO_PROFILER_WARNING = "no profiler backend: the keep metric is the script metric"


class NoProfiler:
    """A Profiler that profiles nothing: always available, never fails."""

    name = "none"
    per_launch = False  # records each launch's GPU time (the keep metric's paired test)

    def available(self) -> bool:
        """Always True: nothing to install."""
        return True

    def wrap(self, command: str, out_dir: Path) -> str:
        """`command` unchanged; `out_dir` is not written to."""
        return command

    def parse(self, out_dir: Path) -> KernelTrace:
        """An empty trace (no kernels, 0 us) carrying NO_PROFILER_WARNING. Never raises."""
        return KernelTrace(backend="none", kernels=[], total_gpu_us=0.0, warnings=[NO_PROFILER_WARNING])
