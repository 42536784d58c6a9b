"""The keep metric of one attempt: profiled runs in the same lease, BEST, candidate, BEST again
(A/B/A), judged on profiler GPU time of the target kernels (rules.keep.judge_groups per launch
group, else rules.keep_totals.apply_keep_metric on the totals)."""

from __future__ import annotations

from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.profiles import Profiles, TargetProfile
from kopt_mcp.evidence.trace import target_durations, target_gpu_time, target_launches
from kopt_mcp.referee.core import Session
from kopt_mcp.referee.runs import Attempt, profile_run
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.floor import profile_again
from kopt_mcp.rules.gpu_time import judge_profiles
from kopt_mcp.rules.keep_totals import KeepDecision, apply_keep_metric
from kopt_mcp.rules.load import RoundLoad, count_rounds


def keep_metric(sess: Session, a: Attempt, suspect: bool = True, candidate_runs: int = 1) -> KeepDecision:
    """The keep metric from adjacent profiled runs in this lease: BEST, candidate, BEST again
    (A/B/A). The candidate is compared with the mean of the two BEST runs (launch by launch
    where both have per-launch times), which cancels a drift that is linear over the three runs;
    the two BEST runs' spread joins the session's spreads and sets the floor a gain must clear
    (rules.floor.gpu_gain_floor). When only this attempt's own spread stops a gain that clears
    the rest of the floor (BEST's level jumped during the attempt) and `candidate_runs` allows a
    second profiled candidate run, it measures candidate, BEST once more and judges the later
    triple. Each run's SM clock (Profiled.clock) goes to judge_groups (rules/clocks.py). A triple with
    a run under foreign load (rules/load.py, as a paired round) is profiled once more in its place; if
    that one is under load too, nothing is kept (code under_load). A failed
    profile, or a trace without the target kernels, is never kept (no fallback
    to a weaker metric). `candidate_runs`: profiled candidate runs allowed (>= 1). Sets
    `a.class_gpu_us` where launch groups map to classes; raises Tampered (kopt_mcp.errors.Tampered)."""
    s = sess.books.state
    try:
        prof = sess.profiler()
    except ProfilerError as e:
        prof, lost = None, str(e)
    else:
        lost = "the profiler backend is now \"none\""
    if prof is None or (prof.name == "none" and s.best.gpu_us is not None):
        # the baseline was judged on GPU time: the script metric alone would be a weaker keep metric
        return KeepDecision(kept=False, gpu_best_us=s.best.gpu_us, gpu_candidate_us=None,
                            gpu_delta_pct=None, metric_used="profiler GPU time", code=Code.PROFILER_LOST, reason=(
                                f"the session's keep metric is profiler GPU time, but {lost}: not kept (the keep "
                                "decision never falls back to a weaker metric). Restore the profiler (e.g. "
                                "cupti-python, ncu or rocprofv3 where the server runs), or start a new session "
                                "with [profiler] backend = \"none\""))
    if prof.name == "none":
        return apply_keep_metric(None, None, [])
    before = profile_target(sess, a, prof, "best-profile", a.best_tree)
    if isinstance(before, KeepDecision):
        return before
    runs_left, loads, repeated, judged = max(1, candidate_runs), [], False, None
    while True:
        cand = profile_target(sess, a, prof, "candidate-profile", a.tree)
        if isinstance(cand, KeepDecision):
            return cand
        after = profile_target(sess, a, prof, "best-profile-after", a.best_tree)
        if isinstance(after, KeepDecision):
            return after
        # a triple under foreign load is profiled once more in its place (once per attempt); a loaded
        # triple that cannot be replaced is not judged: an earlier clean triple's judgement stands
        loads.append(RoundLoad(runs=[before.load, cand.load, after.load]))
        lr = count_rounds(loads, sess.what.policy.screen(), can_measure=not repeated)
        if lr.repeat:
            repeated = True
            a.warnings.append(f"GPU-time profiles: {lr.reason}")
            before = profile_target(sess, a, prof, "best-profile", a.best_tree)
            if isinstance(before, KeepDecision):
                return before
            continue
        if len(loads) - 1 in lr.under_load:
            return judged or KeepDecision(
                kept=False, gpu_best_us=s.best.gpu_us, gpu_candidate_us=None, gpu_delta_pct=None,
                metric_used="profiler GPU time", code=Code.UNDER_LOAD,
                reason=f"GPU-time profiles (BEST, the candidate, BEST again): {lr.reason}")
        triple = Profiles(before=before, candidate=cand, after=after)
        j = judge_profiles(triple,
                           sess.target_regex, sess.what.policy,
                           s.gpu_spreads_pct, s.launch_counts_vary, list(s.best.metrics), suspect)
        if j.spread_pct is None:  # BEST's profiles could not be compared: nothing to learn
            return j.keep
        s.launch_counts_vary = s.launch_counts_vary or j.time_driven
        if j.record_spread_pct is not None:
            s.record_spread_pct(j.record_spread_pct)
        if triple.grouped:  # launch groups map to config classes (rules/keep.py class_gpu_times)
            a.class_gpu_us = j.class_gpu_us
        a.gpu_floor_pct = j.floor.pct if j.floor is not None else None
        runs_left -= 1
        if lr.under_load:  # the triple judged ran without load; the one before it did not
            j.keep.reason += f"; GPU-time profiles: {lr.reason}"
        judged = j.keep
        if not profile_again(j.keep.kept, j.keep.gpu_delta_pct, j.floor) or runs_left == 0:
            return j.keep
        before = after
        a.warnings.append(
            f"BEST's GPU time moved {j.spread_pct:.3f}% between its profiles around the candidate: profiled the "
            "candidate and BEST once more")


def profile_target(sess: Session, a: Attempt, prof, label: str, tree: str, who: str | None = None):
    """One profiled run of snapshot `tree` in a disposable checkout, verified afterwards: its
    TargetProfile (evidence/profiles.py), or a not-kept KeepDecision (code gpu_time_missing) saying
    why it could not be read (`who`: what ran, for that text; default by `label`: "the candidate"
    or "BEST_COMMIT"). Raises Tampered."""
    p = profile_run(sess, a, prof, tree, label)
    who = who or ("the candidate" if label.startswith("candidate") else "BEST_COMMIT")
    if p.trace is None:
        return KeepDecision(kept=False, gpu_best_us=None, gpu_candidate_us=None, gpu_delta_pct=None,
                            metric_used="profiler GPU time", code=Code.GPU_TIME_MISSING,
                            reason=f"profiling {who} failed ({p.error}): not kept, the keep decision never "
                            "falls back to a weaker metric")
    try:
        us, names = target_gpu_time(p.trace, sess.target_regex)
    except ProfilerError as e:
        return KeepDecision(kept=False, gpu_best_us=None, gpu_candidate_us=None, gpu_delta_pct=None,
                            metric_used="profiler GPU time", code=Code.GPU_TIME_MISSING,
                            reason=f"profiling {who}: {e}: not kept")
    return TargetProfile(trace=p.trace, us=us, names=names, launches=target_launches(p.trace, names),
                         durations_us=target_durations(p.trace, names), clock=p.clock, load=p.load)
