"""Paired statistics for candidate-vs-BEST rounds (issue 4, "fair comparison").

A round measures BEST and the candidate back to back in one GPU lease, so the round's improvement
delta (%) cancels slow drift (clocks, temperature, neighbours). Each verdict rests on the mean of
the rounds' deltas and a one-sided Student-t confidence bound on it:

    lo = mean - t(confidence, df) * se,   hi = mean + t(confidence, df) * se,   se = sd_delta / sqrt(n)

sd_delta (the spread of one round's delta under no effect) is pooled from two sources: the
deltas' own scatter around their mean (df n-1), and repeated runs of one tree in one lease during
this session (the baseline's repeats, the BEST runs of earlier multi-round attempts, and this
attempt's BEST and candidate runs: `verdict._series_noise` picks the groups), taken as
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


class NoiseEstimate(BaseModel):
    """Run-to-run noise of one series: SD of 100*ln(value) (~ % of one run) and its degrees of freedom."""

    run_sd_pct: float
    df: int


class PairedInterval(BaseModel):
    """The numbers behind a verdict: n paired deltas (%, + = better), their mean, the pooled SD of
    one delta (%), the degrees of freedom, and the one-sided `confidence` bounds lo/hi (%)."""

    n: int
    mean_pct: float
    sd_delta_pct: float | None
    df: int
    confidence: float
    lo_pct: float
    hi_pct: float

    def shown(self) -> str:
        """'mean +0.52% (n=2, 99.5% bound >= +0.21%, <= +0.83%)' for a verdict's reason."""
        conf = f"{self.confidence * 100:g}%"
        if math.isinf(self.lo_pct):
            return f"mean {self.mean_pct:+.2f}% (n={self.n}, noise not yet measurable)"
        return (f"mean {self.mean_pct:+.2f}% (n={self.n}, sd {self.sd_delta_pct:.2f}%, df {self.df}, {conf} bounds "
                f"{self.lo_pct:+.2f}% .. {self.hi_pct:+.2f}%)")


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
                              lo_pct=-math.inf, hi_pct=math.inf)
    var = (noise.df * 2.0 * noise.run_sd_pct**2 + own_ss) / df
    sd = math.sqrt(var)
    half = float(student_t.ppf(confidence, df)) * sd / math.sqrt(n)
    return PairedInterval(n=n, mean_pct=mean, sd_delta_pct=sd, df=df, confidence=confidence,
                          lo_pct=mean - half, hi_pct=mean + half)


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
    return iv.model_copy(update={"sd_delta_pct": own, "lo_pct": iv.mean_pct - half, "hi_pct": iv.mean_pct + half})


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


def as_improvement(iv: PairedInterval, higher_is_better: bool) -> PairedInterval:
    """`iv` on the log scale (log_delta_pct) shown as improvement % (metrics.improvement_pct):
    mean, lo and hi mapped by 100 * (1 - exp(-x / 100)) (lower is better) or 100 * (exp(x / 100) - 1),
    a monotone map with 0 -> 0, so every sign test reads the same; the mean becomes the geometric
    mean ratio's improvement. The SD stays on the log scale (% of one run)."""
    def f(x: float) -> float:
        if math.isinf(x):  # no noise estimate yet: the bounds stay infinite
            return x
        return 100.0 * (math.exp(x / 100.0) - 1.0) if higher_is_better else 100.0 * (1.0 - math.exp(-x / 100.0))

    return iv.model_copy(update={"mean_pct": f(iv.mean_pct), "lo_pct": f(iv.lo_pct), "hi_pct": f(iv.hi_pct)})
