"""Launch-group pairing (pure): which candidate launch group is compared with which BEST group.

Step 2 of the launch-group keep metric (rules/keep.py `judge_groups`, which also pairs BEST's two
profiles with each other this way). The rule (`match_groups`), per kernel name: where the
candidate has as many groups as BEST but not the same shapes (it changed the grid/block of some
config), all in the order of their first launch, the harness's config order (a changed shape can
equal another config's old one: 8 rows per program at 2048 rows is BEST's grid at 256 rows;
2026-11-24, triton-kernels); else same shape, and the rest in launch order where as many are left
on both sides; then, across names, the remaining groups in order when both sides have as many (a
kernel renamed within what the `[profiler] kernel` regex matches; without a regex the target is
BEST's kernel names, and a candidate without them is not kept). What stays unmatched is reported:
a BEST group without a candidate group is skipped work (not kept); a candidate group without a
BEST group is extra work whose time is charged.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

from kopt_mcp.evidence.groups import LaunchGroup

__all__ = ["first_launch_key", "match_groups"]


def first_launch_key(g: LaunchGroup) -> float:
    """Sort key of a launch group in launch order: its first launch's order key (`first_order`),
    groups without one last (inf)."""
    return g.first_order if g.first_order is not None else math.inf


def match_groups(best: Sequence[LaunchGroup], candidate: Sequence[LaunchGroup]
                 ) -> tuple[list[tuple[LaunchGroup, LaunchGroup]], list[LaunchGroup], list[LaunchGroup], list[str]]:
    """Pair BEST's launch groups with the candidate's (see the module docstring).

    Returns (pairs, unmatched BEST groups, unmatched candidate groups, notes), pairs in BEST's
    launch order; notes say which pairs were made by order rather than by shape. Never raises."""
    notes: list[str] = []
    pairs, rest_b, rest_c = [], [], []
    for name in dict.fromkeys([*(g.kernel for g in best), *(g.kernel for g in candidate)]):
        bs = sorted((g for g in best if g.kernel == name), key=first_launch_key)
        cs = sorted((g for g in candidate if g.kernel == name), key=first_launch_key)
        if bs and len(bs) == len(cs) and Counter(g.shape for g in bs) != Counter(g.shape for g in cs):
            # the candidate changed launch shapes: a changed shape can equal another config's old one
            # (8 rows per program at 2048 rows = 1 row per program at 256), so shapes no longer name
            # configs; the harness's config order does
            pairs.extend(zip(bs, cs, strict=True))
            notes.append(f"{len(bs)} group(s) of {bs[0].label()} changed launch shape: paired in launch order")
            continue
        cand_by_key = {c.shape: c for c in cs}
        left_b = []
        for g in bs:
            c = cand_by_key.pop(g.shape, None)
            (pairs.append((g, c)) if c is not None else left_b.append(g))
        left_c = sorted(cand_by_key.values(), key=first_launch_key)
        if left_b and len(left_b) == len(left_c):
            pairs.extend(zip(left_b, left_c, strict=True))
            notes.append(f"{len(left_b)} group(s) of {left_b[0].label()} changed launch shape: paired in launch order")
        else:
            rest_b.extend(left_b)
            rest_c.extend(left_c)
    rest_b.sort(key=first_launch_key)
    rest_c.sort(key=first_launch_key)
    if rest_b and len(rest_b) == len(rest_c):
        pairs.extend(zip(rest_b, rest_c, strict=True))
        notes.append("renamed kernel(s): " + "; ".join(f"{b.label()} -> {c.label()}" for b, c in zip(rest_b, rest_c)))
        rest_b, rest_c = [], []
    order = {id(b): i for i, b in enumerate(best)}
    pairs.sort(key=lambda p: order[id(p[0])])
    return pairs, rest_b, rest_c, notes
