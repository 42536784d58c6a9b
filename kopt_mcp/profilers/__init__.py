"""Profiler backends behind one protocol (see base.py), chosen by name with `make_profiler`."""

from __future__ import annotations

from kopt_mcp.errors import ProfilerError
from kopt_mcp.profilers.base import Profiler
from kopt_mcp.profilers.combined import TraceWithMetrics
from kopt_mcp.profilers.cupti import CuptiProfiler
from kopt_mcp.profilers.ncu import NcuProfiler
from kopt_mcp.profilers.none import NoProfiler
from kopt_mcp.profilers.pyspy import PySpyProfiler
from kopt_mcp.profilers.rocprof import RocprofV3Profiler

BACKENDS: tuple[str, ...] = ("auto", "cupti", "ncu", "rocprofv3", "none")

__all__ = [
    "BACKENDS", "CuptiProfiler", "NcuProfiler", "NoProfiler", "Profiler", "ProfilerError", "PySpyProfiler",
    "RocprofV3Profiler", "TraceWithMetrics", "make_profiler",
]


def make_profiler(backend: str, vendor: str, detail: bool = False) -> Profiler:
    """The profiler for `[profiler] backend` on a GPU of `vendor` ("nvidia", "amd", "none", ...).

    `detail=False` is the keep-metric profile (GPU time per kernel, small overhead); `detail=True`
    is kernel_trace_analysis's report (adds throughput / occupancy metrics where the tool has them).

    "auto": NVIDIA: keep metric from the CUPTI kernel trace where cupti-python is importable, else
    ncu; the detail report is "cupti+ncu" (TraceWithMetrics: times from a CUPTI trace run, metrics
    from an ncu detail run of the benchmark, merged by kernel name) where both are present, else
    ncu alone where it is on PATH, else the CUPTI trace alone. AMD: rocprofv3 where it is on PATH.
    Otherwise the no-op backend (the script metric decides, and says so).
    CPU (`vendor` "cpu"): the keep metric is always the script metric (no-op backend); the detail
    report is py-spy's sampling profile (PySpyProfiler) where py-spy is installed, with "auto" or
    "none" alike (there is no kernel profiler to turn off on a CPU; a GPU backend raises as below).
    "cupti": the CUPTI trace for the keep metric (ProfilerError if cupti-python is missing); the
    detail report as for "auto" ("cupti+ncu", else ncu, else the CUPTI trace). "ncu": Nsight Compute
    for both (ProfilerError if ncu is not on PATH). "rocprofv3": ROCprofiler-SDK kernel trace
    (ProfilerError if missing). "none": the no-op backend. Anything else raises ValueError.
    """
    nvidia = vendor.lower() == "nvidia"
    if vendor.lower() == "cpu" and backend in ("auto", "none"):
        pyspy = PySpyProfiler()
        return pyspy if detail and pyspy.available() else NoProfiler()
    if backend == "auto":
        if nvidia:
            return _nvidia(detail, prefer_cupti=not detail) or NoProfiler()
        rocprof = RocprofV3Profiler()
        if vendor.lower() == "amd" and rocprof.available():
            return rocprof
        return NoProfiler()
    if backend == "cupti":
        if not CuptiProfiler().available():
            raise ProfilerError('cupti-python is not importable: pip install cupti-python (NVIDIA CUDA 12/13) '
                                'or set [profiler] backend = "ncu"')
        return _nvidia(detail, prefer_cupti=not detail) or CuptiProfiler()
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


def _nvidia(detail: bool, prefer_cupti: bool) -> Profiler | None:
    """For the detail report, CUPTI times with ncu metrics where both are present; else the CUPTI
    trace or ncu, in the preferred order, whichever is present; None if neither."""
    cupti, ncu = CuptiProfiler(), NcuProfiler(detail=detail)
    if detail and cupti.available() and ncu.available():
        return TraceWithMetrics(cupti, ncu)
    order = (cupti, ncu) if prefer_cupti else (ncu, cupti)
    return next((p for p in order if p.available()), None)
