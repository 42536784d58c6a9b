"""Profiler backends behind one protocol (see base.py), chosen by name with `make_profiler`."""

from __future__ import annotations

from kopt_mcp.profilers.base import KernelStat, KernelTrace, Profiler, ProfilerError, target_gpu_time
from kopt_mcp.profilers.ncu import NcuProfiler, short_kernel_name
from kopt_mcp.profilers.none import NoProfiler
from kopt_mcp.profilers.rocprof import RocprofV3Profiler

BACKENDS: tuple[str, ...] = ("auto", "ncu", "rocprofv3", "none")

__all__ = [
    "BACKENDS", "KernelStat", "KernelTrace", "NcuProfiler", "NoProfiler", "Profiler",
    "ProfilerError", "RocprofV3Profiler", "make_profiler", "short_kernel_name", "target_gpu_time",
]


def make_profiler(backend: str, vendor: str, detail: bool = False) -> Profiler:
    """The profiler for `[profiler] backend` on a GPU of `vendor` ("nvidia", "amd", "none", ...).

    "auto": ncu where the vendor is NVIDIA and ncu is on PATH, rocprofv3 where the vendor is AMD
    and rocprofv3 is on PATH, else the no-op backend.
    "ncu": Nsight Compute (`detail` adds throughput/occupancy metrics); raises ProfilerError if
    ncu is not on PATH. "rocprofv3": ROCprofiler-SDK kernel trace (`detail` has no effect);
    raises ProfilerError if rocprofv3 is not on PATH. "none": the no-op backend. Anything else raises ValueError.
    """
    if backend == "auto":
        ncu = NcuProfiler(detail=detail)
        if vendor.lower() == "nvidia" and ncu.available():
            return ncu
        rocprof = RocprofV3Profiler()
        if vendor.lower() == "amd" and rocprof.available():
            return rocprof
        return NoProfiler()
    if backend == "ncu":
        ncu = NcuProfiler(detail=detail)
        if not ncu.available():
            raise ProfilerError(
                'ncu not found on PATH: install Nsight Compute or set [profiler] backend = "none"'
            )
        return ncu
    if backend == "rocprofv3":
        rocprof = RocprofV3Profiler()
        if not rocprof.available():
            raise ProfilerError(
                'rocprofv3 not found on PATH: install ROCm (rocprofiler-sdk) or set [profiler] backend = "none"'
            )
        return rocprof
    if backend == "none":
        return NoProfiler()
    raise ValueError(
        f"unknown profiler backend {backend!r}; valid backends: {', '.join(repr(b) for b in BACKENDS)}"
    )
