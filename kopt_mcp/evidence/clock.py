"""The SM clock one profiled run ran at (`RunClock`): evidence the keep metric reads
(kopt_mcp.rules.clocks), measured from outside the benchmark by kopt_mcp.gpus.clocks."""

from __future__ import annotations

from pydantic import BaseModel

#: samples within this relative distance (%) of the median count as the median's level
LEVEL_TOLERANCE_PCT = 0.1


class RunClock(BaseModel):
    """The SM clock (MHz) of one run while the GPU was busy: the median busy sample, the range,
    how many busy samples, and `steady_pct`, the share (%) of busy samples within
    LEVEL_TOLERANCE_PCT of the median (100: the run never left one clock level)."""

    sm_mhz: float
    min_mhz: float
    max_mhz: float
    busy_samples: int
    steady_pct: float

    def shown(self) -> str:
        """'1980 MHz' or '1965 MHz (1965-1980, 78% at 1965)' for a verdict's reason."""
        if self.steady_pct >= 99.5:
            return f"{self.sm_mhz:g} MHz"
        return f"{self.sm_mhz:g} MHz ({self.min_mhz:g}-{self.max_mhz:g}, {self.steady_pct:.0f}% at {self.sm_mhz:g})"
