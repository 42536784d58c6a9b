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
