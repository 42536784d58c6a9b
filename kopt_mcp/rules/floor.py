"""The GPU-time floor: the least gain the keep metric accepts, from BEST's own measured spread (pure).

`gpu_gain_floor` is the largest of `[gates] min_gpu_gain_pct`, twice this attempt's spread between
BEST's profiles before and after the candidate, and SPREAD_MEDIAN_FACTOR x the median of the
session's recent spreads (`GainFloor.binding` names which). `KEEP_RULES` names the keep rules in
force; decision-quality results record it so that runs of different rules are never pooled.
"""

from __future__ import annotations

import statistics
from typing import Literal

from pydantic import BaseModel

GPU_SPREAD_WINDOW = 10
#: names the keep rules in force, recorded with decision-quality results so that runs of different
#: rules are never pooled (benchmarks/decision_quality/run.py --merge); change it with the rules
KEEP_RULES = ("2026-11-27c, units: every run profiled (A/B/A, more rounds only when undecided); GPU time per invocation "
              "per harness unit (marked, else segmented), both ways and for the whole operation (a target saving the "
              "other kernels take back is kept only where the operation gains beyond the floor), else per launch group "
              "or paired launches, also both ways (a loss beyond the floor is regressed); divergent also from GPU time "
              "per config class; "
              "floor max(min_gain, 2x own spread, 5x median spread); script metric a screen; regressions confirmed "
              "in 2 rounds on the script metric")
#: multiple of the median recent spread a gain must clear (see gpu_gain_floor)
SPREAD_MEDIAN_FACTOR = 5.0


class GainFloor(BaseModel):
    """The least per-launch GPU-time gain (%) the keep metric accepts, and which part set it:
    "min_gain" ([gates] min_gpu_gain_pct), "own_spread" (twice this attempt's spread between BEST
    before and after the candidate) or "recent_spreads" (SPREAD_MEDIAN_FACTOR x the median of the
    recent adjacent spreads)."""

    pct: float
    binding: Literal["min_gain", "own_spread", "recent_spreads"]
    own_spread_pct: float
    median_spread_pct: float
    #: the floor without this attempt's own spread: a gain above it that `pct` still stops was
    #: stopped by a jump of BEST inside the attempt alone
    rest_pct: float

    def shown(self) -> str:
        """One line for a verdict's reason."""
        what = {"min_gain": "min_gpu_gain_pct",
                "own_spread": "2x this attempt's spread between BEST before and after the candidate",
                "recent_spreads": f"{SPREAD_MEDIAN_FACTOR:g}x the median spread between BEST's adjacent profiled "
                                  f"runs lately ({self.median_spread_pct:.3f}%)"}[self.binding]
        return f"GPU-time floor {self.pct:.3g}% = {what}"


def gpu_gain_floor(best_spreads_pct: list[float], own_spread_pct: float, min_gain_pct: float,
                   window: int = GPU_SPREAD_WINDOW) -> GainFloor:
    """The least GPU-time gain (%) the keep metric accepts: the largest of `min_gain_pct`, twice
    `own_spread_pct` and SPREAD_MEDIAN_FACTOR x the median of the last `window` spreads.

    Spreads are |a - b| / mean * 100 between two profiled runs of unchanged BEST_COMMIT taken
    seconds apart (the baseline's adjacent profiles, each attempt's BEST before and after the
    candidate; `best_spreads_pct` = SessionState.gpu_spreads_pct, latest last, this attempt's
    included). Per-launch pairing cancels launch-to-launch noise but not a shift of a whole
    process; the A/B/A comparison cancels a drift that is linear over the three runs. What is left:

    - a level jump inside the attempt (on an idle H100 the target's GPU time jumped between two
      levels 0.75% apart, about once in 60 adjacent pairs: 2026-11-23 decision-quality runs):
      it shows in this attempt's own spread, hence twice the own spread;
    - a steady process-to-process shift of SD s: an unchanged candidate's gain against the mean
      of its two BEST runs is N(0, 1.5 s^2), independent of its own spread. Against 5x the median
      of k spreads (together with twice the own spread) it passes with probability 1.0% for k = 4
      (the first attempt after the baseline's four profiles) and 0.3% for k = 10 (simulated,
      normal shifts), before the script screen, which an unchanged candidate passes about half the
      time. The median, unlike the maximum, is not raised for `window` attempts by one rare jump.
    """
    recent = best_spreads_pct[-window:]
    median = statistics.median(recent) if recent else 0.0
    parts = {"min_gain": min_gain_pct, "own_spread": 2.0 * own_spread_pct,
             "recent_spreads": SPREAD_MEDIAN_FACTOR * median}
    binding = max(parts, key=lambda k: parts[k])
    return GainFloor(pct=parts[binding], binding=binding, own_spread_pct=own_spread_pct, median_spread_pct=median,
                     rest_pct=max(parts["min_gain"], parts["recent_spreads"]))




def profile_again(kept: bool, gain_pct: float | None, floor: GainFloor | None) -> bool:
    """The re-profile rule: True when a gain was stopped only by this attempt's own spread (BEST's
    level jumped between its profiles around the candidate: the floor's binding part is
    `own_spread`) while it clears the rest of the floor (`rest_pct`). Then the candidate and BEST
    are profiled once more and the later triple is judged, budget permitting."""
    return (not kept and floor is not None and floor.binding == "own_spread" and gain_pct is not None
            and gain_pct > floor.rest_pct)


__all__ = ["GPU_SPREAD_WINDOW", "KEEP_RULES", "SPREAD_MEDIAN_FACTOR", "GainFloor", "gpu_gain_floor", "profile_again"]
