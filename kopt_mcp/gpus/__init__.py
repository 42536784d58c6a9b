"""GPU probes (nvml, nvidia-smi, none), cross-process leases and the availability gate.

Importing this package is cheap: backends (and pynvml) load only when `make_probe` needs them.
"""

from __future__ import annotations

import shutil

from kopt_mcp.gpus.base import GpuProbe, GpuProcess, GpuReading, ProbeError, Vendor

BACKENDS = ("auto", "nvml", "nvidia-smi", "none")

__all__ = ["BACKENDS", "GpuProbe", "GpuProcess", "GpuReading", "ProbeError", "Vendor", "make_probe"]


def _smi_answers() -> bool:
    """True when `nvidia-smi` is on PATH and reads at least one GPU. Never raises."""
    if shutil.which("nvidia-smi") is None:
        return False
    from kopt_mcp.gpus.smi import NvidiaSmiProbe

    try:
        return len(NvidiaSmiProbe().read()) > 0
    except Exception:  # noqa: BLE001 - "answers" must answer, whatever broke
        return False


def make_probe(backend: str) -> GpuProbe:
    """The probe for `backend`: "auto" | "nvml" | "nvidia-smi" | "none".

    "auto": nvml if NVML initialises and sees a GPU, else nvidia-smi if it is on PATH and reads
    a GPU, else none (the CPU is the device). Explicit backends are returned without checking
    the machine (their `read()` raises ProbeError if it cannot).
    Raises ValueError naming the valid backends for anything else.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown GPU probe backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if backend in ("auto", "nvml"):
        from kopt_mcp.gpus.nvml import NvmlProbe

        if backend == "nvml" or NvmlProbe.available():
            return NvmlProbe()
    if backend == "nvidia-smi" or (backend == "auto" and _smi_answers()):
        from kopt_mcp.gpus.smi import NvidiaSmiProbe

        return NvidiaSmiProbe()
    from kopt_mcp.gpus.none import NoGpuProbe

    return NoGpuProbe()
