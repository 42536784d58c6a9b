"""Per-config-class verdicts (DESIGN.md): noise rule, paired statistics, divergence, keep metric.

Input: paired measurement rounds of BEST and the candidate taken in the same GPU lease
(round = one candidate run and one BEST run), per class. The target is one class key or
`global` (the geometric mean of the classes' metrics). Output: the script-metric decision, or a
request for one more round; the number of rounds adapts to the measured noise within
`max_rounds` (see `rules/stats.py` for the statistic). The keep metric (profiler GPU time) is
applied after, by `apply_keep_metric`.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel

from kopt_mcp.errors import VerdictError
from kopt_mcp.rules.decision import MeasuredOutcome
from kopt_mcp.rules.noise import classify_change
from kopt_mcp.rules.percent import improvement_pct
from kopt_mcp.rules.stats import (
    NoiseEstimate,
    PairedInterval,
    as_improvement,
    guarded,
    log_delta_pct,
    noise_from_groups,
    paired_interval,
)

GLOBAL = "global"
#: said with every keep the script metric decided alone (no profiler): what the verdict cannot rule out
SCRIPT_METRIC_WARNING = ("a script metric can be forged by code inside the benchmark process (a patched timer, "
                         "a cached result); no per-launch profiler cross-checks it on this device")


class Round(BaseModel):
    """One paired measurement: class key -> metric for BEST and for the candidate."""

    best: dict[str, float]
    candidate: dict[str, float]


class ClassDelta(BaseModel):
    """A class's improvement in % per round (+ = better), its mean and the paired interval."""

    key: str
    best: float
    candidate: float
    deltas_pct: list[float]
    mean_pct: float
    interval: PairedInterval | None = None


class ScriptDecision(BaseModel):
    """The script-metric decision. `needs_round`: measure one more paired round, then decide again."""

    outcome: MeasuredOutcome
    needs_round: bool
    target: str
    target_deltas_pct: list[float]
    target_interval: PairedInterval | None = None
    classes: list[ClassDelta]
    worse_classes: list[str]
    reason: str


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


class Policy(BaseModel):
    """The thresholds `decide` applies (from `[gates]`): noise threshold (%), confirmations a
    sub-noise win needs, one-sided confidence of the paired bounds, most candidate runs per verdict.

    `profiler_confirms`: a profiler that times every launch (CUPTI, ncu) measures BEST and the
    candidate once more after the script metric (the keep metric), so that profiled run is the
    confirming measurement: the script metric is a screen for the direction, and its rounds are
    capped at max_rounds - 1 so that the candidate runs at most max_rounds times in all."""

    noise_pct: float
    confirmations: int = 2
    confidence: float = 0.995
    max_rounds: int = 3
    profiler_confirms: bool = False

    @property
    def script_rounds(self) -> int:
        """Most paired script-metric rounds per verdict."""
        return max(1, self.max_rounds - 1) if self.profiler_confirms else self.max_rounds

    @property
    def keep_confidence(self) -> float:
        """One-sided confidence of each look at a keep on the script metric alone. A keep can be
        declared after round k0 = min(2, confirmations, script_rounds) and after every round up to
        script_rounds, so each of those looks gets an equal share of 1 - confidence (Bonferroni):
        over the whole verdict an identical candidate is kept with probability <= 1 - confidence.
        Testing each look at `confidence` itself kept one 1.0-1.9% of the time (simulation,
        2026-11-24)."""
        first = min(2, self.confirmations, self.script_rounds)
        return 1.0 - (1.0 - self.confidence) / (self.script_rounds - first + 1)


#: the noise estimate pools the latest groups of BEST runs until they hold this many degrees of
#: freedom (plus this attempt's): noise measured an hour ago, under another load or of an older
#: BEST_COMMIT (a slow baseline's spread), does not describe the runs of now
RECENT_NOISE_DF = 8
#: a group of earlier BEST runs whose median lies more than this factor from this attempt's BEST
#: (either way) measured another tree (an older BEST_COMMIT) or the machine in another state, not
#: the runs of now: it is left out of the noise estimate
LEVEL_FACTOR = 2.0


def _median(xs: list[float]) -> float:
    s = sorted(xs)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2.0


def _series_noise(history: list[list[dict[str, float]]], rounds: list[Round], key: str) -> NoiseEstimate:
    """Run-to-run noise of one series (a class key or `global`) from the BEST runs of the latest
    earlier leases (`history`, back to RECENT_NOISE_DF degrees of freedom) and of this attempt's
    rounds (two more groups, same lease: BEST's runs and the candidate's runs). Earlier groups at
    another level (median beyond LEVEL_FACTOR of this attempt's BEST median) are left out: under a
    bursty CPU load the demo's slow Python BEST spread 20x between runs, and after the 30x faster
    kernel was committed that spread, pooled into the new BEST's noise, hid a 2x regression and a
    55% win (2026-11-24)."""
    def value(run: dict[str, float]) -> float | None:
        try:
            return target_value(run, key)
        except (KeyError, ValueError):  # a class missing from an old group, or a value <= 0
            return None

    now = [target_value(r.best, key) for r in rounds]
    level = _median(now) if all(v > 0 for v in now) else None
    groups = [[v for v in map(value, g) if v is not None] for g in history]
    if level is not None:
        groups = [g for g in groups if g and 1.0 / LEVEL_FACTOR <= _median(g) / level <= LEVEL_FACTOR]
    recent, df = [], 0
    for g in reversed(groups):  # the latest groups, back to RECENT_NOISE_DF degrees of freedom
        if df >= RECENT_NOISE_DF:
            break
        recent.append(g)
        df += max(0, len(g) - 1)
    recent.append(now)
    # the candidate's runs in this lease: its run-to-run spread is part of every delta's variance
    # (a delta is one BEST run and one candidate run), and right after a commit, when no earlier
    # group is at the new BEST's level, they double the degrees of freedom of the noise of now
    recent.append([v for v in (value(r.candidate) for r in rounds) if v is not None])
    return noise_from_groups(recent)


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
    pooled with the noise a second time: their runs are in it (`stats.paired_interval`). The noise is pooled from the latest BEST runs only (RECENT_NOISE_DF). The script metric alone keeps a candidate only
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
    keys = _check(rounds, target)
    history = history or []
    noise, conf = policy.noise_pct, policy.confidence
    # the script metric alone: this attempt's runs are in the noise groups, so their deltas' scatter is
    # not pooled a second time (stats.paired_interval); the GPU screen (profiler_confirms) keeps the count
    # its decision-quality runs were recorded with (KEEP_RULES), and the keep metric decides there
    alone = not policy.profiler_confirms
    classes = []
    for k in keys:
        ds = [improvement_pct(r.best[k], r.candidate[k], higher_is_better) for r in rounds]
        iv = _interval([_log(r.best[k], r.candidate[k], higher_is_better) for r in rounds],
                       _series_noise(history, rounds, k), conf, higher_is_better, alone)
        classes.append(ClassDelta(key=k, best=rounds[-1].best[k], candidate=rounds[-1].candidate[k],
                                  deltas_pct=ds, mean_pct=iv.mean_pct, interval=iv))
    pairs = [(target_value(r.best, target), target_value(r.candidate, target)) for r in rounds]
    tds = [improvement_pct(b, c, higher_is_better) for b, c in pairs]
    logs = [_log(b, c, higher_is_better) for b, c in pairs]
    target_noise = _series_noise(history, rounds, target)
    tiv_log = paired_interval(logs, target_noise, conf, alone)
    tiv = as_improvement(tiv_log, higher_is_better)
    m, n = tiv.mean_pct, len(rounds)
    others = [c for c in classes if target == GLOBAL or c.key != target]
    worse = [c.key for c in others  # worse in every round, and significantly so
             if all(classify_change(d, noise) == "worse" for d in c.deltas_pct)
             and c.interval is not None and c.interval.hi_pct < 0]
    can_measure = n < policy.script_rounds

    def out(outcome: MeasuredOutcome, reason: str, needs: bool = False) -> ScriptDecision:
        return ScriptDecision(outcome=outcome, needs_round=needs, target=target, target_deltas_pct=tds,
                              target_interval=tiv, classes=classes,
                              worse_classes=worse if outcome == "divergent" else [], reason=reason)

    def measure_more(why: str, verdict_if_not: str) -> ScriptDecision:
        if can_measure:
            return out("tie", why, needs=True)
        return out("tie", f"{verdict_if_not} after {n} paired round(s) (the [gates] max_rounds budget): tie")

    def diverged() -> ScriptDecision | None:
        if not worse:
            return None
        if n < 2:
            return measure_more("a win on the target but other classes worse: confirming",
                                f"target {target} changed {shown}, {stat}, but class(es) {', '.join(worse)} got "
                                "worse: not kept")
        return out("divergent", (
            f"target {target} improved {shown} ({stat}), but class(es) {', '.join(worse)} got significantly "
            f"worse by >= {noise:g}%: keep the winner as a specialised kernel behind dispatch"))

    shown = ", ".join(f"{d:+.2f}%" for d in tds)
    stat = tiv.shown()
    change = classify_change(m, noise)
    # the script metric alone counts a regression, and keeps, only where this attempt's own
    # measurements also support it; a keep is tested at the per-look confidence (Policy.keep_confidence)
    giv = as_improvement(guarded(tiv_log, logs), higher_is_better)
    gstat = giv.shown()
    kiv = as_improvement(guarded(paired_interval(logs, target_noise, policy.keep_confidence, alone), logs),
                         higher_is_better)
    kstat = kiv.shown()
    need = min(2, policy.script_rounds)
    if change == "worse":
        # a regression, like a win, must be seen in `need` rounds: on the CPU one run hit by a burst of a
        # neighbour's load looked like -86% on an identical candidate; on the H100 one run of
        # triton-kernels' own benchmark halved one class's bandwidth (2362 -> 1183 GB/s at seq_len 512)
        # and an identical candidate came back regressed at -1.40% in one round (2026-11-24)
        slower = sum(d <= -noise for d in tds)
        if n >= need and slower >= need and max(tds) < 0 and giv.hi_pct < 0:
            return out("regressed", f"target {target} changed {shown}, {gstat}: slower beyond the {noise:g}% noise "
                       f"threshold in {slower} rounds")
        if n < need:
            return measure_more("slower beyond the noise threshold: taking the confirming round (the script metric "
                                "alone decides)", f"target {target} changed {shown}, {gstat}: not confirmed")
        return measure_more("slower beyond the noise threshold but not yet significant and confirmed: measuring again",
                            f"target {target} changed {shown}, {gstat}: not a significant slowdown confirmed in "
                            f"{need} rounds (each <= -{noise:g}%, none faster)")
    if policy.profiler_confirms:
        if m > 0 and tds[-1] > 0:
            if worse and change == "better":
                return diverged()
            if worse:
                return out("tie", f"target {target} changed {shown}, {stat}, but class(es) {', '.join(worse)} got "
                           f"significantly worse: not kept")
            return out("improved", (
                f"target {target} changed {shown}, {stat}: faster; the profiled run that follows is the confirming "
                "measurement"))
        return measure_more("the last run was not faster: measuring again",
                            f"target {target} changed {shown}, {stat}: not faster in the last run")
    if change == "better":
        clear = sum(d >= noise for d in tds)
        if n < need:
            return measure_more("a clear win: taking the confirming round (the script metric alone decides)",
                                f"target {target} changed {shown}, {kstat}: not confirmed")
        if worse and tiv.lo_pct > 0:  # divergent keeps nothing: the pooled bound names it, as with a profiler
            return diverged()
        split = _split_now(rounds, keys, target, higher_is_better, noise, conf)
        if split:  # the same, judged by this attempt's paired spread alone (a CPU under changing load)
            worse[:] = split
            return diverged()
        if kiv.lo_pct <= 0 or clear < need or min(tds) <= 0:
            return measure_more("a clear win but not yet significant and confirmed: measuring again", (
                f"target {target} changed {shown}, {kstat}: not a significant win confirmed in {need} rounds "
                f"(each >= the {noise:g}% noise threshold, none slower)"))
        return out("improved", f"target {target} improved {shown}, {kstat} (>= the {noise:g}% noise "
                                 f"threshold in {clear} rounds)")
    if m > 0:
        last = tds[-policy.confirmations:]
        if len(tds) >= policy.confirmations and all(d > 0 for d in last) and kiv.lo_pct > 0 and not worse:
            return out("improved", (
                f"sub-noise win on {target} confirmed {len(tds)} times in a row ({shown}), {kstat}: significant"))
        if tds[-1] > 0 and not worse:
            return measure_more("sub-noise win: taking a confirming measurement",
                                f"target {target} changed {shown}, {kstat}: within the {noise:g}% noise threshold "
                                f"and not confirmed as a significant win")
    return out("tie", (
        f"target {target} changed {shown}, {stat}: within the {noise:g}% noise threshold and not confirmed "
        f"{policy.confirmations} times in a row"))


class KeepDecision(BaseModel):
    """Whether the keep metric (profiler GPU time) confirms the script metric's win."""

    kept: bool
    gpu_best_us: float | None
    gpu_candidate_us: float | None
    gpu_delta_pct: float | None
    metric_used: Literal["profiler GPU time", "script metric"]
    reason: str


def apply_keep_metric(gpu_best_us: float | None, gpu_candidate_us: float | None, kernels: list[str],
                      best_calls: int | None = None, candidate_calls: int | None = None,
                      best_launches_us: list[float] | None = None, candidate_launches_us: list[float] | None = None,
                      confidence: float = 0.995, min_gain_pct: float = 0.2, suspect: bool = True) -> KeepDecision:
    """Keep-metric rule: with a profiler, the candidate's GPU kernel time of the target kernel(s)
    must be lower than BEST's, else the script-metric win is not kept. Times are totals (us) over
    the profiled run; `*_calls` are the target kernels' launch counts in the same runs.

    Launch counts guard against skipped work: the same fixed benchmark launches the target the
    same number of times, so a candidate with fewer launches (results cached across calls, an
    early return) is not kept. With more launches (e.g. a Triton autotuner trying configs) the
    comparison is per launch (total / calls). Every comparison needs a gain above `min_gain_pct`. Without a profiler (both times None) the script
    metric decides and the result says so; one side missing is never kept.

    Where the backend recorded per-launch times (`*_launches_us`, same length on both sides, in
    launch order) the comparison is paired per launch: launch i of the candidate against launch i
    of BEST (same benchmark step, same shapes); the total gain and the robust paired lower bound
    (`robust_paired_bound`) must both exceed `min_gain_pct`. Per-launch GPU times are so precise
    that an unchanged kernel can differ "significantly" by a few thousandths of a percent (clock
    state, stream placement); the floor keeps such differences from counting as wins.

    `suspect`: the script metric showed a clear, significant win (>= the noise threshold); if GPU
    time then disagrees, the reason names the likely timing cheats. A sub-noise script gain that
    GPU time does not confirm is reported as noise.
    """
    if (gpu_best_us is None) != (gpu_candidate_us is None):
        return KeepDecision(kept=False, gpu_best_us=gpu_best_us, gpu_candidate_us=gpu_candidate_us,
                            gpu_delta_pct=None, metric_used="profiler GPU time",
                            reason="profiler GPU time is missing for one side: not kept (the keep decision "
                            "never falls back to a weaker metric)")
    if gpu_best_us is None or gpu_candidate_us is None:
        return KeepDecision(kept=True, gpu_best_us=None, gpu_candidate_us=None, gpu_delta_pct=None,
                            metric_used="script metric",
                            reason=f"no profiler on this device: the script metric decides; {SCRIPT_METRIC_WARNING}")
    names = ", ".join(k[:60] for k in kernels) or "all kernels"
    if best_calls and candidate_calls is not None and candidate_calls < best_calls:
        return KeepDecision(kept=False, gpu_best_us=gpu_best_us, gpu_candidate_us=gpu_candidate_us,
                            gpu_delta_pct=None, metric_used="profiler GPU time",
                            reason=(f"skipped work: the candidate launched {names} {candidate_calls} times in the "
                                    f"profiled run, BEST {best_calls} times. The fixed benchmark launches it the "
                                    "same number of times unless results are cached across calls or a call "
                                    "returns before doing its work: not kept"))
    paired = (best_launches_us is not None and candidate_launches_us is not None
              and len(best_launches_us) == len(candidate_launches_us) >= 2 and min(best_launches_us) > 0)
    per_launch = not paired and bool(best_calls and candidate_calls and candidate_calls > best_calls)
    b, c = (gpu_best_us / best_calls, gpu_candidate_us / candidate_calls) if per_launch else (gpu_best_us, gpu_candidate_us)
    delta = improvement_pct(b, c, higher_is_better=False)
    kept = delta > min_gain_pct
    if paired:
        lo, n = robust_paired_bound(best_launches_us, candidate_launches_us, confidence)
        kept = kept and lo > min_gain_pct
        how = (f"{b:.1f} -> {c:.1f} us, {delta:+.3f}%; paired over {n} launches, {confidence * 100:g}% lower "
               f"bound {lo:+.3f}%; needs > {min_gain_pct:.3g}%")
    elif per_launch:
        how = (f"per launch ({candidate_calls} launches vs BEST's {best_calls}): {b:.2f} -> {c:.2f} us, "
               f"{delta:+.3f}%; needs > {min_gain_pct:.3g}%")
    else:
        how = f"{b:.1f} -> {c:.1f} us, {delta:+.3f}%; needs > {min_gain_pct:.3g}%"
    why_not = _DISAGREE if suspect else "The script metric's small gain was noise"
    reason = (f"profiler GPU time of {names}: {how}" if kept else
              f"the script metric improved but profiler GPU time of {names} did not by more than {min_gain_pct:.3g}% "
              f"({how}): not kept. {why_not}")
    return KeepDecision(kept=kept, gpu_best_us=gpu_best_us, gpu_candidate_us=gpu_candidate_us, gpu_delta_pct=delta,
                        metric_used="profiler GPU time", reason=reason)


GPU_SPREAD_WINDOW = 10
#: names the keep rules in force, recorded with decision-quality results so that runs of different
#: rules are never pooled (benchmarks/decision_quality/run.py --merge); change it with the rules
KEEP_RULES = ("2026-11-24, clocks: script screen; regressions confirmed in 2 rounds (GPU too); noise at BEST's level + candidate runs; "
              "A/B/A profiles; floor max(min_gain, 2x own spread, 5x median spread); SM clock per run: BEST at "
              "the candidate's clock, clock-ratio penalty; time-driven once BEST's launch counts ever differed; an unsteady candidate clock counts at its highest")
#: multiple of the median recent spread a gain must clear (see gpu_gain_floor)
SPREAD_MEDIAN_FACTOR = 5.0


class GainFloor(BaseModel):
    """The least per-launch GPU-time gain (%) the keep metric accepts, and which part set it:
    "min_gain" ([gates] min_gpu_gain_pct), "own_spread" (twice this attempt's spread between BEST
    before and after the candidate) or "recent_spreads" (SPREAD_MEDIAN_FACTOR x the median of the
    recent adjacent spreads)."""

    pct: float
    binding: Literal["min_gain", "own_spread", "recent_spreads"]
    own_spread_pct: float
    median_spread_pct: float
    #: the floor without this attempt's own spread: a gain above it that `pct` still stops was
    #: stopped by a jump of BEST inside the attempt alone
    rest_pct: float

    def shown(self) -> str:
        """One line for a verdict's reason."""
        what = {"min_gain": "min_gpu_gain_pct",
                "own_spread": "2x this attempt's spread between BEST before and after the candidate",
                "recent_spreads": f"{SPREAD_MEDIAN_FACTOR:g}x the median spread between BEST's adjacent profiled "
                                  f"runs lately ({self.median_spread_pct:.3f}%)"}[self.binding]
        return f"GPU-time floor {self.pct:.3g}% = {what}"


def gpu_gain_floor(best_spreads_pct: list[float], own_spread_pct: float, min_gain_pct: float,
                   window: int = GPU_SPREAD_WINDOW) -> GainFloor:
    """The least GPU-time gain (%) the keep metric accepts: the largest of `min_gain_pct`, twice
    `own_spread_pct` and SPREAD_MEDIAN_FACTOR x the median of the last `window` spreads.

    Spreads are |a - b| / mean * 100 between two profiled runs of unchanged BEST_COMMIT taken
    seconds apart (the baseline's adjacent profiles, each attempt's BEST before and after the
    candidate; `best_spreads_pct` = SessionState.gpu_spreads_pct, latest last, this attempt's
    included). Per-launch pairing cancels launch-to-launch noise but not a shift of a whole
    process; the A/B/A comparison cancels a drift that is linear over the three runs. What is left:

    - a level jump inside the attempt (on an idle H100 the target's GPU time jumped between two
      levels 0.75% apart, about once in 60 adjacent pairs: 2026-11-23 decision-quality runs):
      it shows in this attempt's own spread, hence twice the own spread;
    - a steady process-to-process shift of SD s: an unchanged candidate's gain against the mean
      of its two BEST runs is N(0, 1.5 s^2), independent of its own spread. Against 5x the median
      of k spreads (together with twice the own spread) it passes with probability 1.0% for k = 4
      (the first attempt after the baseline's four profiles) and 0.3% for k = 10 (simulated,
      normal shifts), before the script screen, which an unchanged candidate passes about half the
      time. The median, unlike the maximum, is not raised for `window` attempts by one rare jump.
    """
    import statistics

    recent = best_spreads_pct[-window:]
    median = statistics.median(recent) if recent else 0.0
    parts = {"min_gain": min_gain_pct, "own_spread": 2.0 * own_spread_pct,
             "recent_spreads": SPREAD_MEDIAN_FACTOR * median}
    binding = max(parts, key=lambda k: parts[k])
    return GainFloor(pct=parts[binding], binding=binding, own_spread_pct=own_spread_pct, median_spread_pct=median,
                     rest_pct=max(parts["min_gain"], parts["recent_spreads"]))


_DISAGREE = ("When the script's timing and the GPU kernel time disagree, the timing missed GPU work (a side "
             "stream, a missing synchronize, an early return) or measured something other than the kernel")


def robust_paired_bound(best_us: list[float], candidate_us: list[float], confidence: float) -> tuple[float, int]:
    """One-sided lower bound (%) on the mean per-launch improvement, with a robust scale.

    Deltas d_i = (b_i - c_i) / b_i * 100. Scale: 1.4826 * MAD (the median absolute deviation,
    scaled to the SD of a normal distribution), so that a real win confined to some launches (one
    config class) is not mistaken for noise, as the plain SD would; bound = mean - t * scale / sqrt(n)
    with Student's t at `confidence`, n-1 df (scipy.stats.t). A heuristic robust t, not an exact test.
    Returns (bound, n).
    """
    import statistics

    from scipy.stats import t as student_t

    d = [(b - c) / b * 100.0 for b, c in zip(best_us, candidate_us, strict=True)]
    n, mean = len(d), sum(d) / len(d)
    med = statistics.median(d)
    scale = 1.4826 * statistics.median(abs(x - med) for x in d)
    return mean - float(student_t.ppf(confidence, n - 1)) * scale / math.sqrt(n), n
