"""`NoGpuProbe`: the probe for a host without a GPU; the CPU is the device."""

from __future__ import annotations

from kopt_mcp.gpus.base import GpuReading


class NoGpuProbe:
    """Probe named "none": sees no GPU. The gate then hands out a CPU lease at once."""

    name = "none"

    def read(self) -> list[GpuReading]:
        """Return [] (no GPU; the CPU is the device). Never raises."""
        return []
