"""The script-metric rule (DESIGN.md: noise rule, fair comparison, per-class view, divergence): the
benchmark's own metric per config class, over paired rounds of BEST and the candidate taken in the
same lease (pure).

Input: paired rounds (one round = one BEST run and one candidate run), per class; the target is one
class key or `global` (the geometric mean of the classes' metrics). Output: a `ScriptDecision`
with a stable `code`, or a request for one more round (`needs_round`, code `needs_round`); the
number of rounds adapts to the measured noise within the policy's budget (`rules/stats.py` for
the statistic). Where a per-launch profiler follows (Policy.profiler_confirms) the script metric
only screens the direction, and the keep metric (rules/keep.py) decides.

`decide` gathers the evidence once (`_evidence`), then asks the predicates in order, each at most
~40 lines: `_regression`, `_screen` (profiler follows), `_clear_win`, `_sub_noise_win`, else a tie.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pydantic import BaseModel

from kopt_mcp.errors import VerdictError
from kopt_mcp.rules.decision import Code, MeasuredOutcome
from kopt_mcp.rules.noise import classify_change
from kopt_mcp.rules.percent import improvement_pct
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
    classes: list[ClassDelta]
    worse_classes: list[str]
    reason: str
    code: Code
    #: paired rounds that ran under foreign load (rules/load.py decide_counted; 0 where not judged)
    rounds_under_load: int = 0


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


def _series_noise(history: list[list[dict[str, float]]], rounds: list[Round], key: str) -> NoiseEstimate:
    """Run-to-run noise of one series (a class key or `global`): `stats.recent_noise` over the BEST
    runs of the earlier leases (`history`) and this attempt's BEST and candidate runs."""
    def value(run: dict[str, float]) -> float | None:
        try:
            return target_value(run, key)
        except (KeyError, ValueError):  # a class missing from an old group, or a value <= 0
            return None

    groups = [[v for v in map(value, g) if v is not None] for g in history]
    cand = [v for v in (value(r.candidate) for r in rounds) if v is not None]
    return recent_noise(groups, [target_value(r.best, key) for r in rounds], cand)


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


def _split_now(rounds: list[Round], keys: list[str], target: str, hib: bool, noise: float,
               conf: float) -> list[str]:
    """The classes that make a clear target win `divergent` by this attempt's own measurements:
    the paired noise of now is the spread of each class's log deltas around the class's mean,
    pooled over the classes (df = classes x (rounds - 1); a class's effect is the same in every
    round), not the BEST runs' spread, which under a changing CPU load holds drift the pairing
    cancels. Needs >= 2 rounds; the target must be better by >= noise in every round with lo > 0,
    a class worse by >= noise in every round with hi < 0. Divergent keeps nothing, so this looser
    noise estimate can never make a keep. Returns the worse classes ([] = no split)."""
    n = len(rounds)
    if n < 2:
        return []
    logs = {k: [_log(r.best[k], r.candidate[k], hib) for r in rounds] for k in keys}
    ss = sum(sum((d - sum(v) / n) ** 2 for d in v) for v in logs.values())
    df = len(keys) * (n - 1)
    now = NoiseEstimate(run_sd_pct=math.sqrt(ss / df / 2.0), df=df)  # a delta's variance is 2 x a run's
    pairs = [(target_value(r.best, target), target_value(r.candidate, target)) for r in rounds]
    tds = [improvement_pct(b, c, hib) for b, c in pairs]
    tiv = _interval([_log(b, c, hib) for b, c in pairs], now, conf, hib)
    if tiv.lo_pct <= 0 or any(classify_change(d, noise) != "better" for d in tds):
        return []
    out = []
    for k in keys:
        if target != GLOBAL and k == target:
            continue
        ds = [improvement_pct(r.best[k], r.candidate[k], hib) for r in rounds]
        if all(classify_change(d, noise) == "worse" for d in ds) and _interval(logs[k], now, conf, hib).hi_pct < 0:
            out.append(k)
    return out


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
        return (f"; per class: one-sided at {confidence_shown(self.policy.confidence)} each, not corrected for the "
                f"{k} classes (a class counts as worse only when it is also worse beyond the {self.noise:g}% noise "
                "threshold in every round)")

    def out(self, outcome: MeasuredOutcome, code: Code, reason: str, needs: bool = False) -> ScriptDecision:
        keeps = code in (Code.SCRIPT_WIN, Code.SCRIPT_SUB_NOISE_WIN)
        return ScriptDecision(outcome=outcome, needs_round=needs, target=self.target, target_deltas_pct=self.tds,
                              target_interval=self.tiv, keep_interval=self.kiv if keeps else None, classes=self.classes,
                              worse_classes=self.worse if outcome == "divergent" else [], reason=reason, code=code)

    def measure_more(self, why: str, verdict_if_not: str) -> ScriptDecision:
        """One more round while the budget lasts (code needs_round), else a tie (script_not_confirmed)."""
        if self.n < self.policy.rounds_left:
            return self.out("tie", Code.NEEDS_ROUND, why, needs=True)
        return self.out("tie", Code.SCRIPT_NOT_CONFIRMED,
                        f"{verdict_if_not} after {self.n} paired round(s) (the [gates] max_rounds budget): tie")

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


def _evidence(rounds: list[Round], target: str, hib: bool, policy: Policy,
              history: list[list[dict[str, float]]]) -> _Evidence:
    """The evidence of `decide` (see _Evidence). Raises VerdictError (via _check)."""
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
        classes.append(ClassDelta(key=k, best=_mean_value([r.best[k] for r in rounds]),
                                  candidate=_mean_value([r.candidate[k] for r in rounds]),
                                  deltas_pct=ds, mean_pct=iv.mean_pct, interval=iv))
    pairs = [(target_value(r.best, target), target_value(r.candidate, target)) for r in rounds]
    logs = [_log(b, c, hib) for b, c in pairs]
    target_noise = _series_noise(history, rounds, target)
    tiv_log = paired_interval(logs, target_noise, conf, alone)
    worse = [c.key for c in classes if (target == GLOBAL or c.key != target)  # worse in every round, significantly
             and all(classify_change(d, policy.noise_pct) == "worse" for d in c.deltas_pct)
             and c.interval is not None and c.interval.hi_pct < 0]
    return _Evidence(
        rounds=rounds, keys=keys, target=target, hib=hib, policy=policy, classes=classes,
        tds=[improvement_pct(b, c, hib) for b, c in pairs], tiv=as_improvement(tiv_log, hib),
        giv=as_improvement(guarded(tiv_log, logs), hib),
        kiv=as_improvement(guarded(paired_interval(logs, target_noise, policy.keep_confidence, alone), logs), hib
                           ).model_copy(update={"looks": policy.keep_looks}),
        worse=worse)


def _regression(ev: _Evidence) -> ScriptDecision | None:
    """Rule 1: slower beyond the noise threshold in `need` rounds, none faster, guarded hi < 0."""
    if classify_change(ev.m, ev.noise) != "worse":
        return None
    # a regression, like a win, must be seen in `need` rounds: on the CPU one run hit by a burst of a
    # neighbour's load looked like -86% on an identical candidate; on the H100 one run of
    # triton-kernels' own benchmark halved one class's bandwidth (2362 -> 1183 GB/s at seq_len 512)
    # and an identical candidate came back regressed at -1.40% in one round (2026-11-24)
    slower, t, g = sum(d <= -ev.noise for d in ev.tds), ev.target, ev.giv.shown()
    if ev.n >= ev.need and slower >= ev.need and max(ev.tds) < 0 and ev.giv.hi_pct < 0:
        return ev.out("regressed", Code.SCRIPT_REGRESSION, f"target {t} changed {ev.shown}, {g}: slower beyond the "
                      f"{ev.noise:g}% noise threshold in {slower} rounds")
    if ev.n < ev.need:
        return ev.measure_more("slower beyond the noise threshold: taking the confirming round (the script metric "
                               "alone decides)", f"target {t} changed {ev.shown}, {g}: not confirmed")
    return ev.measure_more("slower beyond the noise threshold but not yet significant and confirmed: measuring again",
                           f"target {t} changed {ev.shown}, {g}: not a significant slowdown confirmed in {ev.need} "
                           f"rounds (each <= -{ev.noise:g}%, none faster)")


def _screen(ev: _Evidence) -> ScriptDecision:
    """With a per-launch profiler after it: faster in the last run and no worse class -> `improved`
    for the keep metric to confirm; a clear win with a worse class -> divergent; else measure again."""
    t, stat = ev.target, ev.tiv.shown()
    if ev.m > 0 and ev.tds[-1] > 0:
        if ev.worse and classify_change(ev.m, ev.noise) == "better":
            return ev.diverged()
        if ev.worse:
            return ev.out("tie", Code.SCRIPT_WORSE_CLASS, f"target {t} changed {ev.shown}, {stat}, but class(es) "
                          f"{', '.join(ev.worse)} got significantly worse: not kept{ev.per_class}")
        return ev.out("improved", Code.SCRIPT_SCREEN_PASSED, (
            f"target {t} changed {ev.shown}, {stat}: faster; the profiled run that follows is the confirming "
            "measurement"))
    return ev.measure_more("the last run was not faster: measuring again",
                           f"target {t} changed {ev.shown}, {stat}: not faster in the last run")


def _clear_win(ev: _Evidence) -> ScriptDecision | None:
    """Rule 2: >= noise and significant in `need` rounds, none slower; a worse class -> divergent."""
    if classify_change(ev.m, ev.noise) != "better":
        return None
    t, k = ev.target, ev.kiv.shown()
    clear = sum(d >= ev.noise for d in ev.tds)
    if ev.n < ev.need:
        return ev.measure_more("a clear win: taking the confirming round (the script metric alone decides)",
                               f"target {t} changed {ev.shown}, {k}: not confirmed")
    if ev.worse and ev.tiv.lo_pct > 0:  # divergent keeps nothing: the pooled bound names it, as with a profiler
        return ev.diverged()
    split = _split_now(ev.rounds, ev.keys, t, ev.hib, ev.noise, ev.policy.confidence)
    if split:  # the same, judged by this attempt's paired spread alone (a CPU under changing load)
        ev.worse[:] = split
        return ev.diverged()
    if ev.kiv.lo_pct <= 0 or clear < ev.need or min(ev.tds) <= 0:
        return ev.measure_more("a clear win but not yet significant and confirmed: measuring again", (
            f"target {t} changed {ev.shown}, {k}: not a significant win confirmed in {ev.need} rounds "
            f"(each >= the {ev.noise:g}% noise threshold, none slower)"))
    return ev.out("improved", Code.SCRIPT_WIN, f"target {t} improved {ev.shown} per round, {k} (>= the "
                  f"{ev.noise:g}% noise threshold in {clear} rounds){ev.per_class}")


def _sub_noise_win(ev: _Evidence) -> ScriptDecision | None:
    """Rule 3: 0 < m < noise, the last `confirmations` deltas > 0, significant, no worse class."""
    if ev.m <= 0:
        return None
    t, k, conf = ev.target, ev.kiv.shown(), ev.policy.confirmations
    last = ev.tds[-conf:]
    if len(ev.tds) >= conf and all(d > 0 for d in last) and ev.kiv.lo_pct > 0 and not ev.worse:
        return ev.out("improved", Code.SCRIPT_SUB_NOISE_WIN,
                      f"sub-noise win on {t} confirmed {len(ev.tds)} times in a row ({ev.shown}), {k}: significant"
                      f"{ev.per_class}")
    if ev.tds[-1] > 0 and not ev.worse:
        return ev.measure_more("sub-noise win: taking a confirming measurement",
                               f"target {t} changed {ev.shown}, {k}: within the {ev.noise:g}% noise threshold "
                               "and not confirmed as a significant win")
    return None


def decide(rounds: list[Round], target: str, higher_is_better: bool, policy: Policy,
           history: list[list[dict[str, float]]] | None = None) -> ScriptDecision:
    """Decide on the script metric from the paired rounds so far (one round = BEST then candidate,
    same lease). `history`: earlier groups of repeated BEST runs (each group one lease), for the
    noise estimate. With m = mean target delta (%, + = better) and lo/hi its one-sided bounds
    at policy.confidence (`stats.paired_interval`), rules in order:

    1. m <= -noise, measured in at least K = min(2, policy.script_rounds) rounds of which K each lost
       >= noise and none gained, and hi' < 0 -> regressed (slower beyond the noise threshold,
       confirmed and significant; hi' is the guarded bound, below).
    2. m >= noise and lo' > 0 (clear win), measured in at least K = min(2, policy.script_rounds)
       rounds of which K each gained >= noise and none lost: another class worse by >= noise in
       every round and with hi < 0 -> divergent (after at least 2 rounds); else improved.
    3. 0 < m < noise (sub-noise win): the last `confirmations` deltas all > 0 and lo' > 0 and no
       worse class -> improved (the noise rule's "measured twice in a row", made statistical).
    4. a decision not reached yet (bounds too wide, a win not yet confirmed) while fewer than
       policy.script_rounds rounds were taken -> needs_round; otherwise tie.

    The paired test runs on log ratios (`stats.log_delta_pct`, the scale of the noise estimate) and
    m, lo, hi are shown as improvement % (`stats.as_improvement`): a 30x speed-up is ln 30 = 340%
    on the log scale, far beyond a slow BEST's 40% run-to-run noise, not a 97% "within" it.

    lo' is `stats.guarded`'s bound: the pooled one, widened by the spread of this attempt's own
    deltas; for a keep (rules 2 and 3) it is taken at `Policy.keep_confidence`, the share of
    1 - confidence of each round that may keep, so that the whole verdict keeps an identical
    candidate with probability <= 1 - confidence. Without a profiler the deltas' own scatter is not
    pooled with the noise a second time: their runs are in it (`stats.paired_interval`). The noise is
    pooled from the latest BEST runs only (`stats.recent_noise`). The script metric alone keeps a candidate only
    on a win seen in two rounds under the conditions of now: a CPU's load changes within minutes
    and one round under a burst of a neighbour's load looks like a win (identical candidates were
    kept 1 time in 8 with a CPU hog on both cores before this rule). It counts a regression (which
    feeds the stop rule) on the same evidence: one run of an identical candidate hit by a burst
    measured -86%.

    With policy.profiler_confirms, rules 2 and 3 become one screen: m > 0 and the last delta > 0
    and no worse class -> improved, to be confirmed by the keep metric (`apply_keep_metric`), the
    second measurement in a row; a last delta <= 0 within the noise -> needs_round while the
    budget lasts, else tie. Divergence and rule 1 are unchanged: a regression is confirmed in K
    rounds on a GPU too (one run of a real benchmark can lose half of one class's bandwidth).
    Raises VerdictError for an unknown target or classes that differ between runs.
    """
    ev = _evidence(rounds, target, higher_is_better, policy, history or [])
    decision = _regression(ev)
    if decision is None and policy.profiler_confirms:
        decision = _screen(ev)
    decision = decision or _clear_win(ev) or _sub_noise_win(ev)
    return decision or ev.out("tie", Code.SCRIPT_NOISE, (
        f"target {target} changed {ev.shown}, {ev.tiv.shown()}: within the {ev.noise:g}% noise threshold and not "
        f"confirmed {policy.confirmations} times in a row"))


__all__ = ["GLOBAL", "ClassDelta", "Round", "ScriptDecision", "decide", "target_value"]
