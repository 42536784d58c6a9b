"""The verdict of one attempt from its measured decisions (pure): the script metric's decision
(rules/script.py) and, where a profiler ran, the keep metric's (rules/keep.py, rules/keep_totals.py).

The script metric screens; profiler GPU time decides a keep (DESIGN.md: keep metric): a script win
the GPU time does not confirm is a `tie` with the keep metric's code.
"""

from __future__ import annotations

from kopt_mcp.rules.decision import Decision
from kopt_mcp.rules.keep_totals import KeepDecision
from kopt_mcp.rules.script import ScriptDecision


def clear_script_win(script: ScriptDecision, noise_pct: float) -> bool:
    """True when the script metric showed a clear, significant win (mean >= the noise threshold and
    a lower bound > 0): if the GPU time then disagrees, the keep metric's reason names the likely
    timing cheats (a side stream, a missing synchronize, an early return)."""
    iv = script.target_interval
    return bool(iv and iv.mean_pct >= noise_pct and iv.lo_pct > 0)


def attempt_verdict(script: ScriptDecision, keep: KeepDecision | None) -> Decision:
    """The attempt's verdict: the script metric's outcome unless it is `improved`; then `improved`
    where the keep metric kept it (code: the keep metric's: gpu_time_win, or script_only without a profiler),
    else `tie` with the keep metric's code and reason. `keep` None: not measured (the script's
    outcome stands, which is then not `improved`). Never raises."""
    if script.outcome != "improved" or keep is None:
        return Decision(outcome=script.outcome, code=script.code, reason=script.reason)
    if not keep.kept:
        return Decision(outcome="tie", code=keep.code, reason=keep.reason)
    return Decision(outcome="improved", code=keep.code, reason=f"{script.reason}; {keep.reason}")


__all__ = ["attempt_verdict", "clear_script_win"]
