"""The commit gate's re-measure rule (DESIGN.md: commit gate), pure: after formatting, the
candidate and BEST run once more in one lease; the candidate is committed only if the target is
still better in that round and no other class got worse by the noise threshold or more.

A pair that ran under foreign load (rules/load.py `under_load`) and is no longer better is measured
again (up to LOAD_REMEASURES more pairs); if every pair ran under load, nothing is committed and the
improvement stays pending (`commit_under_load`): a round the load may have decided never throws
away a keep that clean rounds measured (issue 27: the commit step ignored load)."""

from __future__ import annotations

from kopt_mcp.rules.decision import Code, Decision
from kopt_mcp.rules.script import ScriptDecision


def still_better(remeasure: ScriptDecision, target: str, noise_pct: float) -> Decision:
    """`remeasure`: the script rule's decision over the commit's one paired round (target deltas %,
    + = better; per-class means). Outcome "commit" (code still_better) when the target's delta is
    > 0 and no other class is <= -noise_pct; else "not_kept" (code no_longer_better), the reason
    naming the target's delta and the worse classes. Never raises."""
    delta = remeasure.target_deltas_pct[-1]
    worse = [c.key for c in remeasure.classes if c.key != target and c.mean_pct <= -noise_pct]
    numbers = {"target_delta_pct": delta, "worse_classes": ", ".join(worse)}
    if delta <= 0 or worse:
        return Decision(outcome="not_kept", code=Code.NO_LONGER_BETTER, numbers=numbers, reason=(
            f"no longer better after formatting and re-measure: target {target} {delta:+.2f}%"
            + (f", worse: {', '.join(worse)}" if worse else "")))
    return Decision(outcome="commit", code=Code.STILL_BETTER, numbers=numbers, reason=(
        f"re-measured at commit: target {target} {delta:+.2f}%, 1 round, no class worse by {noise_pct:g}% or more"))


#: pairs measured again at commit in place of one that ran under foreign load and was no longer better
LOAD_REMEASURES = 2


def commit_under_load(still: Decision, loaded: bool, tries_left: int, load_shown: str = "") -> Decision:
    """The commit decision with the re-measure pair's foreign load. `still`: `still_better`'s
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


__all__ = ["LOAD_REMEASURES", "commit_under_load", "still_better"]
