"""The launch-group keep metric's figures (rules/keep.py decides on them): the target groups of the
three profiles, the evidence the decisions read (BEST's pairing, spread, clock plan, floor, harness,
the candidate's pairing), and step 3's gain with its bounds (pure).

The gain: per pair the ratio r = candidate median / BEST median; combined weighted by BEST's time
share, charged for the candidate's extra groups and the clock penalty; its bounds at `confidence`
from each median's standard error (1.2533 * 1.4826 * MAD / sqrt n). Step 5's launch-count test
(`too_few`) is asked per pair while the gain is summed.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel

from kopt_mcp.evidence.groups import LaunchGroup
from kopt_mcp.evidence.trace import KernelTrace
from kopt_mcp.rules.clocks import ClockPlan
from kopt_mcp.rules.floor import GainFloor

#: a BEST group whose candidate launches fell under this fraction while it got faster per launch
#: is skipped work in a time-driven harness (which launches a faster kernel more often)
TIME_DRIVEN_MIN_LAUNCH_RATIO = 0.5
#: standard error of a sample median relative to the scale, for normal data: sqrt(pi / 2)
_MEDIAN_SE = math.sqrt(math.pi / 2.0)

Runs = KernelTrace | Sequence[LaunchGroup]
Pairs = list[tuple[LaunchGroup, LaunchGroup]]


def _rel_se(g: LaunchGroup) -> float:
    """Relative standard error of a group's median launch (0 where per-launch times are missing)."""
    d = g.durations_us
    if not d or len(d) < 2 or not g.median_us:
        return 0.0
    med = statistics.median(d)
    mad = statistics.median(abs(x - med) for x in d)
    return _MEDIAN_SE * 1.4826 * mad / math.sqrt(len(d)) / g.median_us


class GroupDelta(BaseModel):
    """One paired launch group: BEST's and the candidate's median launch (us), launches, gain (%)."""

    group: str
    best_median_us: float
    candidate_median_us: float
    best_calls: list[int]
    candidate_calls: int
    weight: float
    gain_pct: float


@dataclass
class Targets:
    """The target groups of BEST's two profiles and of the candidate, and the regex they were picked by."""

    b1: list[LaunchGroup]
    b2: list[LaunchGroup]
    c: list[LaunchGroup]
    regex: str


@dataclass
class Evidence:
    """What the predicates read, computed once: the targets, BEST's two profiles paired (`after_of`:
    BEST's second-profile group of each first-profile group; `w`: time shares), its spread (%),
    the clock plan (`clocked`: clocks were given), the floor, the harness (launch counts differ
    between BEST's two profiles now / time-driven now or earlier in the session), the candidate
    paired with BEST's first profile (`pairs`, `miss_b`, `extra_c`, `notes`), and the knobs."""

    t: Targets
    after_of: dict[int, LaunchGroup]
    w: dict[int, float]
    spread: float
    plan: ClockPlan
    clocked: bool
    floor: GainFloor
    counts_differ: bool
    time_driven: bool
    pairs: Pairs
    miss_b: list[LaunchGroup]
    extra_c: list[LaunchGroup]
    notes: list[str]
    min_gain_pct: float
    confidence: float
    suspect: bool
    classes: Sequence[str] | None

    def base(self) -> dict:
        """The fields every decision past BEST's pairing carries."""
        return {"floor": self.floor, "spread_pct": self.spread, "time_driven": self.time_driven,
                "clock": self.plan if self.clocked else None,
                "unmatched_best": [g.label() for g in self.miss_b],
                "unmatched_candidate": [g.label() for g in self.extra_c]}

    @property
    def harness(self) -> str:
        """The repetition regime, in words, for the reason."""
        if self.counts_differ:
            return "time-driven repetition (BEST's launch counts differ between its profiles)"
        if self.time_driven:
            return "time-driven repetition (BEST's launch counts differed between earlier profiles in this session)"
        return "fixed repetition"


@dataclass
class Gain:
    """Step 3's figures: per-group deltas, the groups launched too rarely (words), the gain and its
    lower and upper bounds (%), the extra work's share, BEST's and the candidate's median launch sums (us)."""

    deltas: list[GroupDelta]
    skipped: list[str]
    gain: float
    lo: float
    hi: float
    extra: float
    best_us: float
    cand_us: float


def too_few(ev: Evidence, x: LaunchGroup, y: LaunchGroup, cg: LaunchGroup, r: float) -> bool:
    """Step 5: a fixed-count harness needs BEST's launches; a time-driven one, half of them where faster."""
    fewest = min(x.calls, y.calls)
    if not ev.time_driven:
        return cg.calls < fewest
    return r < 1.0 and cg.calls < TIME_DRIVEN_MIN_LAUNCH_RATIO * fewest


def gain_figures(ev: Evidence) -> Gain:
    """Step 3: the gain weighted by BEST's time share, charged for extra work and the clock penalty,
    with its lower bound at `confidence` from the medians' standard errors."""
    from scipy.stats import norm  # lazy: scipy's start-up cost, paid only where a verdict is made

    deltas, ratio, var, skipped = [], 0.0, 0.0, []
    for x, cg in ev.pairs:
        y = ev.after_of[id(x)]
        refs = {"both": (x, y), "before": (x,), "after": (y,)}[ev.plan.reference]
        bmed = sum(g.median_us for g in refs) / len(refs)
        r = cg.median_us / bmed
        b_se2 = sum(_rel_se(g) ** 2 * g.median_us ** 2 for g in refs) / len(refs) ** 2 / bmed ** 2
        ratio += ev.w[id(x)] * r
        var += (ev.w[id(x)] * r) ** 2 * (b_se2 + _rel_se(cg) ** 2)
        if too_few(ev, x, y, cg, r):
            skipped.append(f"{x.label()}: {cg.calls} launches vs BEST's {x.calls} and {y.calls}")
        deltas.append(GroupDelta(group=x.label(), best_median_us=bmed, candidate_median_us=cg.median_us,
                                 best_calls=[x.calls, y.calls], candidate_calls=cg.calls, weight=ev.w[id(x)],
                                 gain_pct=(1.0 - r) * 100.0))
    matched_c = sum(cg.total_us for _, cg in ev.pairs)
    extra = sum(g.total_us for g in ev.extra_c) / matched_c if matched_c > 0 else 0.0
    ratio *= 1.0 + extra
    gain = (1.0 - ratio) * 100.0 - ev.plan.penalty_pct
    half = float(norm.ppf(ev.confidence)) * math.sqrt(var) * (1.0 + extra) * 100.0
    return Gain(deltas=deltas, skipped=skipped, gain=gain, lo=gain - half, hi=gain + half, extra=extra,
                 best_us=sum(d.best_median_us for d in deltas),
                 cand_us=sum(d.candidate_median_us for d in deltas) + sum(g.median_us for g in ev.extra_c))
