"""Pairing harness units across runs whose unit counts differ (pure; issue 34 item 5).

The keep metric by harness unit (rules/units.py) pairs unit k of BEST's runs with unit k of the
candidate's: the harness ran the same configs in the same order. Where the units were not marked in
the process (a time-driven loop kopt does not mark, or a recording from before markers existed) they
are found in the launch stream afterwards (evidence/segment.py), and one config's stretch can come
out cut in two in one run and whole in another: the counts differ and nothing could be judged
(gpu_time_unreproducible).

`pair_units` lines the runs up by stretches of consecutive units with one launch signature (the
harness, its label and the set of kernels launched: the shape context that named the config when the
stream was cut). Where a stretch holds more units in one run than in another, the run with more was
cut inside a config: its adjacent units whose median time per invocation (every kernel) is closest
are merged, one pair at a time, until the stretch has as many units as the shortest run's, but only
where their medians differ by at most MERGE_TOLERANCE (one config's pieces run at one speed; two
configs of one signature, the same kernels at other sizes, do not). BEST's two runs must agree
on the stretches' signatures; the candidate, which may launch other kernels than BEST (that is what it
changes), on the harness and label of each stretch. Otherwise None: still not comparable.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from kopt_mcp.evidence.names import is_utility_kernel
from kopt_mcp.evidence.units import HarnessUnit

#: adjacent units merge only where their median times per invocation differ by at most this share: one
#: config's pieces run at one speed (an A/A pair of Liger units differs by under 1%), two configs of one
#: launch signature (the same kernels at other sizes) differ far more
MERGE_TOLERANCE = 0.10


def signature(u: HarnessUnit) -> tuple[str, str, frozenset[str]]:
    """The unit's launch signature: harness, label, the kernels its invocations launched."""
    return (u.harness, u.label, frozenset(u.per_invocation))


def _merge(x: HarnessUnit, y: HarnessUnit) -> HarnessUnit:
    """One unit of `x`'s invocations followed by `y`'s (renumbered after x's)."""
    shift = max([i for per in x.per_invocation.values() for i in per] + [x.invocations - 1]) + 1
    per = {k: dict(v) for k, v in x.per_invocation.items()}
    launches = {k: dict(v) for k, v in x.launches.items()}
    for k, v in y.per_invocation.items():
        per.setdefault(k, {}).update({i + shift: us for i, us in v.items()})
    for k, v in y.launches.items():
        launches.setdefault(k, {}).update({i + shift: n for i, n in v.items()})
    return x.model_copy(update={"invocations": shift + y.invocations, "per_invocation": per, "launches": launches,
                                "weights": {**x.weights, **{i + shift: w for i, w in y.weights.items()}}})


def _median_us(u: HarnessUnit) -> float:
    """The unit's median GPU time per invocation, every kernel but utilities (us; its operation time)."""
    invs: dict[int, float] = {}
    for name, per in u.per_invocation.items():
        if is_utility_kernel(name):
            continue
        for i, us in per.items():
            invs[i] = invs.get(i, 0.0) + us / u.weights.get(i, 1)
    return statistics.median(invs.values()) if invs else 0.0


def _shrink(stretch: list[HarnessUnit], n: int) -> list[HarnessUnit] | None:
    """`stretch` merged down to `n` units, the adjacent pair of closest median time first; None where
    the closest pair's medians differ by more than MERGE_TOLERANCE (two configs, not one cut in two)."""
    out = list(stretch)
    while len(out) > n:
        m = [_median_us(u) for u in out]
        rel = [abs(m[i] - m[i + 1]) / max(m[i], m[i + 1], 1e-9) for i in range(len(out) - 1)]
        k = min(range(len(rel)), key=rel.__getitem__)
        if rel[k] > MERGE_TOLERANCE:
            return None
        out[k:k + 2] = [_merge(out[k], out[k + 1])]
    return out


def _stretches(units: Sequence[HarnessUnit]) -> list[list[HarnessUnit]]:
    out: list[list[HarnessUnit]] = []
    for u in units:
        if out and signature(out[-1][-1]) == signature(u):
            out[-1].append(u)
        else:
            out.append([u])
    return out


def pair_units(before: Sequence[HarnessUnit], candidate: Sequence[HarnessUnit], after: Sequence[HarnessUnit]
               ) -> tuple[list[HarnessUnit], list[HarnessUnit], list[HarnessUnit]] | None:
    """The three runs' units lined up (module docstring), re-indexed 0..n-1, or None where they cannot
    be. Never raises."""
    runs = [_stretches(x) for x in (before, candidate, after)]
    b, c, a = runs
    if not b or not (len(b) == len(c) == len(a)):
        return None
    if [signature(s[0]) for s in b] != [signature(s[0]) for s in a]:
        return None
    if [(s[0].harness, s[0].label) for s in b] != [(s[0].harness, s[0].label) for s in c]:
        return None
    out: list[list[HarnessUnit]] = [[], [], []]
    for k in range(len(b)):
        n = min(len(r[k]) for r in runs)
        for j, r in enumerate(runs):
            merged = _shrink(r[k], n)
            if merged is None:
                return None
            out[j].extend(merged)
    return tuple([u.model_copy(update={"index": i}) for i, u in enumerate(units)] for units in out)


__all__ = ["MERGE_TOLERANCE", "pair_units", "signature"]
