"""The launch groups the keep metric judges (pure): which groups are the target, BEST's spread
between two profiles of them, whether a harness is time-driven, and which config class each
group measures. The rule over them is rules/keep.py `judge_groups` (its docstring has the steps).

- Targets (`target_groups`, in kopt_mcp/evidence/groups.py): the groups of the kernels the
  `[profiler] kernel` regex matches, else of the hottest kernel that is not an input-generation or
  copy utility (`is_utility_kernel`: torch's randn/fill/copy kernels, memset/memcpy);
  `target_median_us` is their GPU time per step.
- Spread (`group_spread_pct`): |sum w (second - first) / mean| * 100 over the target groups' median
  launches, w = BEST's time share, between two profiled runs of unchanged BEST.
- Time-driven harness (`launch_counts_differ`): two runs of unchanged BEST launched a paired group
  a different number of times.
- Config classes (`class_gpu_times`, `group_classes`): class key -> the candidate's GPU time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.groups import LaunchGroup, target_groups
from kopt_mcp.evidence.trace import KernelTrace, trace_groups
from kopt_mcp.rules.pairing import first_launch_key, match_groups

__all__ = ["class_gpu_times", "classes_through_best", "group_classes", "group_spread_pct", "groups_of",
           "launch_counts_differ", "shift_pct", "target_median_us",
           "targets_of_both", "time_shares"]


def target_median_us(trace: KernelTrace | Sequence[LaunchGroup], kernel_regex: str | None) -> tuple[float, list[str]]:
    """The target's GPU time per benchmark step (us): the sum over its launch groups of the median
    launch, and the target kernel names (for SessionState.best.gpu_us / kernels, so that the
    baseline and keeps report the same quantity as rules/keep.py `judge_groups`' gpu_best_us/gpu_candidate_us).
    Raises ProfilerError when no kernel matches or a target group lacks per-launch times."""
    tg = target_groups(groups_of(trace), kernel_regex)
    if any(g.median_us is None for g in tg):
        raise ProfilerError("the profiler did not record each launch's GPU time for the target kernels")
    return sum(g.median_us for g in tg), list(dict.fromkeys(g.kernel for g in tg))


def groups_of(x: KernelTrace | Sequence[LaunchGroup]) -> list[LaunchGroup]:
    """A run's launch groups: a KernelTrace's (`trace_groups`), or the groups as given."""
    return trace_groups(x) if isinstance(x, KernelTrace) else list(x)


def time_shares(pairs: list[tuple[LaunchGroup, LaunchGroup]]) -> dict[int, float]:
    """BEST's time share per pair of its two profiles' groups (keyed by id of the first profile's
    group): (total us of both) / (total us of all pairs), summing to 1; equal shares at zero time."""
    total = sum(x.total_us + y.total_us for x, y in pairs)
    return {id(x): (x.total_us + y.total_us) / total if total > 0 else 1.0 / len(pairs) for x, y in pairs}


def shift_pct(pairs: list[tuple[LaunchGroup, LaunchGroup]], w: dict[int, float]) -> float:
    """BEST's signed change (%) from its first profile to its second, by median launch (+ = slower):
    sum w (second - first) / mean * 100 over the pairs, `w` from `time_shares`."""
    return 100.0 * sum(w[id(x)] * (y.median_us - x.median_us) / ((x.median_us + y.median_us) / 2.0) for x, y in pairs)


def targets_of_both(first: KernelTrace | Sequence[LaunchGroup], second: KernelTrace | Sequence[LaunchGroup],
                    kernel_regex: str | None) -> tuple[list[LaunchGroup], list[LaunchGroup], str]:
    """The target groups of two profiled runs of BEST, and the regex both were picked by:
    `kernel_regex`, else exactly the kernel names of `first`'s targets (its hottest non-utility
    kernel), so both runs have the same target. Raises ProfilerError when a run lacks the target."""
    a = target_groups(groups_of(first), kernel_regex)
    regex = kernel_regex or "|".join(f"^{re.escape(n)}$" for n in dict.fromkeys(g.kernel for g in a))
    return a, target_groups(groups_of(second), regex), regex


def group_spread_pct(first: KernelTrace | Sequence[LaunchGroup], second: KernelTrace | Sequence[LaunchGroup],
                     kernel_regex: str | None = None) -> float:
    """The spread (%) between two profiled runs of unchanged BEST by launch group, the quantity
    rules/keep.py `judge_groups` puts in `spread_pct`: |sum w (second - first) / mean| * 100 over the target
    groups' median launches, w = time share. For the baseline's adjacent profiles (append each to
    SessionState.gpu_spreads_pct). Raises ProfilerError when the target is missing, the runs
    launched different target groups, or a group lacks per-launch times."""
    a, b, _ = targets_of_both(first, second, kernel_regex)
    pairs, only_a, only_b, _ = match_groups(a, b)
    if only_a or only_b:
        raise ProfilerError("the two profiled runs launched different target groups: "
                            + ", ".join(g.label() for g in (*only_a, *only_b)))
    if any(g.median_us is None or g.median_us <= 0 for g in (*a, *b)):
        raise ProfilerError("the profiler did not record each launch's GPU time for the target kernels")
    return abs(shift_pct(pairs, time_shares(pairs)))


def launch_counts_differ(first: KernelTrace | Sequence[LaunchGroup], second: KernelTrace | Sequence[LaunchGroup],
                         kernel_regex: str | None = None) -> bool:
    """True when two profiled runs of unchanged BEST launched some paired target group a different
    number of times (a time-driven harness; SessionState.launch_counts_vary). False where the
    target is missing from either run or the runs cannot be paired. Never raises for data."""
    try:
        a, b, _ = targets_of_both(first, second, kernel_regex)
    except ProfilerError:
        return False
    pairs, *_ = match_groups(a, b)
    return any(x.calls != y.calls for x, y in pairs)


_NUMBER = re.compile(r"^-?\d+$")


def class_gpu_times(groups: KernelTrace | Sequence[LaunchGroup], classes: Sequence[str],
                    kernel_regex: str | None = None) -> dict[str, float] | None:
    """GPU time per config class: class key -> sum of the median launch (us) of the target launch
    groups mapped to it, or None where the groups cannot be mapped (then report one total).

    `classes`: class keys in the benchmark's row order (`"col=value,col=value"`, metrics.class_key).
    Mapping (`group_classes`), first that works: one class -> every target group; a config column
    whose integer value equals one grid dimension of every group, with every group on exactly one
    class and every class hit; the groups in first-launch order, chunked per class (as many groups
    as classes, or a multiple with the same kernel sequence in every chunk). Never raises."""
    try:
        tg = target_groups(groups_of(groups), kernel_regex)
    except ProfilerError:
        return None
    at = group_classes(tg, classes)
    if at is None:
        return None
    out = dict.fromkeys(classes, 0.0)
    for g, key in zip(tg, at, strict=True):
        out[key] += g.median_us
    return out


def group_classes(tg: Sequence[LaunchGroup], classes: Sequence[str]) -> list[str] | None:
    """The config class of each launch group in `tg` (same order), or None where no mapping holds
    (see `class_gpu_times` for the rules) or a group lacks per-launch times. Never raises."""
    if not classes or not tg or any(g.median_us is None for g in tg):
        return None
    if len(classes) == 1:
        return [classes[0]] * len(tg)
    values = [dict(p.split("=", 1) for p in k.split(",") if "=" in p) for k in classes]
    columns = list(dict.fromkeys(c for v in values for c in v))
    if all(g.grid is not None for g in tg):
        for col in columns:
            for dim in range(3):
                at = []
                for g in tg:
                    hits = [k for k, v in zip(classes, values, strict=True)
                            if _NUMBER.match(v.get(col, "")) and int(v[col]) == g.grid[dim]]
                    if len(hits) != 1:
                        break
                    at.append(hits[0])
                if len(at) == len(tg) and set(at) == set(classes):
                    return at
    ordered = sorted(range(len(tg)), key=lambda i: first_launch_key(tg[i]))
    if len(ordered) % len(classes):
        return None
    m = len(ordered) // len(classes)
    chunks = [ordered[i * m:(i + 1) * m] for i in range(len(classes))]
    if len({tuple(tg[i].kernel for i in ch) for ch in chunks}) != 1:
        return None
    at: list[str | None] = [None] * len(tg)
    for key, ch in zip(classes, chunks, strict=True):
        for i in ch:
            at[i] = key
    return at  # type: ignore[return-value]


def classes_through_best(pairs: list[tuple[LaunchGroup, LaunchGroup]], extra: Sequence[LaunchGroup],
                          classes: Sequence[str]) -> dict[str, float] | None:
    """The candidate's GPU time per class where its own groups do not map (a changed grid, a renamed
    kernel): each candidate group counts for the class of the BEST group it was paired with. None
    when BEST's groups do not map either, or the candidate launched groups BEST has no pair for."""
    if extra or not pairs:
        return None
    at = group_classes([x for x, _ in pairs], classes)
    if at is None:
        return None
    out = dict.fromkeys(classes, 0.0)
    for key, (_, cg) in zip(at, pairs, strict=True):
        out[key] += cg.median_us
    return out
