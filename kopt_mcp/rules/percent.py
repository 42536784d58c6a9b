"""The one percent helper of the rules: a signed improvement in % (+ = better) of a candidate over
BEST, for metrics where higher or lower is better. The log-scale change the paired statistics use
is `rules.stats.log_delta_pct`; both read "+10%" as "10% better"."""

from __future__ import annotations

import math


def improvement_pct(best: float, candidate: float, higher_is_better: bool) -> float:
    """Signed improvement of `candidate` over `best` in %: positive = better.

    Lower-is-better metrics (times): (best - candidate) / best * 100, so 100 us -> 90 us is +10%.
    Higher-is-better: (candidate - best) / best * 100.
    """
    if best == 0:
        return 0.0 if candidate == best else (math.inf if (candidate > best) == higher_is_better else -math.inf)
    change = (candidate - best) / abs(best) * 100.0
    return change if higher_is_better else -change


def spread_pct(first_us: float, second_us: float) -> float:
    """The spread (%) between two GPU times (us, both > 0): |first - second| / mean * 100.
    Raises ValueError if a time is not positive."""
    if first_us <= 0 or second_us <= 0:
        raise ValueError(f"GPU times must be positive, got {first_us} and {second_us} us")
    return abs(first_us - second_us) / ((first_us + second_us) / 2.0) * 100.0
