"""The evidence of the script-metric rule (rules/script.py), gathered once per decision (pure): the
paired rounds' models (`Round`, `ClassDelta`, `ScriptDecision`), the target's value in one run, the
per-series noise, and `_Evidence`: every interval the decision and its reason read, each with its
test's confidence and looks, so that what a reason says is what the result's fields hold (issue 36
item 2). Cut from rules/script.py along the line between measuring and deciding."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import BaseModel

from kopt_mcp.errors import VerdictError
from kopt_mcp.rules.best_record import RecordCheck, record_check
from kopt_mcp.rules.decision import Code, MeasuredOutcome
from kopt_mcp.rules.noise import classify_change
from kopt_mcp.rules.percent import improvement_pct, ratio_x
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.stats import (
    NoiseEstimate,
    PairedInterval,
    as_improvement,
    confidence_shown,
    guarded,
    log_delta_pct,
    paired_interval,
    recent_noise,
)

GLOBAL = "global"
#: the codes of a keep on the script metric alone
_KEEPS = (Code.SCRIPT_WIN, Code.SCRIPT_SUB_NOISE_WIN)


class Round(BaseModel):
    """One paired measurement: class key -> metric for BEST and for the candidate."""

    best: dict[str, float]
    candidate: dict[str, float]


class ClassDelta(BaseModel):
    """A class's improvement in % per round (+ = better), its mean and the paired interval. `best` and
    `candidate`: the geometric means of the class's metric over the rounds, the values `mean_pct` is
    computed from (improvement_pct(best, candidate) == mean_pct; arithmetic means where a value is <= 0)."""

    key: str
    best: float
    candidate: float
    deltas_pct: list[float]
    mean_pct: float
    #: how many times better the candidate is (best / candidate, or candidate / best where higher is
    #: better: rules.percent.ratio_x); None where a value is <= 0
    ratio_x: float | None = None
    interval: PairedInterval | None = None


class ScriptDecision(BaseModel):
    """The script-metric decision. `needs_round`: measure one more paired round, then decide again.
    `code`: why (kopt_mcp.rules.decision.Code)."""

    outcome: MeasuredOutcome
    needs_round: bool
    target: str
    target_deltas_pct: list[float]
    target_interval: PairedInterval | None = None
    #: a keep on the script metric alone (script_win, script_sub_noise_win): the interval it was decided
    #: on (guarded, at Policy.keep_confidence per look), whose bounds its reason shows; None otherwise
    keep_interval: PairedInterval | None = None
    #: the interval whose numbers the reason shows (the keep's, the guarded one of a regression, or
    #: `target_interval`): the verdict's `target_interval` field, so every number said is a field
    shown_interval: PairedInterval | None = None
    classes: list[ClassDelta]
    worse_classes: list[str]
    reason: str
    code: Code
    #: paired rounds that ran under foreign load (rules/load.py decide_counted; 0 where not judged)
    rounds_under_load: int = 0
    #: the candidate's runs against BEST's record (rules/best_record.py), where a keep on the script metric
    #: alone was in view: the keep needs `passed`; None where the check did not run or does not apply
    record: RecordCheck | None = None


def target_value(values: dict[str, float], target: str) -> float:
    """The target's value in one run: the class's metric, or for `global` the geometric mean."""
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


def _series(history: list[list[dict[str, float]]], rounds: list[Round],
            key: str) -> tuple[list[list[float]], list[float], list[float]]:
    """One series' values (a class key or `global`): the earlier leases' BEST runs (one group per
    lease; runs missing the class or with a value <= 0 under `global` left out), this attempt's BEST
    runs and its candidate runs."""
    def value(run: dict[str, float]) -> float | None:
        try:
            return target_value(run, key)
        except (KeyError, ValueError):  # a class missing from an old group, or a value <= 0
            return None

    groups = [[v for v in map(value, g) if v is not None] for g in history]
    cand = [v for v in (value(r.candidate) for r in rounds) if v is not None]
    return groups, [target_value(r.best, key) for r in rounds], cand


def _series_noise(history: list[list[dict[str, float]]], rounds: list[Round], key: str) -> NoiseEstimate:
    """Run-to-run noise of one series (a class key or `global`): `stats.recent_noise` over the BEST
    runs of the earlier leases (`history`) and this attempt's BEST and candidate runs."""
    return recent_noise(*_series(history, rounds, key))


def _mean_value(values: list[float]) -> float:
    """The geometric mean of `values` (the scale of the paired deltas), or the arithmetic mean where
    a value is <= 0 (no log scale)."""
    if all(v == values[0] for v in values):  # one value (exactly, without a log round trip)
        return values[0]
    if all(v > 0 for v in values):
        return math.exp(sum(math.log(v) for v in values) / len(values))
    return sum(values) / len(values)


def _log(best: float, candidate: float, higher_is_better: bool) -> float:
    """log_delta_pct, or 0 where a value is <= 0 (no log scale: such a class adds no evidence)."""
    try:
        return log_delta_pct(best, candidate, higher_is_better)
    except ValueError:
        return 0.0


def _interval(logs: list[float], noise: NoiseEstimate, conf: float, hib: bool,
              runs_in_noise: bool = False) -> PairedInterval:
    return as_improvement(paired_interval(logs, noise, conf, runs_in_noise), hib)


@dataclass
class _Evidence:
    """What `decide`'s predicates read, computed once: the rounds' target deltas (% per round,
    + = better) and their intervals (`tiv` pooled at policy.confidence; `giv` guarded by this
    attempt's own spread; `kiv` guarded, at the per-look keep confidence), the per-class deltas,
    the classes significantly worse in every round, and the budget left."""

    rounds: list[Round]
    keys: list[str]
    target: str
    hib: bool
    policy: Policy
    classes: list[ClassDelta]
    tds: list[float]
    tiv: PairedInterval
    giv: PairedInterval
    kiv: PairedInterval
    worse: list[str]
    #: the keep's check against BEST's record (rules/best_record.py), at the per-look keep confidence
    record: RecordCheck | None = None

    @property
    def n(self) -> int:
        return len(self.rounds)

    @property
    def m(self) -> float:
        return self.tiv.mean_pct

    @property
    def noise(self) -> float:
        return self.policy.noise_pct

    @property
    def need(self) -> int:
        """Rounds a keep or a regression on the script metric must be seen in."""
        return min(2, self.policy.script_rounds)

    @property
    def shown(self) -> str:
        return ", ".join(f"{d:+.2f}%" for d in self.tds)

    @property
    def per_class(self) -> str:
        """How the classes were tested, in words ('' for one class): each at policy.confidence, not
        corrected for the number of classes, because a class also has to be worse beyond the noise
        threshold in every round to count as worse."""
        k = len(self.keys)
        if k < 2:
            return ""
        text = (f"; per class (classes[].interval): one-sided at {confidence_shown(self.policy.confidence)} in "
                f"1 look each, not corrected for the {k} classes (a class counts as worse only when it is also worse "
                f"beyond the {self.noise:g}% noise threshold in every round)")
        sds = [c.interval.sd_delta_pct for c in self.classes if c.interval and c.interval.sd_delta_pct is not None]
        if self.target == GLOBAL and sds:  # two spreads in one result: say which is which (issue 36 item 2)
            lo, hi = min(sds), max(sds)
            text += (f"; spreads: the target's bound uses target_interval.sd_delta_pct, the spread of one round's "
                     f"change of the geometric mean over the {k} classes (noise independent between classes averages "
                     f"out in it, noise they share does not); each class on its own, classes[].interval.sd_delta_pct "
                     f"{lo:.1f}%" + (f" .. {hi:.1f}%" if hi != lo else "")
                     + f"; the {self.noise:g}% noise threshold is a fixed level, compared with each round's change")
        return text

    def out(self, outcome: MeasuredOutcome, code: Code, reason: str, needs: bool = False,
            shown: PairedInterval | None = None, refused: bool = False) -> ScriptDecision:
        """The decision; `shown`: the interval the reason shows (default: the keep's for a keep, else `tiv`);
        `record`: the record check, on a keep or where it refused one (`refused`)."""
        keeps = code in _KEEPS
        shown = shown or (self.kiv if keeps else self.tiv)
        return ScriptDecision(outcome=outcome, needs_round=needs, target=self.target, target_deltas_pct=self.tds,
                              target_interval=self.tiv, keep_interval=self.kiv if keeps else None,
                              shown_interval=shown, classes=self.classes,
                              worse_classes=self.worse if outcome == "divergent" else [], reason=reason, code=code,
                              record=self.record if keeps or refused else None)

    def within_record(self, win: str) -> ScriptDecision | None:
        """A keep the paired rounds allow (`win`: what they showed, in words) that BEST's record does not:
        one more round while the budget lasts (code needs_round), else a tie (script_within_best_record);
        None where the record check passed or does not apply (the keep stands)."""
        if self.record is None or self.record.passed:
            return None
        said = f"{win}, but not {self.record.shown()}"
        if self.n < self.policy.rounds_left:
            return self.out("tie", Code.NEEDS_ROUND, f"{said}: measuring again", needs=True, shown=self.kiv,
                            refused=True)
        return self.out("tie", Code.SCRIPT_WITHIN_RECORD, (
            f"{said}: BEST_COMMIT's own runs of this session spread as far as the win (a level shift between leases "
            f"or a slow mode of some runs); tie after {self.n} paired round(s)"), shown=self.kiv, refused=True)

    def measure_more(self, why: str, verdict_if_not: str, shown: PairedInterval | None = None) -> ScriptDecision:
        """One more round while the budget lasts (code needs_round), else a tie (script_not_confirmed);
        `shown`: the interval `verdict_if_not` shows (default `tiv`)."""
        if self.n < self.policy.rounds_left:
            return self.out("tie", Code.NEEDS_ROUND, why, needs=True, shown=shown)
        return self.out("tie", Code.SCRIPT_NOT_CONFIRMED,
                        f"{verdict_if_not} after {self.n} paired round(s) (the round budget: [gates] max_rounds, or "
                        "save_and_test's `rounds`): tie", shown=shown)

    def diverged(self) -> ScriptDecision:
        """`divergent` naming `worse` (after 2 rounds; before, one more round)."""
        t = self.target
        if self.n < 2:
            return self.measure_more("a win on the target but other classes worse: confirming",
                                     f"target {t} changed {self.shown}, {self.tiv.shown()}, but class(es) "
                                     f"{', '.join(self.worse)} got worse: not kept")
        return self.out("divergent", Code.SCRIPT_DIVERGENT, (
            f"target {t} improved {self.shown} ({self.tiv.shown()}), but class(es) {', '.join(self.worse)} got "
            f"significantly worse by >= {self.noise:g}%: keep the winner as a specialised kernel behind dispatch"
            f"{self.per_class}"))


def gather(rounds: list[Round], target: str, hib: bool, policy: Policy, history: list[list[dict[str, float]]],
           record_history: list[list[dict[str, float]]]) -> _Evidence:
    """The evidence of `decide` (see _Evidence); `record_history`: the earlier groups BEST's record check
    reads. Raises VerdictError (via _check)."""
    keys = _check(rounds, target)
    conf = policy.confidence
    # the script metric alone: this attempt's runs are in the noise groups, so their deltas' scatter is
    # not pooled a second time (stats.paired_interval); the GPU screen (profiler_confirms) keeps the count
    # its decision-quality runs were recorded with (KEEP_RULES), and the keep metric decides there
    alone = not policy.profiler_confirms
    classes = []
    for k in keys:
        ds = [improvement_pct(r.best[k], r.candidate[k], hib) for r in rounds]
        iv = _interval([_log(r.best[k], r.candidate[k], hib) for r in rounds],
                       _series_noise(history, rounds, k), conf, hib, alone)
        b, c = _mean_value([r.best[k] for r in rounds]), _mean_value([r.candidate[k] for r in rounds])
        classes.append(ClassDelta(key=k, best=b, candidate=c, deltas_pct=ds, mean_pct=iv.mean_pct,
                                  ratio_x=ratio_x(b, c, hib), interval=iv))
    pairs = [(target_value(r.best, target), target_value(r.candidate, target)) for r in rounds]
    logs = [_log(b, c, hib) for b, c in pairs]
    target_noise = _series_noise(history, rounds, target)
    tiv_log = paired_interval(logs, target_noise, conf, alone)
    worse = [c.key for c in classes if (target == GLOBAL or c.key != target)  # worse in every round, significantly
             and all(classify_change(d, policy.noise_pct) == "worse" for d in c.deltas_pct)
             and c.interval is not None and c.interval.hi_pct < 0]
    record = None if policy.profiler_confirms else record_check(
        [_series(record_history, rounds, k) for k in (keys if target == GLOBAL else [target])], policy.keep_confidence, hib)
    return _Evidence(
        rounds=rounds, keys=keys, target=target, hib=hib, policy=policy, classes=classes, record=record,
        tds=[improvement_pct(b, c, hib) for b, c in pairs], tiv=as_improvement(tiv_log, hib),
        giv=as_improvement(guarded(tiv_log, logs), hib),
        kiv=as_improvement(guarded(paired_interval(logs, target_noise, policy.keep_confidence, alone), logs), hib
                           ).model_copy(update={"looks": policy.keep_looks}),
        worse=worse)



__all__ = ["GLOBAL", "ClassDelta", "Round", "ScriptDecision", "gather", "target_value"]
