"""The verdict of one attempt from its measured decisions (pure): the script metric's decision
(rules/script.py) and, where a profiler ran, the keep metric's (rules/keep.py, rules/keep_totals.py).

The script metric screens; profiler GPU time decides a keep (DESIGN.md: keep metric): a script win
the GPU time does not confirm is a `tie` with the keep metric's code. A reward hack the keep metric
names (HACK_CODES: a replayed result, persisting L2; issue 38) decides before anything else:
`rejected` with its code, whatever the script metric says (on an H200 the replayed-result and
persisting-L2 cheats were also slower by the script metric, and `regressed` hid what they were).
Skipped work (a unit or group with no target launch) is not among them: an honest candidate that
sends a config to another kernel looks the same, so it stays a `tie` (or the script metric's
outcome) with its code, never kept.
"""

from __future__ import annotations

from kopt_mcp.rules.class_split import split_on_target
from kopt_mcp.rules.decision import Code, Decision
from kopt_mcp.rules.floor import profile_again
from kopt_mcp.rules.gpu_time import GpuTimeJudgement
from kopt_mcp.rules.keep_totals import KeepDecision
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.script import ScriptDecision

#: the keep metric's codes for a reward hack (rules/units.py step 2), evidence no honest candidate leaves
#: (copies in place of the target's launches, an L2 access policy window): the verdict is `rejected`
HACK_CODES = frozenset({Code.REPLAYED_RESULT, Code.PERSISTING_L2})


def hack_verdict(script: ScriptDecision, keep: KeepDecision | None) -> Decision | None:
    """`rejected` with the keep metric's code and reason where it named a reward hack (HACK_CODES),
    the script metric's reason after it; None otherwise. Never raises."""
    if keep is None or keep.code not in HACK_CODES:
        return None
    return Decision(outcome="rejected", code=keep.code, reason=f"{keep.reason}; script metric: {script.reason}")


def clear_script_win(script: ScriptDecision, noise_pct: float) -> bool:
    """True when the script metric showed a clear, significant win (mean >= the noise threshold and
    a lower bound > 0): if the GPU time then disagrees, the keep metric's reason names the likely
    timing cheats (a side stream, a missing synchronize, an early return)."""
    iv = script.target_interval
    return bool(iv and iv.mean_pct >= noise_pct and iv.lo_pct > 0)


def attempt_verdict(script: ScriptDecision, keep: KeepDecision | None) -> Decision:
    """The attempt's verdict: the script metric's outcome unless it is `improved`; then `improved`
    where the keep metric kept it (code: the keep metric's: gpu_time_win, or script_only without a profiler),
    else `tie` with the keep metric's code and reason (`rejected` for a hack: hack_verdict). `keep` None:
    not measured (the script's outcome stands, which is then not `improved`). Never raises."""
    hack = hack_verdict(script, keep)
    if hack is not None:
        return hack
    if script.outcome != "improved" or keep is None:
        return Decision(outcome=script.outcome, code=script.code, reason=script.reason)
    if not keep.kept:
        return Decision(outcome="tie", code=keep.code, reason=keep.reason)
    return Decision(outcome="improved", code=keep.code, reason=f"{script.reason}; {keep.reason}")


def _script_slower(script: ScriptDecision, noise_pct: float) -> bool:
    """The script metric's target is slower beyond the noise threshold and significantly so (its
    pooled bound below 0): worth a confirming round where the GPU time does not decide."""
    iv = script.target_interval
    return bool(iv and iv.mean_pct <= -noise_pct and iv.hi_pct < 0)


def profiled_verdict(script: ScriptDecision, gpu: GpuTimeJudgement, policy: Policy, can_measure: bool) -> Decision:
    """The verdict where every run of the attempt was profiled (BEST, candidate, BEST; then more
    rounds only when undecided): profiler GPU time decides both ways, the script metric of the same
    runs screens. Outcome "needs_round" asks for one more candidate run and BEST run
    (`can_measure`: the [gates] max_rounds budget allows it). In order:

    0. A reward hack the keep metric named (HACK_CODES): `rejected` with its code (hack_verdict), no
       round more.
    1. GPU time `regressed` (a loss beyond the floor, target or whole operation): regressed, or
       `divergent` where the script metric found the target class clearly faster and another class
       slower (the per-class win is the agent's lead; divergent keeps nothing either), or where the
       GPU time per config class shows that split (rules/class_split.py: code gpu_time_divergent;
       also when the GPU time overall is a tie; not where the script metric confirmed the target
       slower); a clear script win of the target not yet confirmed asks for the round that tells
       the two apart.
    2. The script metric's slowdown confirmed over two rounds (script_regression): regressed, also
       against a GPU-time win (the benchmark's own metric is what its users see).
    3. GPU time `improved` / `divergent`: that outcome, unless the script metric is significantly
       slower in this round and the budget allows a confirming round (needs_round).
    4. GPU time `tie`: one more round where the gain was stopped only by BEST's own jump
       (rules.floor.profile_again) or the script metric is significantly slower; else tie with the
       GPU time's code (gpu_time_not_improved where the script metric showed a clear win: the
       reason names the timing cheats). Never raises."""
    keep = gpu.keep
    hack = hack_verdict(script, keep)
    if hack is not None:
        return hack
    if gpu.outcome == "regressed" and script.outcome == "divergent":
        return Decision(outcome="divergent", code=script.code, reason=f"{script.reason}; GPU time: {keep.reason}")
    split = (split_on_target(gpu.class_rows, script.target, gpu.floor.pct if gpu.floor is not None else 0.0)
             if gpu.outcome in ("regressed", "tie") and script.outcome != "regressed" else None)
    if split is not None:
        return Decision(outcome="divergent", code=Code.GPU_TIME_DIVERGENT, reason=(
            f"{split.reason()}: keep the winner as a specialised kernel behind dispatch; GPU time overall: "
            f"{keep.reason}; script metric: {script.reason}"))
    if gpu.outcome == "regressed":
        if can_measure and script.needs_round and clear_script_win(script, policy.noise_pct):
            return Decision(outcome="needs_round", code=Code.NEEDS_ROUND, reason=(
                f"GPU time slower, but the script metric shows a clear win of the target ({script.reason}): one more "
                "round tells a divergent candidate from a regression"))
        return Decision(outcome="regressed", code=keep.code, reason=keep.reason)
    if script.outcome == "regressed":
        return Decision(outcome="regressed", code=script.code, reason=f"{script.reason}; {keep.reason}")
    slower = _script_slower(script, policy.noise_pct)
    if gpu.outcome in ("improved", "divergent"):
        if slower and can_measure:
            return Decision(outcome="needs_round", code=Code.NEEDS_ROUND, reason=(
                f"GPU time {gpu.outcome}, but the script metric is slower ({script.reason}): confirming"))
        return Decision(outcome=gpu.outcome, code=keep.code, reason=keep.reason)
    if can_measure and (slower or profile_again(keep.kept, keep.gpu_delta_pct, gpu.floor)):
        return Decision(outcome="needs_round", code=Code.NEEDS_ROUND, reason=f"undecided: {keep.reason}")
    code = keep.code
    reason = keep.reason
    if clear_script_win(script, policy.noise_pct) and keep.code in (Code.GPU_TIME_NOT_IMPROVED,
                                                                    Code.GPU_TIME_BELOW_FLOOR):
        reason += (". The script metric showed a clear win the GPU time does not: the timing missed GPU work "
                   "(a side stream, a missing synchronize) or measured something other than the kernels")
    return Decision(outcome="tie", code=code, reason=reason)


__all__ = ["HACK_CODES", "attempt_verdict", "clear_script_win", "hack_verdict", "profiled_verdict"]
