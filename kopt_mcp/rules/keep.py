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

`judge_groups` gathers the targets (`_targets`) and the evidence (`_evidence`: BEST's pairing,
spread, clocks, floor, the candidate's pairing) once, then asks the predicates in order, each at
most ~40 lines: `_missing_groups`, `gain_figures` (the figures), `_skipped`, `_decide`. Every decision has
a stable `code` (rules/decision.py): gpu_time_missing, gpu_time_unreproducible, skipped_work,
gpu_time_win, gpu_time_below_floor (a gain > 0 that is not kept) or gpu_time_not_improved.
Target selection, BEST's spread and the config-class mapping (`class_gpu_times`, for
performance.md) are in rules/launch_groups.py.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.clock import RunClock
from kopt_mcp.evidence.groups import target_groups
from kopt_mcp.evidence.names import short_kernel_name
from kopt_mcp.rules.clocks import ClockPlan, clock_plan
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.floor import GainFloor, gpu_gain_floor
from kopt_mcp.rules.keep_figures import Evidence, Gain, GroupDelta, Runs, Targets, gain_figures
from kopt_mcp.rules.keep_totals import KeepDecision
from kopt_mcp.rules.launch_groups import (
    class_gpu_times,
    classes_through_best,
    group_classes,
    group_spread_pct,
    groups_of,
    launch_counts_differ,
    shift_pct,
    target_median_us,
    targets_of_both,
    time_shares,
)
from kopt_mcp.rules.pairing import match_groups

__all__ = ["GroupDelta", "GroupKeepDecision", "class_gpu_times", "group_classes", "group_spread_pct",
           "judge_groups", "launch_counts_differ", "match_groups", "target_median_us"]


class GroupKeepDecision(KeepDecision):
    """A KeepDecision from launch groups: the per-group deltas, the bound, floor and spread used."""

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


def _not_kept(code: Code, reason: str, **kw) -> GroupKeepDecision:
    return GroupKeepDecision(kept=False, gpu_best_us=kw.pop("gpu_best_us", None), gpu_candidate_us=None,
                             gpu_delta_pct=None, metric_used="profiler GPU time", code=code, reason=reason, **kw)


def _targets(best_before: Runs, candidate: Runs, best_after: Runs, kernel_regex: str | None
             ) -> Targets | GroupKeepDecision:
    """Step 1: every run has the target, with each launch's time; else not kept (gpu_time_missing)."""
    try:
        b1, b2, regex = targets_of_both(best_before, best_after, kernel_regex)
    except ProfilerError as e:
        return _not_kept(Code.GPU_TIME_MISSING, f"profiling BEST_COMMIT: {e}: not kept")
    try:  # without a regex the candidate's target is BEST's kernels by name: a renamed kernel is not matched
        c = target_groups(groups_of(candidate), regex)
    except ProfilerError as e:
        return _not_kept(Code.GPU_TIME_MISSING, f"profiling the candidate: {e}: not kept")
    if any(g.median_us is None or g.median_us <= 0 for g in (*b1, *b2, *c)):
        return _not_kept(Code.GPU_TIME_MISSING, (
            "the profiler did not record each launch's GPU time for the target kernels (a per-launch profiler is "
            "needed for the launch-group keep metric): not kept"))
    return Targets(b1, b2, c, regex)


def _evidence(t: Targets, recent_spreads_pct: Sequence[float], min_gain_pct: float, confidence: float,
              suspect: bool, classes: Sequence[str] | None, clocks: tuple | None,
              known_time_driven: bool) -> Evidence | GroupKeepDecision:
    """Steps 2 and 4's inputs: BEST's two profiles paired (else gpu_time_unreproducible), its
    spread, the clock plan and the floor; the candidate paired with BEST's first profile."""
    bb_pairs, b1_only, b2_only, _ = match_groups(t.b1, t.b2)
    if b1_only or b2_only:
        odd = ", ".join(g.label() for g in (*b1_only, *b2_only))
        return _not_kept(Code.GPU_TIME_UNREPRODUCIBLE, (
            f"BEST_COMMIT launched different target groups in its two profiles ({odd}): the benchmark's launches "
            "are not reproducible, so no per-group comparison holds: not kept"))
    w = time_shares(bb_pairs)
    shift = shift_pct(bb_pairs, w)
    spread = abs(shift)
    plan = clock_plan(*clocks, best_shift_pct=shift) if clocks is not None else ClockPlan()
    if plan.spread_explained:  # BEST's spread is its SM clock step, not noise: the rest of the floor
        floor = gpu_gain_floor(list(recent_spreads_pct), 0.0, min_gain_pct)
    else:
        floor = gpu_gain_floor([*recent_spreads_pct, spread], spread, min_gain_pct)
    counts_differ = any(x.calls != y.calls for x, y in bb_pairs)  # in this attempt's two BEST profiles
    pairs, miss_b, extra_c, notes = match_groups(t.b1, t.c)
    return Evidence(t=t, after_of={id(x): y for x, y in bb_pairs}, w=w, spread=spread, plan=plan,
                     clocked=clocks is not None, floor=floor, counts_differ=counts_differ,
                     time_driven=known_time_driven or counts_differ, pairs=pairs, miss_b=miss_b, extra_c=extra_c,
                     notes=notes, min_gain_pct=min_gain_pct, confidence=confidence, suspect=suspect, classes=classes)


def _missing_groups(ev: Evidence) -> GroupKeepDecision | None:
    """Step 2: a BEST group without any candidate group is skipped work (skipped_work)."""
    if not ev.miss_b:
        return None
    return _not_kept(Code.SKIPPED_WORK, (
        f"skipped work: BEST's target launch group(s) {', '.join(g.label() for g in ev.miss_b)} have no launch in "
        "the candidate's profiled run (the fixed benchmark launches them unless results are cached or a call "
        "returns before its work): not kept"), **ev.base())


def _skipped(ev: Evidence, g: Gain) -> GroupKeepDecision | None:
    """Step 5: a group launched too rarely for the harness is skipped work (skipped_work)."""
    if not g.skipped:
        return None
    why = ("a faster kernel is launched more often by a time-driven harness, not less" if ev.time_driven
           else "the fixed benchmark launches each group as often as BEST does")
    return _not_kept(Code.SKIPPED_WORK, f"skipped work ({ev.harness}): {'; '.join(g.skipped[:5])}; {why}: not kept",
                     **ev.base(), gpu_best_us=g.best_us, lower_bound_pct=g.lo, groups=g.deltas)


def _how(ev: Evidence, g: Gain) -> str:
    """The figures behind a decision, in words, for the reason."""
    names = ", ".join(dict.fromkeys(short_kernel_name(x.kernel) for x, _ in ev.pairs))
    b1_us = sum(x.median_us for x, _ in ev.pairs)
    b2_us = sum(ev.after_of[id(x)].median_us for x, _ in ev.pairs)
    how = (f"median launch per group, {len(ev.pairs)} group(s) of {names}, weighted by BEST's time share: "
           f"{g.best_us:.1f} -> {g.cand_us:.1f} us per step, {g.gain:+.3f}%, {ev.confidence * 100:g}% lower bound "
           f"{g.lo:+.3f}%; {ev.floor.shown()}; BEST profiled before and after the candidate: {b1_us:.1f} and "
           f"{b2_us:.1f} us, spread {ev.spread:.3f}%; {ev.harness}")
    if ev.plan.note:
        how += f"; {ev.plan.note}"
    if ev.extra_c:
        how += (f"; the candidate's extra group(s) {', '.join(x.label() for x in ev.extra_c)} add "
                f"{g.extra * 100:.2f}%")
    if ev.notes:
        how += "; " + "; ".join(ev.notes)
    return how


def _why_not(ev: Evidence, g: Gain) -> str:
    """Why a gain that did not clear the floor was not kept, by the way the GPU time moved."""
    if g.lo > 0:  # significantly the script's way, but not beyond what BEST's own profiles already vary
        return ("The GPU time moved the candidate's way, but by no more than BEST's own profiles vary: "
                "a gain this small cannot be told apart from the GPU's state (clock, temperature)")
    if ev.suspect:
        return ("The script's timing and the GPU kernel time disagree: the timing missed GPU work (work moved "
                "to a side stream, a missing synchronize) or measured something other than the kernel")
    return ("The target kernels' GPU time did not improve: the script metric's gain is not theirs (noise, "
            "or time saved in kernels outside [profiler] kernel)")


def _decide(ev: Evidence, g: Gain) -> GroupKeepDecision:
    """Step 4: kept (gpu_time_win) when the gain clears the floor and its lower bound clears
    `min_gain_pct`; gpu_time_loss when the loss as measured, less a lower candidate clock's share
    (ClockPlan credit_pct) and without the higher-clock penalty a win pays, clears the floor and
    the upper bound is below -`min_gain_pct` (slower beyond what BEST's own profiles vary: the
    verdict is `regressed`, as by harness unit, rules/units.py); else gpu_time_below_floor (a
    gain > 0) or gpu_time_not_improved."""
    kept = g.gain > ev.floor.pct and g.lo > ev.min_gain_pct
    how = _how(ev, g)
    slack = ev.plan.credit_pct + ev.plan.penalty_pct  # the penalty guards a keep; it never makes a loss
    if kept:
        code, reason = Code.GPU_TIME_WIN, f"profiler GPU time: {how}"
    elif g.gain + slack < -ev.floor.pct and g.hi + slack < -ev.min_gain_pct:
        code = Code.GPU_TIME_LOSS
        reason = f"slower beyond the GPU-time floor ({how}; upper bound {g.hi:+.3f}%): not kept"
    else:
        code = Code.GPU_TIME_BELOW_FLOOR if g.gain > 0 else Code.GPU_TIME_NOT_IMPROVED
        reason = f"profiler GPU time did not improve by more than the floor ({how}): not kept. {_why_not(ev, g)}"
    more = {}
    if ev.classes:
        more["class_gpu_us"] = (class_gpu_times(ev.t.c, ev.classes, ev.t.regex)
                                or classes_through_best(ev.pairs, ev.extra_c, ev.classes))
    return GroupKeepDecision(kept=kept, gpu_best_us=g.best_us, gpu_candidate_us=g.cand_us, gpu_delta_pct=g.gain,
                             metric_used="profiler GPU time", code=code, reason=reason, lower_bound_pct=g.lo,
                             upper_bound_pct=g.hi, groups=g.deltas, **ev.base(), **more)


def judge_groups(best_before: Runs, candidate: Runs, best_after: Runs, kernel_regex: str | None = None,
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
    which). `code` says why, for every decision (module docstring). Never raises for data; re.error for a `kernel_regex` that is not a regular expression.
    """
    t = _targets(best_before, candidate, best_after, kernel_regex)
    if isinstance(t, GroupKeepDecision):
        return t
    ev = _evidence(t, recent_spreads_pct, min_gain_pct, confidence, suspect, classes, clocks, known_time_driven)
    if isinstance(ev, GroupKeepDecision):
        return ev
    missing = _missing_groups(ev)
    if missing is not None:
        return missing
    g = gain_figures(ev)
    return _skipped(ev, g) or _decide(ev, g)
