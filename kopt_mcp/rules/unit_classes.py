"""Which config class each harness unit measured, where a harness measures each class in several units
(pure). Issue 24 item 1: units come in the harness's own order and map to config classes in order;
with as many units as classes that is unit k -> class k (rules/units.py). Harnesses that take the
median of several timing windows per class run C x R units for C classes, in one of two orders:

- rounds: every class once per round (unit k -> class k mod C), as the Triton example's bench.py does
  (5 do_bench windows per class, alternating between the 3 classes, so a slow window is outvoted);
- blocks: each class's R units in a row (unit k -> class k // R).

Rule (`unit_classes`): the order under which BEST's target GPU time per invocation agrees within
every class (each unit within CLASS_TOL of its class's median) and differs between classes, where
exactly one of the two orders fits; else None (no per-class figures, as before).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

#: units of one config class measure the same work: BEST's per-invocation medians within this share
CLASS_TOL = 0.10


def _fits(times: Sequence[float], of: Sequence[int], n_classes: int) -> bool:
    """Every class's units within CLASS_TOL of the class median, and no two classes' medians that close."""
    meds = []
    for c in range(n_classes):
        xs = [t for t, k in zip(times, of) if k == c]
        med = statistics.median(xs)
        if med <= 0 or any(abs(x - med) > CLASS_TOL * med for x in xs):
            return False
        meds.append(med)
    return all(abs(a - b) > CLASS_TOL * max(a, b) for i, a in enumerate(meds) for b in meds[i + 1:])


def unit_classes(times: Sequence[float], n_classes: int) -> list[int] | None:
    """The config class index (0-based, row order) of each of the len(times) target units, from BEST's
    target GPU time per invocation of each (us); None where the units cannot be told apart into
    `n_classes` classes (see the module docstring). With as many units as classes: k -> k."""
    n = len(times)
    if n_classes <= 0 or n == 0 or n % n_classes:
        return None
    if n == n_classes:
        return list(range(n))
    reps = n // n_classes
    rounds = [k % n_classes for k in range(n)]
    blocks = [k // reps for k in range(n)]
    fit = [order for order in (rounds, blocks) if _fits(times, order, n_classes)]
    return fit[0] if len(fit) == 1 else None


def sum_by_class(pairs: Iterable[tuple[str, float]]) -> dict[str, float]:
    """(class key, us) per unit -> us per class, summed over the class's units, in first-seen order."""
    out: dict[str, float] = {}
    for cls, us in pairs:
        out[cls] = out.get(cls, 0.0) + us
    return out


__all__ = ["CLASS_TOL", "sum_by_class", "unit_classes"]
