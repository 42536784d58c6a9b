"""The noise rule (DESIGN.md): a change smaller than `noise_pct` is noise, unless the same-direction
improvement is measured `confirmations` times in a row; the server takes the confirming runs itself.

A sub-noise improvement only counts as "measured" when it clears a floor: the larger of half of
`noise_pct` and the spread between the BEST measurements taken in the same lease. Without that
floor an identical candidate would be kept whenever chance made it faster twice (25% of the time
with two confirmations). If `noise_pct` is about 3-4 standard deviations of one measurement's
change, an identical candidate clears the floor twice in well under 1% of attempts.
"""

from __future__ import annotations

from typing import Literal

Change = Literal["better", "worse", "noise"]
EPS_PCT = 1e-9  # a change computed as 0.99999...% from a true 1% is 1%


def classify_change(delta_pct: float, noise_pct: float) -> Change:
    """`better` if delta_pct >= noise_pct, `worse` if <= -noise_pct, else `noise` (delta in %, +=better)."""
    if delta_pct >= noise_pct - EPS_PCT:
        return "better"
    if delta_pct <= -noise_pct + EPS_PCT:
        return "worse"
    return "noise"


def spread_pct(samples: list[float]) -> float:
    """(max - min) / min * 100 of repeated measurements of one thing; 0 for fewer than 2 samples."""
    if len(samples) < 2 or min(samples) <= 0:
        return 0.0
    return (max(samples) - min(samples)) / min(samples) * 100.0


def confirmation_floor_pct(noise_pct: float, best_samples: list[float]) -> float:
    """The least improvement (%) each confirming measurement of a sub-noise win must show."""
    return max(noise_pct / 2.0, spread_pct(best_samples))


def subnoise_confirmed(deltas_pct: list[float], floor_pct: float, confirmations: int) -> bool:
    """True if the last `confirmations` target deltas all show an improvement of at least floor_pct."""
    if len(deltas_pct) < confirmations:
        return False
    return all(d >= floor_pct and d > 0 for d in deltas_pct[-confirmations:])
