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


def ratio_x(best: float, candidate: float, higher_is_better: bool) -> float | None:
    """How many times better `candidate` is than `best`: best / candidate where lower is better (a
    time: 100 us -> 10 us is 10.0x, which improvement_pct writes +90%), candidate / best where higher
    is better. None where a value is <= 0 (no ratio)."""
    if best <= 0 or candidate <= 0:
        return None
    return candidate / best if higher_is_better else best / candidate


def ratio_shown(pct: float, ratio: float | None) -> str:
    """A change as the reasons write it: the percent with the ratio beside it, '+89.83% (9.83x)'
    (a 9.83x speed-up takes 89.83% less time); the percent alone without a ratio."""
    return f"{pct:+.2f}%" + (f" ({ratio:.2f}x)" if ratio is not None and math.isfinite(ratio) else "")


def spread_pct(first_us: float, second_us: float) -> float:
    """The spread (%) between two GPU times (us, both > 0): |first - second| / mean * 100.
    Raises ValueError if a time is not positive."""
    if first_us <= 0 or second_us <= 0:
        raise ValueError(f"GPU times must be positive, got {first_us} and {second_us} us")
    return abs(first_us - second_us) / ((first_us + second_us) / 2.0) * 100.0
