"""Profiler backends behind one protocol (see base.py), chosen by name with `make_profiler`."""

from __future__ import annotations

from kopt_mcp.profilers.base import KernelStat, KernelTrace, Profiler, ProfilerError, target_gpu_time
from kopt_mcp.profilers.ncu import NcuProfiler, short_kernel_name
from kopt_mcp.profilers.none import NoProfiler

BACKENDS: tuple[str, ...] = ("auto", "ncu", "none")

__all__ = [
    "BACKENDS", "KernelStat", "KernelTrace", "NcuProfiler", "NoProfiler", "Profiler",
    "ProfilerError", "make_profiler", "short_kernel_name", "target_gpu_time",
]


def make_profiler(backend: str, vendor: str, detail: bool = False) -> Profiler:
    """The profiler for `[profiler] backend` on a GPU of `vendor` ("nvidia", "amd", "none", ...).

    "auto": ncu where the vendor is NVIDIA and ncu is on PATH, else the no-op backend.
    "ncu": Nsight Compute (`detail` adds throughput/occupancy metrics); raises ProfilerError if
    ncu is not on PATH. "none": the no-op backend. Anything else raises ValueError.
    """
    if backend == "auto":
        ncu = NcuProfiler(detail=detail)
        return ncu if vendor.lower() == "nvidia" and ncu.available() else NoProfiler()
    if backend == "ncu":
        ncu = NcuProfiler(detail=detail)
        if not ncu.available():
            raise ProfilerError(
                'ncu not found on PATH: install Nsight Compute or set [profiler] backend = "none"'
            )
        return ncu
    if backend == "none":
        return NoProfiler()
    raise ValueError(
        f"unknown profiler backend {backend!r}; valid backends: {', '.join(repr(b) for b in BACKENDS)}"
    )
