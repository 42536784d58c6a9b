"""Paired statistics for candidate-vs-BEST rounds (issue 4, "fair comparison").

A round measures BEST and the candidate back to back in one GPU lease, so the round's improvement
delta (%) cancels slow drift (clocks, temperature, neighbours). Each verdict rests on the mean of
the rounds' deltas and a one-sided Student-t confidence bound on it:

    lo = mean - t(confidence, df) * se,   hi = mean + t(confidence, df) * se,   se = sd_delta / sqrt(n)

sd_delta (the spread of one round's delta under no effect) is pooled from two sources: the
deltas' own scatter around their mean (df n-1), and repeated runs of one tree in one lease during
this session (the baseline's repeats, the BEST runs of earlier multi-round attempts, and this
attempt's BEST and candidate runs: `recent_noise` picks the groups), taken as
successive differences so that slow drift, which a paired round cancels, is not counted as noise. A delta is the
difference of two runs, so a run-to-run SD s gives sd_delta = sqrt(2) * s. Values are compared on
a log scale (100 * ln v ~ % of v). With no degree of freedom at all both bounds are infinite: the
caller must measure more. The t quantile is scipy.stats.t.ppf.

Where the script metric alone keeps a candidate (no per-launch profiler follows), `guarded` widens
that bound with what was measured now: the load on a CPU changes within minutes (another job
starts on the cores), and a noise estimate pooled from a quiet hour would let one lucky round
through. The SD used is the larger of the pooled SD and the deltas' own SD: measurements of now
can widen the bound, never narrow it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel

from kopt_mcp.rules.percent import ratio_shown


def confidence_shown(confidence: float) -> str:
    """A confidence as a reader sees it: percent with at most one decimal, e.g. 0.995 -> "99.5%",
    0.998333 -> "99.8%", 0.95 -> "95%" (program.md's levels; never "99.8333%")."""
    text = f"{confidence * 100:.1f}"
    return (text[:-2] if text.endswith(".0") else text) + "%"


class PooledFrom(BaseModel):
    """Where a noise estimate's runs came from (all runs of unchanged trees): this attempt's BEST and
    candidate runs in this lease, and BEST's runs of `earlier_leases` earlier leases (the baseline,
    earlier attempts). Only groups of two runs or more count (one run has no spread)."""

    best_runs: int = 0
    candidate_runs: int = 0
    earlier_runs: int = 0
    earlier_leases: int = 0

    @property
    def runs(self) -> int:
        """All runs the estimate was pooled from."""
        return self.best_runs + self.candidate_runs + self.earlier_runs

    def shown(self) -> str:
        """'6 runs of unchanged trees (this lease: 2 of BEST, 2 of the candidate; 1 earlier lease: 2 of BEST)'."""
        now = [f"{n} of {who}" for n, who in ((self.best_runs, "BEST"), (self.candidate_runs, "the candidate")) if n]
        parts = [f"this lease: {', '.join(now)}"] if now else []
        if self.earlier_runs:
            leases = f"{self.earlier_leases} earlier lease{'s' if self.earlier_leases != 1 else ''}"
            parts.append(f"{leases}: {self.earlier_runs} of BEST")
        return f"{self.runs} run{'s' if self.runs != 1 else ''} of unchanged trees" + (
            f" ({'; '.join(parts)})" if parts else "")


class NoiseEstimate(BaseModel):
    """Run-to-run noise of one series: SD of 100*ln(value) (~ % of one run), its degrees of freedom,
    and where its runs came from (`pooled`, None where the caller did not say)."""

    run_sd_pct: float
    df: int
    pooled: PooledFrom | None = None


class PairedInterval(BaseModel):
    """The numbers behind a verdict: n paired deltas (%, + = better), their mean, the pooled SD of
    one delta (%), the degrees of freedom, and the one-sided `confidence` bounds lo/hi (%).

    How the test was made, for its words (`shown`): `pooled` (the noise estimate's runs), `own_df`
    (degrees of freedom from the deltas' own scatter, 0 where their runs are in `pooled`), `looks`
    (a keep tested after each of `looks` rounds: `confidence` is the per-look share of the overall
    1 - (1 - confidence) x looks, Bonferroni), `widened` (the SD raised to the deltas' own, `guarded`)."""

    n: int
    mean_pct: float
    sd_delta_pct: float | None
    df: int
    confidence: float
    lo_pct: float
    hi_pct: float
    pooled: PooledFrom | None = None
    own_df: int = 0
    looks: int = 1
    widened: bool = False
    #: the mean as a ratio, how many times better (exp(mean / 100) on the log scale; `as_improvement` sets it)
    ratio_x: float | None = None

    @property
    def overall_confidence(self) -> float:
        """The confidence over all looks (Bonferroni): 1 - (1 - confidence) x looks."""
        return 1.0 - (1.0 - self.confidence) * self.looks

    def test_shown(self) -> str:
        """The test in words: 'one-sided at 99.5%' or 'one-sided at 99.5% over 2 looks at a keep
        (Bonferroni: 99.8% each)'."""
        if self.looks <= 1:
            return f"one-sided at {confidence_shown(self.confidence)}"
        return (f"one-sided at {confidence_shown(self.overall_confidence)} over {self.looks} looks at a keep "
                f"(Bonferroni: {confidence_shown(self.confidence)} each)")

    def spread_shown(self) -> str:
        """Where the spread came from, under its field's name: 'sd_delta_pct 2.1% (the spread of one
        round's change), pooled from 6 runs of unchanged trees (...) and the 3 deltas' own scatter, 6
        degrees of freedom'."""
        src = [self.pooled.shown()] if self.pooled is not None and self.pooled.runs else []
        if self.own_df:
            src.append(f"the {self.n} deltas' own scatter")
        text = f"sd_delta_pct {self.sd_delta_pct:.1f}% (the spread of one round's change)"
        if src:
            text += f", pooled from {' and '.join(src)}"
        text += f", {self.df} degree{'s' if self.df != 1 else ''} of freedom"
        if self.widened:
            text += " (raised to this attempt's own deltas' spread, which was larger)"
        return text

    def shown(self) -> str:
        """For a verdict's reason, in words: 'mean +0.52% over 2 paired rounds, one-sided at 99.5%:
        bounds +0.21% .. +0.83%; sd_delta_pct 0.3% (the spread of one round's change), pooled from 6
        runs of unchanged trees (...), 4 degrees of freedom'."""
        rounds = f"over {self.n} paired round{'s' if self.n != 1 else ''}"
        mean = ratio_shown(self.mean_pct, self.ratio_x)
        if math.isinf(self.lo_pct) or self.sd_delta_pct is None:
            return (f"mean {mean} {rounds}; no bounds yet: the run-to-run spread is not yet measurable "
                    "(no repeated run of an unchanged tree)")
        return (f"mean {mean} {rounds}, {self.test_shown()}: bounds {self.lo_pct:+.2f}% .. "
                f"{self.hi_pct:+.2f}%; {self.spread_shown()}")


def noise_from_groups(groups: Sequence[Sequence[float]]) -> NoiseEstimate:
    """Short-term run-to-run SD of 100*ln(v) over groups of repeated runs of one unchanged tree,
    each group one lease in time order: the mean square successive difference (von Neumann),
    s^2 = sum((x[i+1] - x[i])^2) / (2 * (n - 1)), pooled over groups with df = sum(n - 1). Unlike the
    variance around the group mean it does not count slow drift (clocks, temperature) that a paired
    round cancels. Groups of fewer than 2 values, and values <= 0, add nothing; nothing to pool ->
    run_sd_pct 0 with df 0."""
    ss, df = 0.0, 0
    for g in groups:
        logs = [100.0 * math.log(v) for v in g if v > 0]
        if len(logs) < 2:
            continue
        ss += sum((b - a) ** 2 for a, b in zip(logs, logs[1:])) / 2.0
        df += len(logs) - 1
    return NoiseEstimate(run_sd_pct=math.sqrt(ss / df) if df else 0.0, df=df)


#: the noise estimate pools the latest groups of BEST runs until they hold this many degrees of
#: freedom (plus this attempt's): noise measured an hour ago, under another load or of an older
#: BEST_COMMIT (a slow baseline's spread), does not describe the runs of now
RECENT_NOISE_DF = 8
#: a group of earlier BEST runs whose median lies more than this factor from this attempt's BEST
#: (either way) measured another tree (an older BEST_COMMIT) or the machine in another state, not
#: the runs of now: it is left out of the noise estimate
LEVEL_FACTOR = 2.0


def _median(xs: Sequence[float]) -> float:
    s = sorted(xs)
    return (s[(len(s) - 1) // 2] + s[len(s) // 2]) / 2.0


def recent_groups(earlier: Sequence[Sequence[float]], best_now: Sequence[float]) -> list[list[float]]:
    """The earlier groups of BEST runs that describe the runs of now (latest first): those whose
    median lies within LEVEL_FACTOR of this attempt's BEST median (all, where a value of now is
    <= 0), back to RECENT_NOISE_DF degrees of freedom. `earlier`: one group per lease, oldest first."""
    now = list(best_now)
    level = _median(now) if now and all(v > 0 for v in now) else None
    groups = [list(g) for g in earlier]
    if level is not None:
        groups = [g for g in groups if g and 1.0 / LEVEL_FACTOR <= _median(g) / level <= LEVEL_FACTOR]
    recent, df = [], 0
    for g in reversed(groups):  # the latest groups, back to RECENT_NOISE_DF degrees of freedom
        if df >= RECENT_NOISE_DF:
            break
        recent.append(g)
        df += max(0, len(g) - 1)
    return recent


def recent_noise(earlier: Sequence[Sequence[float]], best_now: Sequence[float],
                 candidate_now: Sequence[float]) -> NoiseEstimate:
    """Run-to-run noise of one series (`noise_from_groups`) from the BEST runs of the latest earlier
    leases (`earlier`: one group per lease, oldest first, back to RECENT_NOISE_DF degrees of freedom)
    and this attempt's runs (two more groups, same lease: BEST's runs `best_now` and the candidate's
    runs `candidate_now`), with `pooled` saying which runs went in. Earlier groups at another level
    (median beyond LEVEL_FACTOR of this attempt's BEST median) are left out: under a bursty CPU load
    the demo's slow Python BEST spread 20x between runs, and after the 30x faster kernel was committed
    that spread, pooled into the new BEST's noise, hid a 2x regression and a 55% win (2026-11-24).
    The candidate's runs: its run-to-run spread is part of every delta's variance (a delta is one
    BEST run and one candidate run), and right after a commit, when no earlier group is at the new
    BEST's level, they double the degrees of freedom of the noise of now."""
    now = list(best_now)
    recent = recent_groups(earlier, now)

    def used(g: Sequence[float]) -> int:  # the runs of a group that add to the estimate
        k = len([v for v in g if v > 0])
        return k if k >= 2 else 0

    pooled = PooledFrom(best_runs=used(now), candidate_runs=used(candidate_now),
                        earlier_runs=sum(map(used, recent)), earlier_leases=sum(1 for g in recent if used(g)))
    est = noise_from_groups([*recent, now, list(candidate_now)])
    return est.model_copy(update={"pooled": pooled})


def paired_interval(deltas_pct: Sequence[float], noise: NoiseEstimate, confidence: float,
                    runs_in_noise: bool = False) -> PairedInterval:
    """One-sided bounds on the mean of `deltas_pct` at `confidence` (0.5 < confidence < 1).

    The variance of one delta pools 2*run_sd^2 (df = noise.df) with the deltas' own sample
    variance (df = n-1). `runs_in_noise`: the noise groups already hold the runs the deltas are
    differences of (this attempt's BEST and candidate runs), so the deltas' scatter is a part of
    that estimate, not a second one: the variance is 2*run_sd^2 alone, df = noise.df (pooling it
    again claimed n-1 degrees of freedom twice; with 2 runs of each tree, df 3 instead of 2, an
    identical candidate cleared a 99.5% bound 1.9% of the time in simulation, 2026-11-24).
    Raises ValueError for no deltas or a confidence outside (0.5, 1)."""
    from scipy.stats import t as student_t

    if not deltas_pct:
        raise ValueError("no paired delta to summarise")
    if not 0.5 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0.5, 1), got {confidence}")
    n = len(deltas_pct)
    mean = sum(deltas_pct) / n
    own_ss, own_df = (0.0, 0) if runs_in_noise else (sum((d - mean) ** 2 for d in deltas_pct), n - 1)
    df = noise.df + own_df
    if df == 0:
        return PairedInterval(n=n, mean_pct=mean, sd_delta_pct=None, df=0, confidence=confidence,
                              lo_pct=-math.inf, hi_pct=math.inf, pooled=noise.pooled, own_df=own_df)
    var = (noise.df * 2.0 * noise.run_sd_pct**2 + own_ss) / df
    sd = math.sqrt(var)
    half = float(student_t.ppf(confidence, df)) * sd / math.sqrt(n)
    return PairedInterval(n=n, mean_pct=mean, sd_delta_pct=sd, df=df, confidence=confidence,
                          lo_pct=mean - half, hi_pct=mean + half, pooled=noise.pooled, own_df=own_df)


def guarded(iv: PairedInterval, deltas_pct: Sequence[float]) -> PairedInterval:
    """`iv` (from `paired_interval(deltas_pct, ...)`) with its SD raised to the SD of `deltas_pct`
    alone where that is larger (n >= 2); bounds recomputed with iv's t quantile (iv.df). A
    heuristic guard against a noise estimate measured under other load, not an exact test.
    Infinite bounds stay infinite."""
    if math.isinf(iv.lo_pct) or iv.sd_delta_pct is None:
        return iv
    n = len(deltas_pct)
    own = math.sqrt(sum((d - iv.mean_pct) ** 2 for d in deltas_pct) / (n - 1)) if n >= 2 else 0.0
    if own <= iv.sd_delta_pct:
        return iv
    half = _half(own, n, iv.df, iv.confidence)
    return iv.model_copy(update={"sd_delta_pct": own, "lo_pct": iv.mean_pct - half, "hi_pct": iv.mean_pct + half,
                                 "widened": True})


def _half(sd: float, n: int, df: int, confidence: float) -> float:
    from scipy.stats import t as student_t

    return float(student_t.ppf(confidence, df)) * sd / math.sqrt(n)


def log_delta_pct(best: float, candidate: float, higher_is_better: bool) -> float:
    """A round's improvement on the log scale of the noise estimate: 100 * ln(best / candidate)
    (lower is better) or 100 * ln(candidate / best); + = better. Raises ValueError for values <= 0."""
    if best <= 0 or candidate <= 0:
        raise ValueError(f"log scale needs values > 0, got BEST {best}, candidate {candidate}")
    r = candidate / best if higher_is_better else best / candidate
    return 100.0 * math.log(r)


def log_to_improvement(x: float, higher_is_better: bool) -> float:
    """A log-scale change x (log_delta_pct, + = better) as improvement % (metrics.improvement_pct):
    100 * (1 - exp(-x / 100)) (lower is better) or 100 * (exp(x / 100) - 1), a monotone map with
    0 -> 0, so every sign test reads the same; infinite x (no noise estimate yet) stays infinite."""
    if math.isinf(x):
        return x
    return 100.0 * (math.exp(x / 100.0) - 1.0) if higher_is_better else 100.0 * (1.0 - math.exp(-x / 100.0))


def as_improvement(iv: PairedInterval, higher_is_better: bool) -> PairedInterval:
    """`iv` on the log scale (log_delta_pct) shown as improvement %: mean, lo and hi mapped by
    `log_to_improvement`; the mean becomes the geometric mean ratio's improvement, and `ratio_x`
    that ratio (how many times better). The SD stays on the log scale (% of one run)."""
    def f(x: float) -> float:
        return log_to_improvement(x, higher_is_better)

    return iv.model_copy(update={"mean_pct": f(iv.mean_pct), "lo_pct": f(iv.lo_pct), "hi_pct": f(iv.hi_pct),
                                 "ratio_x": math.exp(iv.mean_pct / 100.0)})
