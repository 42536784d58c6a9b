"""The smallest detectable effect (issue 36 item 11), pure: from the run-to-run spread of the target
measured at the baseline and the rounds a verdict may take, the smallest gain the script metric's keep
test finds, and the rounds a wanted gain needs.

A verdict's keep on the script metric alone (rules/script.py) is a one-sided paired t test on log
ratios: one round's delta has SD sqrt(2) x run SD (two runs), n rounds give the mean SD / sqrt(n), and
the test is taken at Policy.keep_confidence (the overall confidence split over Policy.keep_looks,
Bonferroni). A true gain of L (log %) is kept with probability `power` where
L >= (t_{keep_confidence, df} + z_power) x sqrt(2) x run_sd / sqrt(n), df = the noise's df plus the
verdict's own runs (2 x (n - 1): BEST's and the candidate's repeats join the pooled noise). A keep also
needs min(2, script_rounds) rounds, so fewer never detect anything. Shown as improvement % (+ = better)
and as a ratio (x): a gain of L on the log scale is exp(L / 100) times better."""

from __future__ import annotations

import math

from pydantic import BaseModel

from kopt_mcp.rules.policy import Policy

#: the chance of keeping a candidate with the detectable gain (the rest are ties)
POWER = 0.8


class Detection(BaseModel):
    """The smallest gain `rounds` paired rounds keep with probability `power`: on the log scale
    (`log_pct`), as improvement % (`effect_pct`, + = better) and as a ratio (`ratio_x`); `confidence`
    the keep's per-look level and `df` the degrees of freedom it was taken with. `effect_pct` None:
    nothing is detectable in that many rounds (fewer than a keep needs, or no measurable spread)."""

    rounds: int
    confidence: float
    df: int
    log_pct: float | None
    effect_pct: float | None
    ratio_x: float | None


def _as_pct(log_pct: float, higher_is_better: bool) -> float:
    r = math.exp(log_pct / 100.0)
    return 100.0 * (r - 1.0) if higher_is_better else 100.0 * (1.0 - 1.0 / r)


def detectable(run_sd_pct: float, df: int, rounds: int, policy: Policy, higher_is_better: bool = False,
               power: float = POWER) -> Detection:
    """The smallest gain a verdict of `rounds` paired rounds keeps with probability `power` (module
    docstring), with the run-to-run spread `run_sd_pct` (SD of 100 x ln(metric), % of one run; df `df`,
    the baseline's) and `policy` (its keep confidence and looks for that many rounds). Raises ValueError
    for rounds < 1, a negative spread or a power outside (0, 1)."""
    from scipy.stats import norm
    from scipy.stats import t as student_t

    if rounds < 1 or run_sd_pct < 0 or not 0.0 < power < 1.0:
        raise ValueError(f"need rounds >= 1, spread >= 0 and 0 < power < 1; got {rounds}, {run_sd_pct}, {power}")
    p = policy.model_copy(update={"max_rounds": rounds, "spent_rounds": 0})
    total_df = df + 2 * (rounds - 1)
    if rounds < p.decision_rounds or total_df < 1:
        return Detection(rounds=rounds, confidence=p.keep_confidence, df=total_df, log_pct=None, effect_pct=None,
                         ratio_x=None)
    q = float(student_t.ppf(p.keep_confidence, total_df)) + float(norm.ppf(power))
    log_pct = q * math.sqrt(2.0) * run_sd_pct / math.sqrt(rounds)
    return Detection(rounds=rounds, confidence=p.keep_confidence, df=total_df, log_pct=log_pct,
                     effect_pct=_as_pct(log_pct, higher_is_better), ratio_x=math.exp(log_pct / 100.0))


def rounds_for(effect_pct: float, run_sd_pct: float, df: int, policy: Policy, max_rounds: int,
               higher_is_better: bool = False, power: float = POWER) -> int | None:
    """The fewest paired rounds (1 .. `max_rounds`) whose detectable gain is at most `effect_pct`
    (% + = better, > 0), or None where even `max_rounds` detect less. Raises ValueError for
    effect_pct <= 0 (and as `detectable`)."""
    if effect_pct <= 0:
        raise ValueError(f"the wanted gain must be > 0 %, got {effect_pct}")
    for n in range(1, max_rounds + 1):
        d = detectable(run_sd_pct, df, n, policy, higher_is_better, power)
        if d.effect_pct is not None and d.effect_pct <= effect_pct:
            return n
    return None


__all__ = ["POWER", "Detection", "detectable", "rounds_for"]
