"""A device's peak DRAM bandwidth (pure data; issue 38 item 3, speed of light).

First choice: the memory interface the profiler reports for the device it ran on (ncu's raw page
carries device__attribute_global_memory_bus_width, bits, and device__attribute_memory_clock_rate,
kHz, on every row: profilers/ncu.py), bus width / 8 x memory clock x 2 (double data rate). Recorded
on an H200: 6,016 bits x 3,201,000 kHz -> 4,814 GB/s, NVIDIA's datasheet figure 4.8 TB/s.
Fallback: this table by device name, from NVIDIA's datasheets (H100 SXM5 80GB: 3.35 TB/s HBM3; H100
PCIe 80GB: 2.0 TB/s HBM2e; H100 NVL 94GB: 3.9 TB/s; H200 SXM/NVL 141GB: 4.8 TB/s HBM3e; A100 SXM
80GB: 2,039 GB/s; A100 40GB: 1,555 GB/s; L40S: 864 GB/s).
"""

from __future__ import annotations

#: device name fragment (lower case, most specific first) -> peak DRAM bandwidth (GB/s), datasheets
PEAK_GBPS_BY_NAME: tuple[tuple[str, float], ...] = (
    ("h200", 4800.0), ("h100 nvl", 3900.0), ("h100 pcie", 2000.0), ("h100", 3350.0),
    ("a100-sxm4-80gb", 2039.0), ("a100 80gb", 2039.0), ("a100", 1555.0), ("l40s", 864.0),
)


def peak_from_interface(bus_bits: float, memory_clock_khz: float) -> float:
    """Peak DRAM bandwidth (GB/s) of a memory interface: bus width (bits) / 8 x clock (kHz) x 1e3 x 2 / 1e9."""
    return bus_bits / 8.0 * memory_clock_khz * 1e3 * 2.0 / 1e9


def peak_by_name(name: str) -> float | None:
    """The datasheet peak (GB/s) for a device name ("NVIDIA H200"), None where the table lacks it."""
    low = name.lower()
    return next((gbps for frag, gbps in PEAK_GBPS_BY_NAME if frag in low), None)


__all__ = ["PEAK_GBPS_BY_NAME", "peak_by_name", "peak_from_interface"]
