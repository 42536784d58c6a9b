"""The keep metric of one attempt: profiled runs in the same lease, BEST, candidate, BEST again
(A/B/A), judged on profiler GPU time of the target kernels (rules.keep.judge_groups per launch
group, else rules.verdict.apply_keep_metric on the totals)."""

from __future__ import annotations

from kopt_mcp.errors import ProfilerError
from kopt_mcp.profilers.base import exact_names_regex, target_durations, target_gpu_time, target_launches
from kopt_mcp.referee.core import Session
from kopt_mcp.referee.runs import Attempt, profile_run
from kopt_mcp.rules.keep import judge_groups
from kopt_mcp.rules.verdict import KeepDecision, apply_keep_metric, gpu_gain_floor


def keep_metric(sess: Session, a: Attempt, suspect: bool = True, candidate_runs: int = 1) -> KeepDecision:
    """The keep metric from adjacent profiled runs in this lease: BEST, candidate, BEST again
    (A/B/A). The candidate is compared with the mean of the two BEST runs (launch by launch
    where both have per-launch times), which cancels a drift that is linear over the three runs;
    the two BEST runs' spread joins the session's spreads and sets the floor a gain must clear
    (rules.verdict.gpu_gain_floor). When only this attempt's own spread stops a gain that clears
    the rest of the floor (BEST's level jumped during the attempt) and `candidate_runs` allows a
    second profiled candidate run, it measures candidate, BEST once more and judges the later
    triple. Each run's SM clock (Profiled.clock) goes to judge_groups (rules/clocks.py). A failed
    profile, or a trace without the target kernels, is never kept (no fallback
    to a weaker metric). `candidate_runs`: profiled candidate runs allowed (>= 1). Sets
    `a.class_gpu_us` where launch groups map to classes; raises Tampered (kopt_mcp.errors.Tampered)."""
    s = sess.state
    try:
        prof = sess.profiler()
    except ProfilerError as e:
        prof, lost = None, str(e)
    else:
        lost = "the profiler backend is now \"none\""
    if prof is None or (prof.name == "none" and s.best.gpu_us is not None):
        # the baseline was judged on GPU time: the script metric alone would be a weaker keep metric
        return KeepDecision(kept=False, gpu_best_us=s.best.gpu_us, gpu_candidate_us=None,
                            gpu_delta_pct=None, metric_used="profiler GPU time", reason=(
                                f"the session's keep metric is profiler GPU time, but {lost}: not kept (the keep "
                                "decision never falls back to a weaker metric). Restore the profiler (e.g. "
                                "cupti-python, ncu or rocprofv3 where the server runs), or start a new session "
                                "with [profiler] backend = \"none\""))
    if prof.name == "none":
        return apply_keep_metric(None, None, [])
    g = sess.cfg.gates
    before = profile_target(sess, a, prof, "best-profile", a.best_tree)
    if isinstance(before, KeepDecision):
        return before
    runs_left = max(1, candidate_runs)
    while True:
        cand = profile_target(sess, a, prof, "candidate-profile", a.tree)
        if isinstance(cand, KeepDecision):
            return cand
        after = profile_target(sess, a, prof, "best-profile-after", a.best_tree)
        if isinstance(after, KeepDecision):
            return after
        if all(x[4].groups is not None for x in (before, cand, after)):
            # per launch group (kernel + grid/block), median launch: robust to time-driven
            # repetition (do_bench), warm-up launches and input-generation kernels (rules/keep.py)
            keep = judge_groups(before[4], cand[4], after[4],
                                sess.cfg.profiler.kernel or exact_names_regex(s.best.kernels),
                                recent_spreads_pct=s.gpu_spreads_pct, min_gain_pct=g.min_gpu_gain_pct,
                                confidence=g.confidence, suspect=suspect, classes=list(s.best.metrics),
                                clocks=(before[5], cand[5], after[5]), known_time_driven=s.launch_counts_vary)
            if keep.spread_pct is None:  # BEST's profiles could not be compared: nothing to learn
                return keep
            s.launch_counts_vary = s.launch_counts_vary or keep.time_driven
            # a spread that is BEST's SM clock step is not noise: it stays out of the session's spreads
            spread = (keep.spread_pct if keep.clock is not None and keep.clock.spread_explained
                      else s.record_spread_pct(keep.spread_pct))
            floor = keep.floor
            a.class_gpu_us = keep.class_gpu_us
        else:
            (b1, _, calls_b, dur_b1, *_), (c, names_c, calls_c, dur_c, *_), (b2, _, _, dur_b2, *_) = before, cand, after
            spread = s.record_gpu_spread(b1, b2)
            floor = gpu_gain_floor(s.gpu_spreads_pct, spread, g.min_gpu_gain_pct)
            best_launches = (None if dur_b1 is None or dur_b2 is None else
                             [(x + y) / 2.0 for x, y in zip(dur_b1, dur_b2)] if len(dur_b1) == len(dur_b2)
                             else dur_b1)
            keep = apply_keep_metric((b1 + b2) / 2.0, c, names_c, calls_b, calls_c, best_launches, dur_c,
                                     confidence=g.confidence, min_gain_pct=floor.pct, suspect=suspect)
            keep.reason += (f" (BEST profiled before and after the candidate: {b1:.1f} and {b2:.1f} us, spread "
                            f"{spread:.3f}%; {floor.shown()})")
        a.gpu_floor_pct = floor.pct if floor is not None else None
        jumped = (not keep.kept and floor is not None and floor.binding == "own_spread" and keep.gpu_delta_pct is not None
                  and keep.gpu_delta_pct > floor.rest_pct)
        runs_left -= 1
        if not jumped or runs_left == 0:
            return keep
        before = after
        a.warnings.append(
            f"BEST's GPU time moved {spread:.3f}% between its profiles around the candidate: profiled the "
            "candidate and BEST once more")


def profile_target(sess: Session, a: Attempt, prof, label: str, tree: str, who: str | None = None):
    """One profiled run of snapshot `tree` in a disposable checkout, verified afterwards: (target
    GPU time us, target names, launches, per-launch us or None, the trace, the run's SM clock or
    None), or a not-kept KeepDecision saying why it could not be read (`who`: what ran, for that
    text; default by `label`: "the candidate" or "BEST_COMMIT"). Raises Tampered."""
    p = profile_run(sess, a, prof, tree, label)
    who = who or ("the candidate" if label.startswith("candidate") else "BEST_COMMIT")
    if p.trace is None:
        return KeepDecision(kept=False, gpu_best_us=None, gpu_candidate_us=None, gpu_delta_pct=None,
                            metric_used="profiler GPU time",
                            reason=f"profiling {who} failed ({p.error}): not kept, the keep decision never "
                            "falls back to a weaker metric")
    try:
        us, names = target_gpu_time(p.trace, sess.cfg.profiler.kernel or exact_names_regex(sess.state.best.kernels))
    except ProfilerError as e:
        return KeepDecision(kept=False, gpu_best_us=None, gpu_candidate_us=None, gpu_delta_pct=None,
                            metric_used="profiler GPU time", reason=f"profiling {who}: {e}: not kept")
    return us, names, target_launches(p.trace, names), target_durations(p.trace, names), p.trace, p.clock
