"""The commit gate's re-measure rule (DESIGN.md: commit gate), pure: the commit step re-measures with
the metric that decided the verdict and judges with the verdict's own rule (issue 34 item 1):

- a keep decided on profiler GPU time: the commit's profiled runs (BEST, the candidate; BEST again
  only where that pair leaves the rule undecided) go through the verdict's rule
  (`rules.verdict.profiled_verdict` over `rules.gpu_time.judge_profiles`: GPU time per harness unit,
  the class split, the whole operation per config class); the benchmark's own metric only screens,
  as at the verdict;
- a keep decided on the script metric: the commit's paired round(s) join the verdict's counted
  rounds and `rules.script.decide` rules over them all with the verdict's policy, so the class rule
  is the verdict's (a class is `worse` only when the verdict's test says so).

`commit_decision` maps the verdict rule's answer to the commit's: `improved` commits (code
still_better); an undecided answer measures again while the budget lasts; anything else is
refused with the rule's own code and words (gpu_time_below_floor, operation_divergent,
script_not_confirmed, ...), never a code of another rule.

Fewest runs (issue 34 item 6): a GPU-time keep whose verdict's lower bound clears the floor by
STANDS_MARGIN, on the very tree the verdict judged against the same BEST, is not re-measured in
process; the out-of-process confirmation (ncu / rocprofv3 as the benchmark's parent) re-measures it
instead, so the commit costs two runs, not four (`verdict_stands`).

A pair that ran under foreign load (rules/load.py `under_load`) and no longer favours the candidate
is measured again (up to LOAD_REMEASURES more pairs); if every pair ran under load, nothing is
committed and the improvement stays pending (`commit_under_load`): a round the load may have decided
never throws away a keep that clean rounds measured (issue 27: the commit step ignored load).
"""

from __future__ import annotations

import statistics

from kopt_mcp.rules.decision import Code, Decision
from kopt_mcp.rules.percent import ratio_shown

#: pairs measured again at commit in place of one that ran under foreign load and was no longer better
LOAD_REMEASURES = 2
#: commit re-measure pairs at most where the verdict's rule stays undecided (load repeats not counted)
COMMIT_PAIRS = 2
#: a GPU-time verdict's lower bound (%) at least this many times its floor stands at commit unmeasured
STANDS_MARGIN = 2.0


def verdict_stands(lower_bound_pct: float | None, floor_pct: float | None, fresh_tree: bool,
                   confirmable: bool) -> Decision:
    """Whether the commit may rest on the verdict's own profiled A/B/A instead of re-measuring in
    process. `lower_bound_pct`: the verdict's one-sided lower bound of the GPU-time gain (%, KeepDecision
    lower_bound_pct); `floor_pct`: the GPU-time floor it cleared (%); `fresh_tree`: the tree differs
    from the one judged (formatted, or re-applied onto a newer BEST); `confirmable`: an out-of-process
    confirmation will run (ncu / rocprofv3 on PATH, `[profiler] confirm` not off).

    Outcome "commit" (code verdict_stands) where the tree is the judged one, a confirmation will run
    and lower_bound >= STANDS_MARGIN x floor (> 0); else "measure_again" (code needs_round). Never raises."""
    numbers = {"lower_bound_pct": lower_bound_pct, "floor_pct": floor_pct, "margin": STANDS_MARGIN}
    why = ("the tree differs from the one judged" if fresh_tree else
           "no out-of-process confirmation can run" if not confirmable else
           "the verdict has no GPU-time bound" if lower_bound_pct is None or not floor_pct or floor_pct <= 0 else "")
    if not why and lower_bound_pct < STANDS_MARGIN * floor_pct:
        why = f"its lower bound {lower_bound_pct:+.3f}% is below {STANDS_MARGIN:g} x the floor {floor_pct:.3f}%"
    if why:
        return Decision(outcome="measure_again", code=Code.NEEDS_ROUND, numbers=numbers,
                        reason=f"re-measuring at commit: {why}")
    return Decision(outcome="commit", code=Code.VERDICT_STANDS, numbers=numbers, reason=(
        f"the verdict's profiled A/B/A stands (GPU-time lower bound {lower_bound_pct:+.3f}% >= {STANDS_MARGIN:g} x "
        f"the floor {floor_pct:.3f}%, the same tree against the same BEST): no in-process re-measure; the "
        "out-of-process confirmation measures it again"))


def commit_decision(rule: Decision, metric: str, runs: int, can_measure: bool, formatted: bool = False) -> Decision:
    """The commit's decision from the verdict rule's answer over the re-measure (`rule`: outcome
    improved / tie / regressed / divergent / needs_round, with its code and reason; `metric`: the
    metric that decided the verdict, "profiler GPU time" or "script metric"; `runs`: benchmark runs
    the re-measure took so far; `can_measure`: one more run is allowed; `formatted`: the [format]
    command changed the tree, so what was measured is the formatted tree). Outcomes: "commit" (code
    still_better), "measure_again" (code needs_round), "not_kept" (the rule's code). Never raises."""
    what = "the formatted tree, " if formatted else ""
    head = f"re-measured at commit ({what}{runs} run(s), {metric}, the verdict's rule)"
    numbers = {"runs": runs, "metric": metric}
    if rule.outcome == "improved":
        return Decision(outcome="commit", code=Code.STILL_BETTER, numbers=numbers, reason=f"{head}: {rule.reason}")
    if rule.outcome == "needs_round" and can_measure:
        return Decision(outcome="measure_again", code=Code.NEEDS_ROUND, numbers=numbers,
                        reason=f"{head}: undecided, measuring once more: {rule.reason}")
    code = Code.NO_LONGER_BETTER if rule.outcome == "needs_round" else rule.code
    said = "undecided within the commit's runs" if rule.outcome == "needs_round" else rule.outcome
    return Decision(outcome="not_kept", code=code, numbers=numbers, reason=(
        f"not committed: {head} the candidate is {said} ({code}): {rule.reason}"))


def commit_under_load(still: Decision, loaded: bool, tries_left: int, load_shown: str = "") -> Decision:
    """The commit decision with the re-measure pair's foreign load. `still`: `commit_decision`'s
    decision; `loaded`: either run of the pair ran under foreign load; `tries_left`: pairs that may
    still be measured in its place; `load_shown`: the load in words. Returns `still` where the pair
    ran clean, or was still better despite the load (said in the reason); outcome "measure_again"
    (code load_repeat) where a loaded pair was no longer better and a try is left; else outcome
    "wait" (code under_load): nothing committed, the improvement stays pending. Never raises."""
    if not loaded:
        return still
    if still.outcome == "commit":
        return still.model_copy(update={"reason": f"{still.reason} (the pair ran under foreign load: {load_shown})"})
    if tries_left > 0:
        return Decision(outcome="measure_again", code=Code.LOAD_REPEAT, numbers=still.numbers, reason=(
            f"the re-measure ran under foreign load ({load_shown}) and read {still.reason}: measuring the pair "
            f"again ({tries_left} more at most)"))
    return Decision(outcome="wait", code=Code.UNDER_LOAD, numbers=still.numbers, reason=(
        f"every re-measure at commit ran under foreign load (last: {load_shown}) and read {still.reason}. Nothing "
        "was committed and nothing is lost: the improvement stays pending; call commit_improvement again when "
        "the device is idle"))


def pooled_best(runs: list[dict[str, float]]) -> dict[str, float]:
    """BEST's stored figure per config class from every measurement of it (class -> value): the median
    over `runs` (the verdict's candidate runs and the commit's, once that tree is BEST), so one noisy
    commit-time run does not set BEST (issue 34 item 1: one commit re-measure set BEST at 1.08 ms while
    every later pair measured 0.69-0.71 ms). Classes missing from a run are pooled over the others.
    Returns {} for no runs. Never raises."""
    keys = dict.fromkeys(k for r in runs for k in r)
    return {k: statistics.median(r[k] for r in runs if k in r) for k in keys}

def neutral_keep(neutral_reason: str, verdict: str | None, same_best: bool, classes: dict[str, float],
                 target_pct: float | None, noise_pct: float, ratios: dict[str, float | None] | None = None) -> Decision:
    """May commit_improvement keep the latest verdict's candidate as neutral (issue 36 item 9: a
    speed-neutral correctness fix was `tie` and reverted)? `neutral_reason`: why, by name (the agent's
    words); `verdict`: the latest verdict's outcome (None: none); `same_best`: BEST_COMMIT is still the
    one it was judged against; `classes`: each config class's mean change (%, + = better) in that
    verdict; `target_pct`: the target's (None: unknown); `noise_pct`: the noise threshold (%);
    `ratios`: each class's ratio (x), for the words.

    Outcome "commit" (code neutral_kept) only for a `tie` with a reason, against the same BEST, where
    no class and not the target is worse beyond the noise threshold (mean <= -noise_pct); else
    "not_kept" with neutral_refused_no_reason / _not_tie / _best_moved / _worse_class, in that order.
    A neutral keep is never a gain. Never raises."""
    worse = {k: v for k, v in classes.items() if v <= -noise_pct}
    if target_pct is not None and target_pct <= -noise_pct:
        worse["target"] = target_pct
    numbers = {"noise_pct": noise_pct, "worse_classes": len(worse), "target_pct": target_pct}
    if not neutral_reason.strip():
        return Decision(outcome="not_kept", code=Code.NEUTRAL_REFUSED_NO_REASON, numbers=numbers, reason=(
            "a neutral keep needs its reason by name (neutral_reason, e.g. \"correctness fix: ...\")"))
    if verdict != "tie":
        return Decision(outcome="not_kept", code=Code.NEUTRAL_REFUSED_NOT_TIE, numbers=numbers, reason=(
            f"only a `tie` can be kept as neutral; the latest verdict is {verdict or 'none'}: an improved one is "
            "committed without neutral_reason, anything else is not kept"))
    if not same_best:
        return Decision(outcome="not_kept", code=Code.NEUTRAL_REFUSED_BEST_MOVED, numbers=numbers, reason=(
            "BEST_COMMIT moved since the tie was judged: apply the change again and call save_and_test"))
    shown = ", ".join(f"{k} {ratio_shown(v, (ratios or {}).get(k))}" for k, v in classes.items())
    if worse:
        return Decision(outcome="not_kept", code=Code.NEUTRAL_REFUSED_WORSE_CLASS, numbers=numbers, reason=(
            f"not kept as neutral: {', '.join(f'{k} {v:+.2f}%' for k, v in worse.items())} worse beyond the "
            f"{noise_pct:g}% noise threshold (per class {shown})"))
    return Decision(outcome="commit", code=Code.NEUTRAL_KEPT, numbers=numbers, reason=(
        f"kept as neutral ({' '.join(neutral_reason.split())}): the verdict was a tie and no class is worse beyond the "
        f"{noise_pct:g}% noise threshold (per class {shown}); not a gain: the session gain, performance.md and the "
        "Stop Summary do not count it as one"))


__all__ = ["COMMIT_PAIRS", "LOAD_REMEASURES", "commit_decision", "commit_under_load", "neutral_keep", "pooled_best"]
