"""Keep metric on launch groups: GPU time per launch, per kernel and launch shape (pure).

Why: a harness that picks its own repetition count (triton.testing.do_bench,
torch.utils.benchmark, adaptive loops) launches the target a different number of times in every
process, so totals of unchanged BEST spread 15-29% between profiled runs and launch i of one run is
not launch i of another (issue 15). The median launch of one kernel with one launch shape is
stable under that: warm-up launches and a changed repetition count move the total, not the median.

The rule (`judge_groups`, A/B/A: BEST profiled before and after the candidate in one lease):

1. Targets: the launch groups (`LaunchGroup`: kernel name, grid, block) of the kernels the
   `[profiler] kernel` regex matches, else of the hottest kernel that is not an input-generation or
   copy utility (`is_utility_kernel`: torch's randn/fill/copy kernels, memset/memcpy).
2. Pairing (`match_groups`, rules/pairing.py, where the rule is written): per kernel name by
   launch shape, or in launch order where the candidate changed shapes or renamed a kernel. A BEST
   group without a candidate group is skipped work (not kept); a candidate group without a BEST
   group is extra work whose time is charged.
3. Gain: per pair the ratio r = candidate median / BEST median (BEST: mean of its two profiles'
   medians); combined weighted by BEST's time share w (sum w = 1): gain = (1 - sum w r) * 100,
   times (1 + u) for the charged extra work (u: extra time / matched time in the candidate).
   Lower bound: gain - z * SE, SE from each median's standard error (1.2533 * 1.4826 * MAD / sqrt n,
   z at `confidence`).
4. Floor: `rules.floor.gpu_gain_floor` of this attempt's own spread and the session's recent
   spreads. The spread is the same aggregate between BEST's two profiles: |sum w (after - before)
   / mean| * 100, per group by median launch (a shift of a whole process moves every group alike;
   the medians' sampling error is in the spread too). Kept when the gain clears the floor (which
   covers process shifts and the medians' sampling error, as measured between BEST's profiles)
   and the lower bound clears `min_gain_pct` (the gain itself is significant).
   With each run's SM clock known (`clocks`, sampled outside the benchmark), a clock step is not
   noise: the candidate is compared with BEST's profile at its own clock, or pays the clock ratio
   when it ran faster than both (`rules/clocks.py`).
5. Skipped work: a fixed-count harness (BEST's profiles launch every group equally often, in this
   attempt and in every earlier pair of the session) needs at least BEST's launches per group; a
   time-driven one (counts differ, now or in any earlier pair: two do_bench runs can launch 254
   times each, and a -2% candidate 253 times, 2026-11-24) launches a faster
   kernel more often, so a group that got faster per launch with under half of BEST's fewer
   launches is skipped work (results cached across calls, early returns).

`class_gpu_times` maps groups to config classes for performance.md.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence

from pydantic import BaseModel, Field

from kopt_mcp.errors import ProfilerError
from kopt_mcp.profilers.base import KernelTrace, LaunchGroup, trace_groups
from kopt_mcp.profilers.kernel_names import is_utility_kernel, short_kernel_name
from kopt_mcp.profilers.run_clock import RunClock
from kopt_mcp.rules.clocks import ClockPlan, clock_plan
from kopt_mcp.rules.floor import GainFloor, gpu_gain_floor
from kopt_mcp.rules.keep_totals import KeepDecision
from kopt_mcp.rules.pairing import first_launch_key, match_groups

__all__ = ["GroupDelta", "GroupKeepDecision", "class_gpu_times", "group_classes", "group_spread_pct", "is_utility_kernel", "judge_groups",
           "launch_counts_differ",
           "match_groups", "target_groups", "target_median_us"]

#: a BEST group whose candidate launches fell under this fraction while it got faster per launch
#: is skipped work in a time-driven harness (which launches a faster kernel more often)
TIME_DRIVEN_MIN_LAUNCH_RATIO = 0.5
#: standard error of a sample median relative to the scale, for normal data: sqrt(pi / 2)
_MEDIAN_SE = math.sqrt(math.pi / 2.0)


def target_groups(groups: Sequence[LaunchGroup], kernel_regex: str | None) -> list[LaunchGroup]:
    """The target launch groups: every group whose kernel matches `kernel_regex` (re.search), else
    every group of the hottest kernel (by total GPU time over its groups) that is not a utility
    kernel. Raises ProfilerError (naming the kernels seen) when nothing matches or there is no kernel."""
    if not groups:
        raise ProfilerError("the profiled run launched no GPU kernel: is the benchmark running on the GPU?")
    if kernel_regex:
        pattern = re.compile(kernel_regex)
        hits = [g for g in groups if pattern.search(g.kernel)]
        if not hits:
            seen = ", ".join(dict.fromkeys(g.kernel[:60] for g in groups))
            raise ProfilerError(f"no kernel matches [profiler] kernel = {kernel_regex!r}; kernels seen: {seen[:400]}")
        return hits
    totals: dict[str, float] = {}
    for g in groups:
        totals[g.kernel] = totals.get(g.kernel, 0.0) + g.total_us
    ranked = sorted(totals, key=lambda k: -totals[k])
    hottest = next((k for k in ranked if not is_utility_kernel(k)), ranked[0])
    return [g for g in groups if g.kernel == hottest]


def target_median_us(trace: KernelTrace | Sequence[LaunchGroup], kernel_regex: str | None) -> tuple[float, list[str]]:
    """The target's GPU time per benchmark step (us): the sum over its launch groups of the median
    launch, and the target kernel names (for SessionState.best.gpu_us / kernels, so that the
    baseline and keeps report the same quantity as `judge_groups`' gpu_best_us/gpu_candidate_us).
    Raises ProfilerError when no kernel matches or a target group lacks per-launch times."""
    tg = target_groups(_groups(trace), kernel_regex)
    if any(g.median_us is None for g in tg):
        raise ProfilerError("the profiler did not record each launch's GPU time for the target kernels")
    return sum(g.median_us for g in tg), list(dict.fromkeys(g.kernel for g in tg))


def _rel_se(g: LaunchGroup) -> float:
    """Relative standard error of a group's median launch (0 where per-launch times are missing)."""
    d = g.durations_us
    if not d or len(d) < 2 or not g.median_us:
        return 0.0
    med = statistics.median(d)
    mad = statistics.median(abs(x - med) for x in d)
    return _MEDIAN_SE * 1.4826 * mad / math.sqrt(len(d)) / g.median_us


class GroupDelta(BaseModel):
    """One paired launch group: BEST's and the candidate's median launch (us), launches, gain (%)."""

    group: str
    best_median_us: float
    candidate_median_us: float
    best_calls: list[int]
    candidate_calls: int
    weight: float
    gain_pct: float


class GroupKeepDecision(KeepDecision):
    """A KeepDecision from launch groups: the per-group deltas, the bound, floor and spread used."""

    lower_bound_pct: float | None = None
    floor: GainFloor | None = None
    #: this attempt's spread between BEST's two profiles (%), to join SessionState.gpu_spreads_pct
    spread_pct: float | None = None
    #: how the runs' SM clocks were used (rules/clocks.py); None: no clock figures
    clock: ClockPlan | None = None
    time_driven: bool = False
    groups: list[GroupDelta] = Field(default_factory=list)
    unmatched_best: list[str] = Field(default_factory=list)
    unmatched_candidate: list[str] = Field(default_factory=list)
    #: the candidate's GPU time per config class (us, `class_gpu_times`) where `classes` were given
    #: and the groups map to them; for performance.md (referee.report.perf_rows class_gpu_us)
    class_gpu_us: dict[str, float] | None = None


def _not_kept(reason: str, **kw) -> GroupKeepDecision:
    return GroupKeepDecision(kept=False, gpu_best_us=kw.pop("gpu_best_us", None), gpu_candidate_us=None,
                             gpu_delta_pct=None, metric_used="profiler GPU time", reason=reason, **kw)


def _groups(x: KernelTrace | Sequence[LaunchGroup]) -> list[LaunchGroup]:
    return trace_groups(x) if isinstance(x, KernelTrace) else list(x)


def judge_groups(best_before: KernelTrace | Sequence[LaunchGroup], candidate: KernelTrace | Sequence[LaunchGroup],
                 best_after: KernelTrace | Sequence[LaunchGroup], kernel_regex: str | None = None,
                 recent_spreads_pct: Sequence[float] = (), min_gain_pct: float = 0.2,
                 confidence: float = 0.995, suspect: bool = True,
                 classes: Sequence[str] | None = None,
                 clocks: tuple[RunClock | None, RunClock | None, RunClock | None] | None = None,
                 known_time_driven: bool = False) -> GroupKeepDecision:
    """The keep metric from three adjacent profiled runs (BEST, candidate, BEST again) by launch group.

    Inputs: each run's KernelTrace (or its launch groups, `trace_groups`); `kernel_regex`: the
    target ([profiler] kernel, or `exact_names_regex(BEST's target names)`; None: the hottest
    non-utility kernel of BEST's first profile); `recent_spreads_pct`: the session's earlier spreads
    between BEST profiles (%; SessionState.gpu_spreads_pct, this attempt's NOT included: it is
    added here); `min_gain_pct`: [gates] min_gpu_gain_pct; `confidence`: one-sided, for the bound;
    `suspect`: as in `rules.keep_totals.apply_keep_metric` (only changes the reason's wording);
    `classes`: config class keys in row order, to fill `class_gpu_us` from the candidate's groups;
    `clocks`: the three runs' SM clocks (BEST, candidate, BEST; kopt_mcp.gpus.clocks), which pick
    the BEST profile(s) the candidate is compared with and may charge a clock penalty
    (rules/clocks.clock_plan); None: the plain A/B/A rule; `known_time_driven`: earlier profiles
    of BEST in this session launched a group a different number of times
    (SessionState.launch_counts_vary), so the harness is time-driven even where this attempt's two
    BEST profiles happen to launch as often.

    Returns a GroupKeepDecision: kept, gain (%) in `gpu_delta_pct`, the target's median launch sum
    (us) of BEST (mean of both profiles) and of the candidate in `gpu_best_us`/`gpu_candidate_us`,
    `spread_pct` (append it to SessionState.gpu_spreads_pct), the floor, per-group deltas. A
    profile without the target kernel, or without per-launch times, is not kept (the reason says
    which). Never raises for data; re.error for a `kernel_regex` that is not a regular expression.
    """
    from scipy.stats import norm

    try:
        b1, b2, names_regex = _targets_of_both(best_before, best_after, kernel_regex)
    except ProfilerError as e:
        return _not_kept(f"profiling BEST_COMMIT: {e}: not kept")
    try:  # without a regex the candidate's target is BEST's kernels by name: a renamed kernel is not matched
        c = target_groups(_groups(candidate), names_regex)
    except ProfilerError as e:
        return _not_kept(f"profiling the candidate: {e}: not kept")
    if any(g.median_us is None or g.median_us <= 0 for g in (*b1, *b2, *c)):
        return _not_kept("the profiler did not record each launch's GPU time for the target kernels (a per-launch "
                         "profiler is needed for the launch-group keep metric): not kept")
    # BEST's two profiles: same groups expected; pair them like a candidate
    bb_pairs, b1_only, b2_only, _ = match_groups(b1, b2)
    if b1_only or b2_only:
        odd = ", ".join(g.label() for g in (*b1_only, *b2_only))
        return _not_kept(f"BEST_COMMIT launched different target groups in its two profiles ({odd}): the "
                         "benchmark's launches are not reproducible, so no per-group comparison holds: not kept")
    w = _weights(bb_pairs)
    after_of = {id(x): y for x, y in bb_pairs}
    shift = _shift(bb_pairs, w)
    spread = abs(shift)
    plan = clock_plan(*clocks, best_shift_pct=shift) if clocks is not None else ClockPlan()
    if plan.spread_explained:  # BEST's spread is its SM clock step, not noise: the rest of the floor
        floor = gpu_gain_floor(list(recent_spreads_pct), 0.0, min_gain_pct)
    else:
        floor = gpu_gain_floor([*recent_spreads_pct, spread], spread, min_gain_pct)
    counts_differ = any(x.calls != y.calls for x, y in bb_pairs)  # in this attempt's two BEST profiles
    time_driven = known_time_driven or counts_differ
    pairs, miss_b, extra_c, notes = match_groups(b1, c)
    base = {"floor": floor, "spread_pct": spread, "time_driven": time_driven,
            "clock": plan if clocks is not None else None,
            "unmatched_best": [g.label() for g in miss_b], "unmatched_candidate": [g.label() for g in extra_c]}
    if miss_b:
        return _not_kept(
            f"skipped work: BEST's target launch group(s) {', '.join(g.label() for g in miss_b)} have no launch in "
            "the candidate's profiled run (the fixed benchmark launches them unless results are cached or a call "
            "returns before its work): not kept", **base)
    deltas, ratio, var, skipped = [], 0.0, 0.0, []
    for x, cg in pairs:
        y = after_of[id(x)]
        refs = {"both": (x, y), "before": (x,), "after": (y,)}[plan.reference]
        bmed = sum(g.median_us for g in refs) / len(refs)
        r = cg.median_us / bmed
        b_se2 = sum(_rel_se(g) ** 2 * g.median_us ** 2 for g in refs) / len(refs) ** 2 / bmed ** 2
        ratio += w[id(x)] * r
        var += (w[id(x)] * r) ** 2 * (b_se2 + _rel_se(cg) ** 2)
        fewest = min(x.calls, y.calls)
        if (not time_driven and cg.calls < fewest) or (
                time_driven and r < 1.0 and cg.calls < TIME_DRIVEN_MIN_LAUNCH_RATIO * fewest):
            skipped.append(f"{x.label()}: {cg.calls} launches vs BEST's {x.calls} and {y.calls}")
        deltas.append(GroupDelta(group=x.label(), best_median_us=bmed, candidate_median_us=cg.median_us,
                                 best_calls=[x.calls, y.calls], candidate_calls=cg.calls, weight=w[id(x)],
                                 gain_pct=(1.0 - r) * 100.0))
    matched_c = sum(cg.total_us for _, cg in pairs)
    extra = sum(g.total_us for g in extra_c) / matched_c if matched_c > 0 else 0.0
    ratio *= 1.0 + extra
    gain = (1.0 - ratio) * 100.0 - plan.penalty_pct
    lo = gain - float(norm.ppf(confidence)) * math.sqrt(var) * (1.0 + extra) * 100.0
    best_us = sum(d.best_median_us for d in deltas)
    cand_us = sum(d.candidate_median_us for d in deltas) + sum(g.median_us for g in extra_c)
    base.update(gpu_best_us=best_us, lower_bound_pct=lo, groups=deltas)
    names = ", ".join(dict.fromkeys(short_kernel_name(x.kernel) for x, _ in pairs))
    harness = ("time-driven repetition (BEST's launch counts differ between its profiles)"
               if counts_differ else
               "time-driven repetition (BEST's launch counts differed between earlier profiles in this session)"
               if time_driven else "fixed repetition")
    if skipped:
        why = ("a faster kernel is launched more often by a time-driven harness, not less" if time_driven
               else "the fixed benchmark launches each group as often as BEST does")
        return _not_kept(f"skipped work ({harness}): {'; '.join(skipped[:5])}; {why}: not kept", **base)
    b1_us, b2_us = (sum(x.median_us for x, _ in pairs), sum(after_of[id(x)].median_us for x, _ in pairs))
    how = (f"median launch per group, {len(pairs)} group(s) of {names}, weighted by BEST's time share: "
           f"{best_us:.1f} -> {cand_us:.1f} us per step, {gain:+.3f}%, {confidence * 100:g}% lower bound {lo:+.3f}%; "
           f"{floor.shown()}; BEST profiled before and after the candidate: {b1_us:.1f} and {b2_us:.1f} us, "
           f"spread {spread:.3f}%; {harness}")
    if plan.note:
        how += f"; {plan.note}"
    if extra_c:
        how += f"; the candidate's extra group(s) {', '.join(g.label() for g in extra_c)} add {extra * 100:.2f}%"
    if notes:
        how += "; " + "; ".join(notes)
    kept = gain > floor.pct and lo > min_gain_pct
    if kept:
        reason = f"profiler GPU time: {how}"
    else:
        if lo > 0:  # significantly the script's way, but not beyond what BEST's own profiles already vary
            why_not = ("The GPU time moved the candidate's way, but by no more than BEST's own profiles vary: "
                       "a gain this small cannot be told apart from the GPU's state (clock, temperature)")
        elif suspect:
            why_not = ("The script's timing and the GPU kernel time disagree: the timing missed GPU work (work moved "
                       "to a side stream, a missing synchronize) or measured something other than the kernel")
        else:
            why_not = ("The target kernels' GPU time did not improve: the script metric's gain is not theirs (noise, "
                       "or time saved in kernels outside [profiler] kernel)")
        reason = f"profiler GPU time did not improve by more than the floor ({how}): not kept. {why_not}"
    base.pop("gpu_best_us")
    if classes:
        base["class_gpu_us"] = class_gpu_times(c, classes, names_regex) or _classes_through_best(pairs, extra_c, classes)
    return GroupKeepDecision(kept=kept, gpu_best_us=best_us, gpu_candidate_us=cand_us, gpu_delta_pct=gain,
                             metric_used="profiler GPU time", reason=reason, **base)


def _weights(pairs: list[tuple[LaunchGroup, LaunchGroup]]) -> dict[int, float]:
    """BEST's time share per pair (keyed by id of the first group), summing to 1."""
    total = sum(x.total_us + y.total_us for x, y in pairs)
    return {id(x): (x.total_us + y.total_us) / total if total > 0 else 1.0 / len(pairs) for x, y in pairs}


def _shift(pairs: list[tuple[LaunchGroup, LaunchGroup]], w: dict[int, float]) -> float:
    """BEST's signed change (%) from its first profile to its second, by median launch (+ = slower)."""
    return 100.0 * sum(w[id(x)] * (y.median_us - x.median_us) / ((x.median_us + y.median_us) / 2.0) for x, y in pairs)


def _spread(pairs: list[tuple[LaunchGroup, LaunchGroup]], w: dict[int, float]) -> float:
    return abs(_shift(pairs, w))


def _targets_of_both(first: KernelTrace | Sequence[LaunchGroup], second: KernelTrace | Sequence[LaunchGroup],
                     kernel_regex: str | None) -> tuple[list[LaunchGroup], list[LaunchGroup], str]:
    """The target groups of two profiled runs of BEST, and the regex both were picked by:
    `kernel_regex`, else exactly the kernel names of `first`'s targets (its hottest non-utility
    kernel), so both runs have the same target. Raises ProfilerError when a run lacks the target."""
    a = target_groups(_groups(first), kernel_regex)
    regex = kernel_regex or "|".join(f"^{re.escape(n)}$" for n in dict.fromkeys(g.kernel for g in a))
    return a, target_groups(_groups(second), regex), regex


def group_spread_pct(first: KernelTrace | Sequence[LaunchGroup], second: KernelTrace | Sequence[LaunchGroup],
                     kernel_regex: str | None = None) -> float:
    """The spread (%) between two profiled runs of unchanged BEST by launch group, the quantity
    `judge_groups` puts in `spread_pct`: |sum w (second - first) / mean| * 100 over the target
    groups' median launches, w = time share. For the baseline's adjacent profiles (append each to
    SessionState.gpu_spreads_pct). Raises ProfilerError when the target is missing, the runs
    launched different target groups, or a group lacks per-launch times."""
    a, b, _ = _targets_of_both(first, second, kernel_regex)
    pairs, only_a, only_b, _ = match_groups(a, b)
    if only_a or only_b:
        raise ProfilerError("the two profiled runs launched different target groups: "
                            + ", ".join(g.label() for g in (*only_a, *only_b)))
    if any(g.median_us is None or g.median_us <= 0 for g in (*a, *b)):
        raise ProfilerError("the profiler did not record each launch's GPU time for the target kernels")
    return _spread(pairs, _weights(pairs))


def launch_counts_differ(first: KernelTrace | Sequence[LaunchGroup], second: KernelTrace | Sequence[LaunchGroup],
                         kernel_regex: str | None = None) -> bool:
    """True when two profiled runs of unchanged BEST launched some paired target group a different
    number of times (a time-driven harness; SessionState.launch_counts_vary). False where the
    target is missing from either run or the runs cannot be paired. Never raises for data."""
    try:
        a, b, _ = _targets_of_both(first, second, kernel_regex)
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
        tg = target_groups(_groups(groups), kernel_regex)
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


def _classes_through_best(pairs: list[tuple[LaunchGroup, LaunchGroup]], extra: Sequence[LaunchGroup],
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
