"""AMD probe over sysfs: /sys/class/drm/card*/device busy % and VRAM counters."""

from __future__ import annotations

import re
from pathlib import Path

from kopt_mcp.errors import ProbeError
from kopt_mcp.gpus.amd_common import _MIB, AMD_VENDOR_ID, _fallback_uuid
from kopt_mcp.gpus.base import GpuReading


class SysfsProbe:
    """Reads amdgpu's sysfs files (name "sysfs"): no tool, no library, no privileges needed.

    For every `root/cardN` (N digits only; connector entries such as `card0-DP-1` are skipped)
    whose `device/vendor` is 0x1002: `device/gpu_busy_percent` (%), `device/mem_info_vram_used`
    and `device/mem_info_vram_total` (bytes). `index` = position among those cards in N order.
    `uuid` = the PCI bus id that `cardN/device` links to, else f"amd-gpu-{index}". `name` =
    `device/product_name` where the driver provides it, else "". Processes: none (sysfs has no
    process list; the idle decision rests on busy % and VRAM used, see the module docstring).
    """

    name = "sysfs"

    def __init__(self, root: Path | str = Path("/sys/class/drm")) -> None:
        self.root = Path(root)

    def cards(self) -> list[Path]:
        """The AMD `cardN` directories under `root`, in N order ([] when root is missing)."""
        if not self.root.is_dir():
            return []
        found = []
        for p in self.root.iterdir():
            m = re.fullmatch(r"card(\d+)", p.name)
            if not m:
                continue
            try:
                vendor = (p / "device" / "vendor").read_text().strip().lower()
            except OSError:
                continue
            if vendor == AMD_VENDOR_ID:
                found.append((int(m.group(1)), p))
        return [p for _, p in sorted(found)]

    @staticmethod
    def _read(path: Path, required: bool) -> float | None:
        try:
            text = path.read_text().strip()
        except OSError as e:
            if required:
                raise ProbeError(f"sysfs: cannot read {path}: {e.strerror or e}") from e
            return None
        try:
            return float(text)
        except ValueError as e:
            raise ProbeError(f"sysfs: {path} is not a number: {text!r}") from e

    def read(self) -> list[GpuReading]:
        """One reading per AMD card (empty list: none). Units: %, MiB.

        Raises ProbeError naming the file when `mem_info_vram_used` or `mem_info_vram_total`
        cannot be read or is not a number (busy % may be absent: None).
        """
        out = []
        for index, card in enumerate(self.cards()):
            dev = card / "device"
            used = self._read(dev / "mem_info_vram_used", required=True)
            total = self._read(dev / "mem_info_vram_total", required=True)
            busy = self._read(dev / "gpu_busy_percent", required=False)
            uuid = _fallback_uuid(index)
            if dev.is_symlink():
                bus = dev.resolve().name
                if re.fullmatch(r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]", bus):
                    uuid = bus.lower()
            try:
                name = (dev / "product_name").read_text().strip()
            except OSError:
                name = ""
            out.append(GpuReading(index=index, uuid=uuid, name=name, vendor="amd", util_pct=busy,
                                  mem_used_mib=used / _MIB, mem_total_mib=total / _MIB))
        return out


# ------------------------------------------------------------------------------------ rocm-smi
