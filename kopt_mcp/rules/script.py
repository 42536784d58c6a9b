"""The script-metric rule (DESIGN.md: noise rule, fair comparison, per-class view, divergence): the
benchmark's own metric per config class, over paired rounds of BEST and the candidate taken in the
same lease (pure).

Input: paired rounds (one round = one BEST run and one candidate run), per class; the target is one
class key or `global` (the geometric mean of the classes' metrics). Output: a `ScriptDecision`
with a stable `code`, or a request for one more round (`needs_round`, code `needs_round`); the
number of rounds adapts to the measured noise within the policy's budget (`rules/stats.py` for
the statistic). Where a per-launch profiler follows (Policy.profiler_confirms) the script metric
only screens the direction, and the keep metric (rules/keep.py) decides.

`decide` gathers the evidence once (rules/script_evidence.py `gather`), then asks the predicates in order, each at most
~40 lines: `_regression`, `_screen` (profiler follows), `_clear_win`, `_sub_noise_win`, else a tie.
"""

from __future__ import annotations

import math

from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.noise import classify_change
from kopt_mcp.rules.percent import improvement_pct
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.script_evidence import (
    GLOBAL,
    ClassDelta,
    Round,
    ScriptDecision,
    _Evidence,
    _interval,
    _log,
    gather,
    target_value,
)
from kopt_mcp.rules.stats import NoiseEstimate

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


def _record(ev: _Evidence) -> str:
    """The record check a keep passed, for its reason ('' where it does not apply)."""
    return f"; and {ev.record.shown()}" if ev.record is not None else ""


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
                      f"{ev.noise:g}% noise threshold in {slower} rounds", shown=ev.giv)
    if ev.n < ev.need:
        return ev.measure_more("slower beyond the noise threshold: taking the confirming round (the script metric "
                               "alone decides)", f"target {t} changed {ev.shown}, {g}: not confirmed", ev.giv)
    return ev.measure_more("slower beyond the noise threshold but not yet significant and confirmed: measuring again",
                           f"target {t} changed {ev.shown}, {g}: not a significant slowdown confirmed in {ev.need} "
                           f"rounds (each <= -{ev.noise:g}%, none faster)", ev.giv)


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
                               f"target {t} changed {ev.shown}, {k}: not confirmed", ev.kiv)
    if ev.worse and ev.tiv.lo_pct > 0:  # divergent keeps nothing: the pooled bound names it, as with a profiler
        return ev.diverged()
    split = _split_now(ev.rounds, ev.keys, t, ev.hib, ev.noise, ev.policy.confidence)
    if split:  # the same, judged by this attempt's paired spread alone (a CPU under changing load)
        ev.worse[:] = split
        return ev.diverged()
    if ev.kiv.lo_pct <= 0 or clear < ev.need or min(ev.tds) <= 0:
        return ev.measure_more("a clear win but not yet significant and confirmed: measuring again", (
            f"target {t} changed {ev.shown}, {k}: not a significant win confirmed in {ev.need} rounds "
            f"(each >= the {ev.noise:g}% noise threshold, none slower)"), ev.kiv)
    refused = ev.within_record(f"target {t} improved {ev.shown} per round, {k}")
    if refused is not None:
        return refused
    return ev.out("improved", Code.SCRIPT_WIN, f"target {t} improved {ev.shown} per round, {k} (>= the "
                  f"{ev.noise:g}% noise threshold in {clear} rounds){ev.per_class}{_record(ev)}")


def _sub_noise_win(ev: _Evidence) -> ScriptDecision | None:
    """Rule 3: 0 < m < noise, the last `confirmations` deltas > 0, significant, no worse class."""
    if ev.m <= 0:
        return None
    t, k, conf = ev.target, ev.kiv.shown(), ev.policy.confirmations
    last = ev.tds[-conf:]
    if len(ev.tds) >= conf and all(d > 0 for d in last) and ev.kiv.lo_pct > 0 and not ev.worse:
        refused = ev.within_record(f"sub-noise win on {t} confirmed {len(ev.tds)} times in a row ({ev.shown}), {k}")
        if refused is not None:
            return refused
        return ev.out("improved", Code.SCRIPT_SUB_NOISE_WIN,
                      f"sub-noise win on {t} confirmed {len(ev.tds)} times in a row ({ev.shown}), {k}: significant"
                      f"{ev.per_class}{_record(ev)}")
    if ev.tds[-1] > 0 and not ev.worse:
        return ev.measure_more("sub-noise win: taking a confirming measurement",
                               f"target {t} changed {ev.shown}, {k}: within the {ev.noise:g}% noise threshold "
                               "and not confirmed as a significant win", ev.kiv)
    return None


def decide(rounds: list[Round], target: str, higher_is_better: bool, policy: Policy,
           history: list[list[dict[str, float]]] | None = None, *,
           record_history: list[list[dict[str, float]]] | None = None) -> ScriptDecision:
    """Decide on the script metric from the paired rounds so far (one round = BEST then candidate,
    same lease). `history`: earlier groups of repeated BEST runs (each group one lease), for the
    noise estimate; `record_history`: the earlier runs of the rounds' `best` side for BEST's record
    check, of the same tree as the rounds' BEST (default `history`; the referee passes
    SessionState.best_record(), and [] for the session gain, whose `best` side is the base commit).
    With m = mean target delta (%, + = better) and lo/hi its one-sided bounds at policy.confidence
    (`stats.paired_interval`), rules in order:

    1. m <= -noise, measured in at least K = min(2, policy.script_rounds) rounds of which K each lost
       >= noise and none gained, and hi' < 0 -> regressed (slower beyond the noise threshold,
       confirmed and significant; hi' is the guarded bound, below).
    2. m >= noise and lo' > 0 (clear win), measured in at least K = min(2, policy.script_rounds)
       rounds of which K each gained >= noise and none lost: another class worse by >= noise in
       every round and with hi < 0 -> divergent (after at least 2 rounds); else improved.
    3. 0 < m < noise (sub-noise win): the last `confirmations` deltas all > 0 and lo' > 0 and no
       worse class -> improved (the noise rule's "measured twice in a row", made statistical).
    A keep of rule 2 or 3 must also pass BEST's record check (rules/best_record.py: the candidate's
    runs against BEST's runs of the session at this level as one sample, lower bound > 0 at the
    per-look keep confidence); where it does not: needs_round while the budget lasts, else tie
    (code script_within_best_record).
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
    ev = gather(rounds, target, higher_is_better, policy, history or [],
                history or [] if record_history is None else record_history)
    decision = _regression(ev)
    if decision is None and policy.profiler_confirms:
        decision = _screen(ev)
    decision = decision or _clear_win(ev) or _sub_noise_win(ev)
    return decision or ev.out("tie", Code.SCRIPT_NOISE, (
        f"target {target} changed {ev.shown}, {ev.tiv.shown()}: within the {ev.noise:g}% noise threshold and not "
        f"confirmed {policy.confirmations} times in a row"))


__all__ = ["GLOBAL", "ClassDelta", "Round", "ScriptDecision", "decide", "target_value"]
