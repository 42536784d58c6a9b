"""`NvmlProbe`: reads NVIDIA GPUs through NVML (the `pynvml` module of nvidia-ml-py).

`pynvml` is imported inside the functions, so importing this module costs nothing on a host
without NVIDIA's library.
"""

from __future__ import annotations

import threading
from typing import Any

from kopt_mcp.errors import ProbeError
from kopt_mcp.gpus.base import GpuProcess, GpuReading

_MIB = 1024 * 1024
_init_lock = threading.Lock()
_initialised = False


def _nvml() -> Any:
    """The `pynvml` module, NVML initialised once per process. Raises ProbeError naming the call."""
    global _initialised
    try:
        import pynvml
    except ImportError as e:  # pragma: no cover - nvidia-ml-py is a dependency
        raise ProbeError(f"import pynvml failed: {e} (install nvidia-ml-py)") from e
    with _init_lock:
        if not _initialised:
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as e:
                raise ProbeError(f"NVML: nvmlInit failed: {e}") from e
            _initialised = True
    return pynvml


def _call(nv: Any, fn: str, *args: Any) -> Any:
    """Call `pynvml.<fn>(*args)`; any NVMLError -> ProbeError naming `fn`."""
    try:
        return getattr(nv, fn)(*args)
    except nv.NVMLError as e:
        raise ProbeError(f"NVML: {fn} failed: {e}") from e


def _text(v: str | bytes) -> str:
    """NVML strings are bytes in old pynvml versions, str in new ones."""
    return v.decode() if isinstance(v, bytes) else v


def _process_name(nv: Any, pid: int) -> str:
    """Best-effort process path from NVML; "" when NVML cannot name it (another PID namespace).

    The name is decoration, so this one failure is not a ProbeError.
    """
    try:
        return _text(nv.nvmlSystemGetProcessName(pid))
    except nv.NVMLError:
        return ""


def _utilization(nv: Any, handle: Any) -> float | None:
    """GPU utilization in % (0..100); None where the device does not support it (MIG)."""
    try:
        return float(nv.nvmlDeviceGetUtilizationRates(handle).gpu)
    except nv.NVMLError as e:
        if getattr(e, "value", None) == nv.NVML_ERROR_NOT_SUPPORTED:
            return None
        raise ProbeError(f"NVML: nvmlDeviceGetUtilizationRates failed: {e}") from e


def _memory(nv: Any, handle: Any) -> Any:
    """Memory info in bytes (.used, .total). Version 2 where the driver has it: its `used`
    leaves out driver-reserved memory, as nvidia-smi's memory.used does."""
    v2 = getattr(nv, "nvmlMemory_v2", None)
    if v2 is not None:
        try:
            return nv.nvmlDeviceGetMemoryInfo(handle, version=v2)
        except (nv.NVMLError, TypeError):
            pass  # an older driver or pynvml: fall back to version 1
    return _call(nv, "nvmlDeviceGetMemoryInfo", handle)


class NvmlProbe:
    """GPU probe over NVML (name "nvml"). Reads index, UUID, name, utilization %, memory MiB and
    compute processes of every device. Read-only; never changes a GPU."""

    name = "nvml"

    @staticmethod
    def available() -> bool:
        """True when NVML initialises and sees at least one device. Never raises."""
        try:
            nv = _nvml()
            return int(nv.nvmlDeviceGetCount()) > 0
        except Exception:  # noqa: BLE001 - "available" must answer, whatever broke
            return False

    def read(self) -> list[GpuReading]:
        """One GpuReading per device (vendor "nvidia"), in NVML index order.

        Memory: bytes from NVML -> MiB. A process's `used_mib` is None where NVML has no number.
        Raises ProbeError naming the NVML call that failed (e.g. "nvmlInit", "nvmlDeviceGetUUID").
        """
        nv = _nvml()
        out = []
        for i in range(int(_call(nv, "nvmlDeviceGetCount"))):
            h = _call(nv, "nvmlDeviceGetHandleByIndex", i)
            mem = _memory(nv, h)
            procs = [
                GpuProcess(
                    pid=int(p.pid),
                    name=_process_name(nv, int(p.pid)),
                    used_mib=None if p.usedGpuMemory is None else p.usedGpuMemory / _MIB,
                )
                for p in _call(nv, "nvmlDeviceGetComputeRunningProcesses", h)
            ]
            out.append(GpuReading(
                index=i,
                uuid=_text(_call(nv, "nvmlDeviceGetUUID", h)),
                name=_text(_call(nv, "nvmlDeviceGetName", h)),
                vendor="nvidia",
                util_pct=_utilization(nv, h),
                mem_used_mib=mem.used / _MIB,
                mem_total_mib=mem.total / _MIB,
                processes=procs,
            ))
        return out


__all__ = ["NvmlProbe"]
