"""Helpers shared by the AMD probes (units, N/A values, command text)."""

from __future__ import annotations

import shutil
from typing import Any

_MIB = 1024 * 1024
_UNIT_BYTES = {"B": 1, "KB": 1024, "KiB": 1024, "MB": _MIB, "MiB": _MIB,
               "GB": 1024 ** 3, "GiB": 1024 ** 3}
_NA = {"", "N/A", "NA", "n/a", "Unknown", "UNKNOWN", "Not supported", "Not Supported"}

AMD_VENDOR_ID = "0x1002"


def _fallback_uuid(index: int) -> str:
    return f"amd-gpu-{index}"


def _cmd(args: list[str]) -> str:
    return " ".join(args)


def _number(v: Any) -> float | None:
    """A number from a tool's value: 12, "12", "12.5" -> float; "N/A"-style markers -> None.

    Raises ValueError for anything else (the caller names the command and field).
    """
    if v is None:
        return None
    if isinstance(v, bool):
        raise ValueError(repr(v))  # noqa: TRY004 - callers turn ValueError into ProbeError
    if isinstance(v, (int, float)):
        return float(v)
    s = str(v).strip()
    if s in _NA:
        return None
    return float(s)


# --------------------------------------------------------------------------------------- sysfs


def on_path(tool: str) -> bool:
    """True when `tool` is on PATH."""
    return shutil.which(tool) is not None
