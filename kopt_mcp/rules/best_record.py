"""BEST's record check (pure): a keep on the script metric alone must also beat BEST's runs of this
session at this level taken as one sample, the shifts between leases included.

Why. The paired rounds' noise estimate (rules/stats.py `recent_noise`) pools each lease's runs around
their own level, by successive differences, so that slow drift a paired round cancels is not counted.
A benchmark whose runs are a mixture breaks that: on the 2-core CPU VM, the appended harness
(examples/appended_harness) runs one config class at ~3.0 ms in about 4 runs of 5 and at 4.3..5.6 ms
in the rest, for the whole process (benchmarks/results/2026-12-04-cpu2-appended-mixture.md). The
referee's order (candidate, BEST | BEST, candidate) puts the two BEST runs side by side; both slow,
both candidate runs not, read +18.00% and +23.59% with a pooled round spread of 5.0%, and CI kept an
identical candidate (2026-12-04, `tests/test_appended_harness.py`). Replayed on 500 recorded runs, the
rule kept 3 windows of 490 (0.61%) without this check, 1 (0.20%) at confidence 0.9999; none with it.

The check. Let x = 100 ln(value) of the target in each run. The record R is BEST's runs of the earlier
leases that the noise estimate draws on (`stats.recent_groups`: at this level, the latest, back to
RECENT_NOISE_DF) plus this attempt's BEST runs; C is this attempt's candidate runs. With s the pooled
SD of R around R's mean and C around C's mean (df = |R| + |C| - 2), the one-sided lower bound on the
improvement is

    lo = (mean(R) - mean(C)) - t(confidence, df) * s * sqrt(1/|R| + 1/|C|)     (lower is better;
    mean(C) - mean(R) where higher is better), shown as improvement % (stats.log_to_improvement),

the two-sample Student t test with pooled variance. A mixture's slow runs of BEST raise s and pull
mean(R); a level shared by every lease leaves it as tight as the paired test. For the target `global`
(the geometric mean of k classes, whose log-scale change is the mean of theirs) each class is tested
at 1 - (1 - confidence) / k and the bound is the mean of the classes' bounds (Bonferroni): a check of
the geometric mean alone passed a window whose 5 BEST runs each had a different class slow. The check only ever
takes keeps away: it runs where rules 2 and 3 of rules/script.py would keep, at their per-look
confidence (Policy.keep_confidence). Its price: where the machine moved between leases (a slower
baseline hour), a real sub-noise win waits for more rounds or ends a tie.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel

from kopt_mcp.rules.stats import confidence_shown, log_to_improvement, recent_groups


class RecordCheck(BaseModel):
    """The candidate's runs against BEST's record (module docstring). `classes`: the series tested (the
    target class, or every class of `global`), each at `confidence` (for `global`, the keep's
    confidence shared over them: Bonferroni); `best_runs`: BEST's runs of this attempt in R;
    `earlier_runs` / `earlier_leases`: those of earlier leases (the most over the classes);
    `candidate_runs`: |C|; `mean_pct`, `lo_pct`: improvement % (+ = better) of the target and its
    one-sided lower bound (for `global`, the mean of the classes' log-scale bounds; -inf where a class
    has df 0); `sd_pct`: the largest pooled SD of one run around its tree's mean (% of a run, log
    scale; None with df 0); `df`: the fewest degrees of freedom of a class, |R| + |C| - 2."""

    classes: int
    best_runs: int
    earlier_runs: int
    earlier_leases: int
    candidate_runs: int
    mean_pct: float
    lo_pct: float
    sd_pct: float | None
    df: int
    confidence: float

    @property
    def passed(self) -> bool:
        """True where the lower bound is above 0: the win stands against BEST's record too."""
        return self.lo_pct > 0

    def shown(self) -> str:
        """In words: "against BEST's record (5 runs: 2 of this lease, 3 of 1 earlier lease; the
        candidate's 2), each of 3 classes one-sided at 99.9% (Bonferroni), the mean of their bounds:
        mean +17.36%, lower bound -20.10%, SD of one run up to 24.1%, 5 degrees of freedom"."""
        runs = self.best_runs + self.earlier_runs
        where = f"{self.best_runs} of this lease" + (
            f", {self.earlier_runs} of {self.earlier_leases} earlier lease{'s' if self.earlier_leases != 1 else ''}"
            if self.earlier_runs else "")
        test = (f"each of {self.classes} classes one-sided at {confidence_shown(self.confidence)} (Bonferroni), the "
                "mean of their bounds" if self.classes > 1 else f"one-sided at {confidence_shown(self.confidence)}")
        sd = (f"{'up to ' if self.classes > 1 else ''}{self.sd_pct:.1f}%" if self.sd_pct is not None
              else "not measurable yet")
        return (f"against BEST's record ({runs} runs: {where}; the candidate's {self.candidate_runs}), {test}: mean "
                f"{self.mean_pct:+.2f}%, lower bound {self.lo_pct:+.2f}%, SD of one run {sd}, {self.df} "
                f"degree{'s' if self.df != 1 else ''} of freedom")


#: one series of a record check: BEST's runs of earlier leases (one group per lease, oldest first), this
#: attempt's BEST runs, this attempt's candidate runs
Series = tuple[Sequence[Sequence[float]], Sequence[float], Sequence[float]]


def _one(series: Series, confidence: float, hib: bool) -> tuple[float, float, float | None, int, int, int] | None:
    """One series on the log scale: (difference, lower bound, SD, df, earlier runs, earlier leases), or
    None where a value is <= 0 or a side has no run."""
    from scipy.stats import t as student_t

    earlier, best_now, candidate_now = series
    groups = recent_groups(earlier, best_now)
    record = [v for g in groups for v in g] + list(best_now)
    if not record or not candidate_now or any(v <= 0 for v in (*record, *candidate_now)):
        return None
    r = [100.0 * math.log(v) for v in record]
    c = [100.0 * math.log(v) for v in candidate_now]
    mr, mc = sum(r) / len(r), sum(c) / len(c)
    diff = (mc - mr) if hib else (mr - mc)
    df = len(r) + len(c) - 2
    if df <= 0:
        return diff, -math.inf, None, 0, len(record) - len(best_now), sum(1 for g in groups if g)
    sd = math.sqrt((sum((x - mr) ** 2 for x in r) + sum((x - mc) ** 2 for x in c)) / df)
    lo = diff - float(student_t.ppf(confidence, df)) * sd * math.sqrt(1.0 / len(r) + 1.0 / len(c))
    return diff, lo, sd, df, len(record) - len(best_now), sum(1 for g in groups if g)


def record_check(series: Sequence[Series], confidence: float, higher_is_better: bool) -> RecordCheck | None:
    """The check of the module docstring on the target: one series (a class target) or one per class
    (`global`, the geometric mean of the classes: its log-scale change is the mean of theirs, so the
    mean of their lower bounds, each at 1 - (1 - confidence) / k, bounds it at `confidence`). None
    where a series has a value <= 0 or a side without a run (the check does not apply). Raises
    ValueError for no series or a confidence outside (0.5, 1)."""
    if not series:
        raise ValueError("no series to check")
    if not 0.5 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0.5, 1), got {confidence}")
    each = 1.0 - (1.0 - confidence) / len(series)
    got = [_one(s, each, higher_is_better) for s in series]
    if any(g is None for g in got):
        return None
    k = len(got)
    sds = [g[2] for g in got if g[2] is not None]
    return RecordCheck(classes=k, best_runs=len(series[0][1]), earlier_runs=max(g[4] for g in got),
                       earlier_leases=max(g[5] for g in got), candidate_runs=len(series[0][2]),
                       mean_pct=log_to_improvement(sum(g[0] for g in got) / k, higher_is_better),
                       lo_pct=log_to_improvement(sum(g[1] for g in got) / k, higher_is_better),
                       sd_pct=max(sds) if len(sds) == k else None, df=min(g[3] for g in got), confidence=each)


__all__ = ["RecordCheck", "Series", "record_check"]
