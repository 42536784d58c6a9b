"""Per-config-class verdicts (DESIGN.md): noise rule, divergence, keep metric.

Input: paired measurement rounds of BEST and the candidate taken in the same GPU lease
(round = one BEST run then one candidate run), per class. The target is one class key or
`global` (the geometric mean of per-class ratios). Output: the script-metric decision, or a
request for one more (confirming) round. The keep metric (profiler GPU time) is applied after,
by `apply_keep_metric`.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel

from kopt_mcp.metrics import improvement_pct
from kopt_mcp.rules.noise import classify_change, confirmation_floor_pct, subnoise_confirmed

GLOBAL = "global"
ScriptOutcome = Literal["improved", "tie", "regressed", "divergent"]


class Round(BaseModel):
    """One paired measurement: class key -> metric for BEST and for the candidate."""

    best: dict[str, float]
    candidate: dict[str, float]


class ClassDelta(BaseModel):
    """A class's improvement in % per round (+ = better) and its mean."""

    key: str
    best: float
    candidate: float
    deltas_pct: list[float]
    mean_pct: float


class ScriptDecision(BaseModel):
    """The script-metric decision. `needs_round`: measure one more paired round, then decide again."""

    outcome: ScriptOutcome
    needs_round: bool
    target: str
    target_deltas_pct: list[float]
    classes: list[ClassDelta]
    worse_classes: list[str]
    reason: str


class VerdictError(ValueError):
    """The target or the rounds do not fit the measured classes."""


def _target_value(values: dict[str, float], target: str) -> float:
    if target == GLOBAL:
        return math.exp(sum(math.log(v) for v in values.values()) / len(values))
    return values[target]


def _check(rounds: list[Round], target: str) -> list[str]:
    if not rounds:
        raise VerdictError("no measurement round")
    keys = list(rounds[0].best)
    for r in rounds:
        if set(r.best) != set(keys) or set(r.candidate) != set(keys):
            raise VerdictError(
                f"BEST measured classes {sorted(r.best)} but the candidate {sorted(r.candidate)}: "
                "the benchmark must measure the same config classes every run"
            )
    if target != GLOBAL and target not in keys:
        raise VerdictError(f"target {target!r} is no config class; classes: {', '.join(keys)} or 'global'")
    if target == GLOBAL and any(v <= 0 for r in rounds for v in (*r.best.values(), *r.candidate.values())):
        raise VerdictError("target 'global' is a geometric mean and needs metric values > 0 in every class; "
                           "name one config class as the target instead")
    return keys


def decide(rounds: list[Round], target: str, higher_is_better: bool, noise_pct: float,
           confirmations: int) -> ScriptDecision:
    """Decide on the script metric from the rounds so far; rules in order:

    1. target mean improvement <= -noise -> regressed.
    2. target improvement >= noise in every round (clear win): any other class worse by >= noise in
       every round -> divergent (with one round only: ask for a confirming round first); else improved.
    3. sub-noise win (0 < delta < noise): confirmed when `confirmations` rounds each clear the
       floor of `noise.confirmation_floor_pct` -> improved; with fewer rounds -> ask for one more.
    4. otherwise tie.
    Raises VerdictError for an unknown target or classes that differ between runs.
    """
    keys = _check(rounds, target)
    classes = []
    for k in keys:
        ds = [improvement_pct(r.best[k], r.candidate[k], higher_is_better) for r in rounds]
        classes.append(ClassDelta(key=k, best=rounds[-1].best[k], candidate=rounds[-1].candidate[k],
                                  deltas_pct=ds, mean_pct=sum(ds) / len(ds)))
    tds = [improvement_pct(_target_value(r.best, target), _target_value(r.candidate, target), higher_is_better)
           for r in rounds]
    tmean = sum(tds) / len(tds)
    others = [c for c in classes if target == GLOBAL or c.key != target]
    worse = [c.key for c in others if all(classify_change(d, noise_pct) == "worse" for d in c.deltas_pct)]
    more = len(rounds) < max(confirmations, 2)

    def out(outcome: ScriptOutcome, reason: str, needs: bool = False) -> ScriptDecision:
        return ScriptDecision(outcome=outcome, needs_round=needs, target=target, target_deltas_pct=tds,
                              classes=classes, worse_classes=worse if outcome == "divergent" else [],
                              reason=reason)

    shown = ", ".join(f"{d:+.2f}%" for d in tds)
    if classify_change(tmean, noise_pct) == "worse":
        return out("regressed", f"target {target} changed {shown}: slower beyond the {noise_pct:g}% noise threshold")
    if all(classify_change(d, noise_pct) == "better" for d in tds):
        if worse:
            if more:
                return out("tie", "clear win on the target but other classes worse: confirming", needs=True)
            return out("divergent", (
                f"target {target} improved {shown}, but class(es) {', '.join(worse)} got reproducibly "
                f"worse by >= {noise_pct:g}%: keep the winner as a specialised kernel behind dispatch"))
        return out("improved", f"target {target} improved {shown} (>= {noise_pct:g}% noise threshold)")
    if tds[-1] > 0 and classify_change(tds[-1], noise_pct) == "noise":
        floor = confirmation_floor_pct(noise_pct, [_target_value(r.best, target) for r in rounds])
        if subnoise_confirmed(tds, floor, confirmations) and not worse:
            return out("improved", (
                f"sub-noise win on {target} confirmed {len(tds)} times in a row ({shown}, each >= the "
                f"{floor:.2f}% floor)"))
        if more and tds[-1] >= confirmation_floor_pct(noise_pct, []):
            return out("tie", "sub-noise win: taking the confirming measurement", needs=True)
    return out("tie", (
        f"target {target} changed {shown}: within the {noise_pct:g}% noise threshold and not confirmed "
        f"{confirmations} times in a row"))


class KeepDecision(BaseModel):
    """Whether the keep metric (profiler GPU time) confirms the script metric's win."""

    kept: bool
    gpu_best_us: float | None
    gpu_candidate_us: float | None
    gpu_delta_pct: float | None
    metric_used: Literal["profiler GPU time", "script metric"]
    reason: str


def apply_keep_metric(gpu_best_us: float | None, gpu_candidate_us: float | None, kernels: list[str]) -> KeepDecision:
    """Keep-metric rule: with a profiler, the candidate's GPU kernel time (us) of the target
    kernel(s) must be lower than BEST's, else the script-metric win is not kept. Without a
    profiler (both None) the script metric decides and the result says so."""
    if (gpu_best_us is None) != (gpu_candidate_us is None):
        return KeepDecision(kept=False, gpu_best_us=gpu_best_us, gpu_candidate_us=gpu_candidate_us,
                            gpu_delta_pct=None, metric_used="profiler GPU time",
                            reason="profiler GPU time is missing for one side: not kept (the keep decision "
                            "never falls back to a weaker metric)")
    if gpu_best_us is None or gpu_candidate_us is None:
        return KeepDecision(kept=True, gpu_best_us=None, gpu_candidate_us=None, gpu_delta_pct=None,
                            metric_used="script metric",
                            reason="no profiler on this device: the script metric decides")
    delta = improvement_pct(gpu_best_us, gpu_candidate_us, higher_is_better=False)
    names = ", ".join(k[:60] for k in kernels) or "all kernels"
    if delta > 0:
        return KeepDecision(kept=True, gpu_best_us=gpu_best_us, gpu_candidate_us=gpu_candidate_us,
                            gpu_delta_pct=delta, metric_used="profiler GPU time",
                            reason=f"profiler GPU time of {names}: {gpu_best_us:.1f} -> {gpu_candidate_us:.1f} us ({delta:+.2f}%)")
    return KeepDecision(kept=False, gpu_best_us=gpu_best_us, gpu_candidate_us=gpu_candidate_us,
                        gpu_delta_pct=delta, metric_used="profiler GPU time",
                        reason=(f"the script metric improved but profiler GPU time of {names} did not "
                                f"({gpu_best_us:.1f} -> {gpu_candidate_us:.1f} us, {delta:+.2f}%): not kept"))
