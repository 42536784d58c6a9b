"""GPU probes (nvml, nvidia-smi, amdsmi, amd-smi, rocm-smi, sysfs, none), cross-process leases and the availability gate.

Importing this package is cheap: backends (and pynvml, amdsmi) load only when `make_probe` needs them.
"""

from __future__ import annotations

import shutil

from kopt_mcp.errors import ProbeError
from kopt_mcp.gpus.base import GpuProbe, GpuProcess, GpuReading, Vendor

# "none" stays fourth: error messages (and tests) list the NVIDIA-era names first
BACKENDS = ("auto", "nvml", "nvidia-smi", "none", "amdsmi", "amd-smi", "rocm-smi", "sysfs")

__all__ = ["BACKENDS", "GpuProbe", "GpuProcess", "GpuReading", "ProbeError", "Vendor", "make_probe"]


def _smi_answers() -> bool:
    """True when `nvidia-smi` is on PATH and reads at least one GPU. Never raises."""
    if shutil.which("nvidia-smi") is None:
        return False
    # lazy: an optional vendor library loads only when its probe is asked for
    from kopt_mcp.gpus.smi import NvidiaSmiProbe

    try:
        return len(NvidiaSmiProbe().read()) > 0
    except Exception:  # noqa: BLE001 - "answers" must answer, whatever broke
        return False


def _answers(make) -> bool:
    """True when the probe `make()` builds reads at least one GPU. Never raises."""
    try:
        return len(make().read()) > 0
    except Exception:  # noqa: BLE001 - "answers" must answer, whatever broke
        return False


def _amdsmi_answers() -> bool:
    """True when the `amdsmi` library imports, initialises and sees a GPU."""
    # lazy: an optional vendor library loads only when its probe is asked for
    from kopt_mcp.gpus.amd import AmdSmiLibProbe

    return AmdSmiLibProbe.available() and _answers(AmdSmiLibProbe)


def _amd_smi_cli_answers() -> bool:
    """True when `amd-smi` is on PATH and the amd-smi probe (with sysfs) reads a GPU."""
    # lazy: an optional vendor library loads only when its probe is asked for
    from kopt_mcp.gpus.amd import AmdSmiCliProbe

    return shutil.which("amd-smi") is not None and _answers(AmdSmiCliProbe)


def _rocm_smi_answers() -> bool:
    """True when `rocm-smi` is on PATH and reads a GPU."""
    # lazy: an optional vendor library loads only when its probe is asked for
    from kopt_mcp.gpus.amd import RocmSmiProbe

    return shutil.which("rocm-smi") is not None and _answers(RocmSmiProbe)


def _sysfs_answers() -> bool:
    """True when /sys/class/drm holds an AMD card whose VRAM counters read."""
    # lazy: an optional vendor library loads only when its probe is asked for
    from kopt_mcp.gpus.amd import SysfsProbe

    return _answers(SysfsProbe)


def make_probe(backend: str) -> GpuProbe:
    """The probe for `backend`: one of BACKENDS.

    "auto": NVIDIA first (nvml if NVML initialises and sees a GPU, else nvidia-smi if it is on
    PATH and reads a GPU), then AMD (the amdsmi library, then the amd-smi CLI, then rocm-smi,
    then amdgpu sysfs, each only when it reads a GPU), else none (the CPU is the device).
    Explicit backends are returned without checking the machine (their `read()` raises
    ProbeError if it cannot). Raises ValueError naming the valid backends for anything else.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown GPU probe backend {backend!r}: expected one of {', '.join(BACKENDS)}")
    if backend in ("auto", "nvml"):
        # lazy: an optional vendor library loads only when its probe is asked for
        from kopt_mcp.gpus.nvml import NvmlProbe

        if backend == "nvml" or NvmlProbe.available():
            return NvmlProbe()
    if backend == "nvidia-smi" or (backend == "auto" and _smi_answers()):
        # lazy: an optional vendor library loads only when its probe is asked for
        from kopt_mcp.gpus.smi import NvidiaSmiProbe

        return NvidiaSmiProbe()
    auto = backend == "auto"
    if backend == "amdsmi" or (auto and _amdsmi_answers()):
        # lazy: an optional vendor library loads only when its probe is asked for
        from kopt_mcp.gpus.amd import AmdSmiLibProbe

        return AmdSmiLibProbe()
    if backend == "amd-smi" or (auto and _amd_smi_cli_answers()):
        # lazy: an optional vendor library loads only when its probe is asked for
        from kopt_mcp.gpus.amd import AmdSmiCliProbe

        return AmdSmiCliProbe()
    if backend == "rocm-smi" or (auto and _rocm_smi_answers()):
        # lazy: an optional vendor library loads only when its probe is asked for
        from kopt_mcp.gpus.amd import RocmSmiProbe

        return RocmSmiProbe()
    if backend == "sysfs" or (auto and _sysfs_answers()):
        # lazy: an optional vendor library loads only when its probe is asked for
        from kopt_mcp.gpus.amd import SysfsProbe

        return SysfsProbe()
    # lazy: an optional vendor library loads only when its probe is asked for
    from kopt_mcp.gpus.none import NoGpuProbe

    return NoGpuProbe()
