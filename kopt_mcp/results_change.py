"""The measured change in the tools' results (pydantic models = MCP output schemas): a paired
interval, a config class's change (BEST against the candidate in a verdict, base against head in a
session gain), what a verdict can detect, and what it cost. Cut from results.py (issue 36 item 2:
one statistical vocabulary; every number a reason shows is a field here, under the same name).

Units: metric values in the benchmark's own unit, changes in % (+ = better), ratios in x (how many
times better: 2.0 is twice as fast), durations in s. No number field carries inf or NaN (JSON has
none): such a value is `MaybeFloat`, null in the schema.
"""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, computed_field, model_validator

from kopt_mcp.rules.stats import PooledFrom


def _finite_or_none(v: object) -> object:
    return None if isinstance(v, float) and not math.isfinite(v) else v


MaybeFloat = Annotated[float | None, BeforeValidator(_finite_or_none)]
"""A float that is null where the value is not a finite number (inf, NaN)."""


class Interval(BaseModel):
    """The paired interval behind a verdict (rules.stats.PairedInterval as output): n paired deltas
    (%, + = better), their mean and its ratio (x), the SD of one delta (%), degrees of freedom,
    one-sided bounds lo/hi (%) at `confidence` per look; `looks` and `overall_confidence` say the
    test as the reason words it ("one-sided at 99.5% over 2 looks at a keep (Bonferroni: 99.8% each)":
    overall_confidence 0.995, looks 2, confidence 0.9975). Bounds are null while the noise is not
    measurable yet (df 0); `note` says so."""

    model_config = ConfigDict(from_attributes=True)

    n: int
    mean_pct: MaybeFloat
    ratio_x: MaybeFloat = Field(None, description="the mean as a ratio: how many times better (9.83 for "
                                "+89.83% less time)")
    sd_delta_pct: MaybeFloat = None
    df: int
    confidence: float = Field(description="one-sided confidence of each look (the bounds' level)")
    lo_pct: MaybeFloat
    hi_pct: MaybeFloat
    note: str = ""
    pooled: PooledFrom | None = Field(None, description="the runs of unchanged trees the spread was pooled from: "
                                      "this attempt's BEST and candidate runs, and BEST's runs of earlier leases")
    own_df: int = Field(0, description="degrees of freedom from the deltas' own scatter (0: their runs are in `pooled`)")
    looks: int = Field(1, description="a keep tested after each of this many rounds: `confidence` is each look's "
                       "share of `overall_confidence` (Bonferroni)")

    @computed_field(description="the confidence over all looks: 1 - (1 - confidence) x looks")
    @property
    def overall_confidence(self) -> float:
        return round(1.0 - (1.0 - self.confidence) * self.looks, 6)

    @model_validator(mode="after")
    def _say_why(self) -> Interval:
        if (self.lo_pct is None or self.hi_pct is None) and not self.note:
            self.note = (f"bounds unknown: noise not yet measurable (n={self.n}, df={self.df}); more runs "
                         "(baseline_runs >= 2, or confirming rounds) give them")
        return self


class ClassChange(BaseModel):
    """One config class's change in a verdict (rules.script.ClassDelta as output): metric of BEST and
    candidate (geometric means over the rounds), improvement in % per round (+ = better; null against a
    zero metric), its mean, the ratio (x) and the interval (tested as the verdict's keep is)."""

    model_config = ConfigDict(from_attributes=True)

    key: str
    best: float
    candidate: float
    deltas_pct: list[MaybeFloat]
    mean_pct: MaybeFloat
    ratio_x: MaybeFloat = Field(None, description="how many times better the candidate is: BEST / candidate "
                                "where lower is better, candidate / BEST where higher is (null where a value is <= 0)")
    interval: Interval | None = None


class ClassGain(BaseModel):
    """One config class in a session gain: the base commit's metric and the head's (geometric means
    over the paired rounds), the change in % per round (+ = head better), its mean, the ratio (x:
    how many times better head is) and the paired interval."""

    key: str
    base: float
    head: float
    deltas_pct: list[MaybeFloat]
    mean_pct: MaybeFloat
    ratio_x: MaybeFloat = None
    interval: Interval | None = None
    best: float | None = Field(None, deprecated=True, description="deprecated alias of `base` (its name before "
                               "2026-12-02), kept for one release")
    candidate: float | None = Field(None, deprecated=True, description="deprecated alias of `head` (its name before "
                                    "2026-12-02), kept for one release")

    @classmethod
    def of(cls, c: object) -> ClassGain:
        """A ClassDelta (best = base, candidate = head) as a class of the gain."""
        iv = getattr(c, "interval", None)
        return cls(key=c.key, base=c.best, head=c.candidate, deltas_pct=list(c.deltas_pct), mean_pct=c.mean_pct,
                   ratio_x=getattr(c, "ratio_x", None), interval=Interval.model_validate(iv) if iv else None,
                   best=c.best, candidate=c.candidate)


class RoundsFor(BaseModel):
    """The paired rounds a verdict needs to detect a gain of `effect_pct` (null: more than `max_rounds_asked`)."""

    effect_pct: float
    ratio_x: float
    rounds: int | None


class ClassDetectable(BaseModel):
    """What a verdict targeting one config class (`key`) detects: that class's own run-to-run spread
    (`spread_pct`, as the baseline's `classes[].spread_pct`, `df` degrees of freedom) and the smallest gain
    the configured rounds keep with it (null: none measurable)."""

    key: str
    spread_pct: float
    df: int
    min_effect_pct: MaybeFloat
    min_effect_x: MaybeFloat


class Detectable(BaseModel):
    """What a verdict can detect on this machine (rules/detectable.py), from the baseline's run-to-run
    spread of the target (`target_spread_pct`: SD of 100 x ln(metric), % of one run, `df` degrees of
    freedom; for `global` the spread of the geometric mean over the classes, smaller than each class's
    own where their noise is independent): the smallest gain (`min_effect_pct`, `min_effect_x`) that the
    configured `rounds` keep with probability `power` at the keep's test, and the rounds that detect
    larger or smaller gains (`rounds_for`), within `max_rounds_asked` (save_and_test's `rounds`
    argument); `classes`: the same for a verdict targeting one class, from that class's own spread."""

    target: str
    target_spread_pct: float = Field(description=(
        "the run-to-run spread of the target (global: of the geometric mean over the classes; noise "
        "independent between classes averages out in it): the spread the keep's bound on that target uses"))
    df: int
    rounds: int
    power: float
    min_effect_pct: MaybeFloat
    min_effect_x: MaybeFloat
    rounds_for: list[RoundsFor]
    max_rounds_asked: int
    note: str
    classes: list[ClassDetectable] = Field(default_factory=list, description=(
        "per config class: its own spread and the smallest gain a verdict targeting it detects"))
    spread_pct: float | None = Field(None, deprecated=True, description=(
        "deprecated alias of `target_spread_pct` (its name before 2026-12-02), kept for one release"))

    @model_validator(mode="after")
    def _alias(self) -> Detectable:
        if self.__dict__.get("spread_pct") is None:
            self.__dict__["spread_pct"] = self.target_spread_pct
        return self


class Cost(BaseModel):
    """What a verdict or a commit spent (issue 34 item 6): benchmark runs (profiled or plain, the
    out-of-process confirmation's included), their wall time (s), the [correctness] command's wall time
    (`test_s`, in `wall_s`; 0 where none ran) and the cost as a multiple of one plain run of the
    benchmark (`plain_run_s`, the baseline's median run; None before one): with the test run
    (`x_plain_run`) and without it (`x_plain_run_no_test`: the benchmark's own share)."""

    runs: int = Field(ge=0)
    wall_s: float = Field(ge=0.0)
    test_s: float = Field(0.0, ge=0.0, description="the [correctness] command's wall time (s), part of wall_s")
    plain_run_s: float | None = None
    x_plain_run: float | None = Field(None, description="wall_s / plain_run_s: the cost in plain runs")
    x_plain_run_no_test: float | None = Field(None, description="(wall_s - test_s) / plain_run_s")

    @classmethod
    def of(cls, runs: int, wall_s: float, plain_run_s: float | None, test_s: float = 0.0) -> Cost:
        """The cost of `runs` runs taking `wall_s` seconds (`test_s` of them the correctness command's)
        against one plain run of `plain_run_s` s."""
        ok = bool(plain_run_s and plain_run_s > 0)
        return cls(runs=runs, wall_s=round(wall_s, 3), test_s=round(test_s, 3), plain_run_s=plain_run_s,
                   x_plain_run=round(wall_s / plain_run_s, 2) if ok else None,
                   x_plain_run_no_test=round(max(0.0, wall_s - test_s) / plain_run_s, 2) if ok else None)
