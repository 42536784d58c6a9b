"""AMD probe over the `amdsmi` Python library (imported lazily)."""

from __future__ import annotations

import threading
from typing import Any

from kopt_mcp.errors import ProbeError
from kopt_mcp.gpus.amd_common import _MIB, _fallback_uuid, _number
from kopt_mcp.gpus.base import GpuProcess, GpuReading

_lib_lock = threading.Lock()
_lib_initialised = False

class AmdSmiLibProbe:
    """GPU probe over the `amdsmi` Python library (name "amdsmi"), imported lazily.

    Calls used, each checked against ROCm/amdsmi py-interface/amdsmi_interface.py (code index)
    and the AMD SMI Python API reference (rocm.docs.amd.com/projects/amdsmi):
    amdsmi_init, amdsmi_get_processor_handles, amdsmi_get_gpu_activity (-> "gfx_activity", %),
    amdsmi_get_gpu_vram_usage (-> "vram_used"/"vram_total", documented "In MB" in
    amdsmi_vram_usage_t), amdsmi_get_gpu_device_bdf (-> "0000:03:00.0"),
    amdsmi_get_gpu_asic_info (-> "market_name"), amdsmi_get_gpu_process_list (old versions:
    process handles for amdsmi_get_gpu_process_info; newer: dicts) with "pid", "name",
    "memory_usage"{"vram_mem" bytes}. Not run on AMD hardware here.
    """

    name = "amdsmi"

    @staticmethod
    def available() -> bool:
        """True when `import amdsmi` works. Never raises."""
        try:
            import amdsmi  # noqa: F401
        except Exception:  # noqa: BLE001 - a broken install is "not available"
            return False
        return True

    @staticmethod
    def _lib() -> Any:
        global _lib_initialised
        try:
            import amdsmi
        except Exception as e:
            raise ProbeError(f"import amdsmi failed: {e} (install ROCm's amdsmi package)") from e
        with _lib_lock:
            if not _lib_initialised:
                try:
                    amdsmi.amdsmi_init()
                except Exception as e:
                    raise ProbeError(f"amdsmi: amdsmi_init failed: {e}") from e
                _lib_initialised = True
        return amdsmi

    @staticmethod
    def _call(lib: Any, fn: str, *args: Any) -> Any:
        try:
            return getattr(lib, fn)(*args)
        except Exception as e:
            raise ProbeError(f"amdsmi: {fn} failed: {e}") from e

    def _processes(self, lib: Any, h: Any) -> list[GpuProcess]:
        out: dict[int, GpuProcess] = {}
        for p in self._call(lib, "amdsmi_get_gpu_process_list", h) or []:
            info = p if isinstance(p, dict) else self._call(lib, "amdsmi_get_gpu_process_info", h, p)
            try:
                pid = int(info["pid"])
            except (KeyError, TypeError, ValueError):
                continue
            vram = (info.get("memory_usage") or {}).get("vram_mem")
            try:
                used = _number(vram)
            except ValueError:
                used = None
            out.setdefault(pid, GpuProcess(pid=pid, name=str(info.get("name") or ""),
                                           used_mib=None if used is None else used / _MIB))
        return list(out.values())

    def read(self) -> list[GpuReading]:
        """One reading per processor handle, index = enumeration order. Units: %, MiB.
        Raises ProbeError naming the failing call; VRAM used that is not a number is an error."""
        lib = self._lib()
        out = []
        for index, h in enumerate(self._call(lib, "amdsmi_get_processor_handles")):
            vram = self._call(lib, "amdsmi_get_gpu_vram_usage", h)
            try:
                used, total = _number(vram.get("vram_used")), _number(vram.get("vram_total"))
            except ValueError as e:
                raise ProbeError(f"amdsmi: amdsmi_get_gpu_vram_usage gave no numbers: {vram!r}") from e
            if used is None:
                raise ProbeError(f"amdsmi: amdsmi_get_gpu_vram_usage has no 'vram_used': {vram!r}")
            try:
                util = _number(self._call(lib, "amdsmi_get_gpu_activity", h).get("gfx_activity"))
            except (ProbeError, ValueError, AttributeError):
                util = None
            try:
                uuid = str(self._call(lib, "amdsmi_get_gpu_device_bdf", h)).lower() or _fallback_uuid(index)
            except ProbeError:
                uuid = _fallback_uuid(index)
            try:
                name = str(self._call(lib, "amdsmi_get_gpu_asic_info", h).get("market_name") or "")
            except (ProbeError, AttributeError):
                name = ""
            out.append(GpuReading(index=index, uuid=uuid, name=name, vendor="amd", util_pct=util,
                                  mem_used_mib=used, mem_total_mib=total,
                                  processes=self._processes(lib, h)))
        return out
