"""The commit gate's re-measure rule (DESIGN.md: commit gate), pure: after formatting, the
candidate and BEST run once more in one lease; the candidate is committed only if the target is
still better in that round and no other class got worse by the noise threshold or more."""

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


__all__ = ["still_better"]
