"""The noise rule (DESIGN.md): a change smaller than `noise_pct` is noise, unless the same-direction
improvement is measured `confirmations` times in a row; the server takes the confirming runs itself.

This module classifies one change against the threshold. Whether a sub-noise win is "measured"
(rather than chance) is decided statistically in `rules/verdict.py` with `rules/stats.py`: each
confirming delta must be positive and the paired one-sided bound on their mean must be above 0.
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
