"""What a GPU probe reports, and the protocol every probe backend implements.

A probe reads the machine's GPUs once per call and never changes them. The availability gate
(`kopt_mcp.gpus.gate`) turns readings into an idle/busy decision and a lease.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, Field

Vendor = Literal["nvidia", "amd", "cpu"]


class GpuProcess(BaseModel):
    """One compute process seen on a GPU. `used_mib` is None where the tool printed no number."""

    pid: int
    name: str = ""
    used_mib: float | None = None


class GpuReading(BaseModel):
    """One GPU as a probe saw it.

    Units: `util_pct` in % (0..100, None when unknown), memory in MiB.
    `index` is the index the vendor runtime uses for `*_VISIBLE_DEVICES`.
    """

    index: int
    uuid: str
    name: str
    vendor: Vendor
    util_pct: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    processes: list[GpuProcess] = Field(default_factory=list)


class GpuProbe(Protocol):
    """Reads every GPU of the host. `name` is the backend's name ("nvml", "none", ...)."""

    name: str

    def read(self) -> list[GpuReading]:
        """Return one reading per GPU (empty list: no GPU). Raises ProbeError if unreadable."""
        ...
