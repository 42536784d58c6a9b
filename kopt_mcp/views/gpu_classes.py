"""GPU time per config class of a verdict judged by harness unit (pure: ledger events in, figures out).

Where an attempt's keep metric was profiler GPU time judged by harness unit, its `attempt` record's
`gpu` (the keep decision, rules/units.py UnitKeepDecision dumped) holds `units`: UnitDelta rows, each
one harness unit of a config class with BEST's time per invocation before and after the candidate,
the candidate's (us), for the target kernels and for the whole operation (`op_*`, every non-utility
kernel of the unit's invocations). Several units may share one class (a harness timing a class in
several windows): their times are summed.

Per class: BEST = (before + after) / 2 summed over the class's units (us), gain % = (1 - candidate /
BEST) x 100 (+ = faster; for one unit exactly the rule's gain_pct), ratio x = BEST / candidate (above
1 = faster). A record without units (older ledgers, CPU sessions, the script metric decided) gives no
rows: the report shows the script metric as before.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import ValidationError

from kopt_mcp.events import Attempt, GpuKeep, as_events
from kopt_mcp.rules.units import UnitDelta, class_sums, gain_pct
from kopt_mcp.views.charts import shown_verdict

GPU_METRIC = "profiler GPU time"


@dataclass(frozen=True)
class Side:
    """One of the two things timed in a class: BEST and the candidate (us per invocation, summed over
    the class's units), gain (%, + = faster), ratio (BEST / candidate)."""
    best_us: float
    candidate_us: float
    gain_pct: float | None
    ratio_x: float | None


def _side(best: float, cand: float) -> Side:
    return Side(best, cand, gain_pct(best, cand), best / cand if cand > 0 else None)


@dataclass(frozen=True)
class ClassGpu:
    """One config class of a unit-judged attempt: the target kernels (`target`) and the whole operation
    (`op`, None where a unit lacks it), how many units it sums, whether some unit lost significantly
    (target / whole operation), and the script metric's mean change (%, + = better) of the same class
    as screened (None where the verdict's classes do not name it)."""
    cls: str
    units: int
    target: Side
    op: Side | None
    loss: bool = False
    op_loss: bool = False
    script_pct: float | None = None


def unit_rows(gpu: GpuKeep | None) -> list[UnitDelta]:
    """The UnitDelta rows of a keep decision judged by profiler GPU time per harness unit; [] where the
    script metric decided, no units were recorded, or a row does not fit UnitDelta."""
    if gpu is None or gpu.metric_used != GPU_METRIC:
        return []
    raw = (gpu.model_extra or {}).get("units")
    if not isinstance(raw, list):
        return []
    try:
        return [UnitDelta.model_validate(u) for u in raw]
    except ValidationError:
        return []


def class_gpu(attempt: Attempt) -> list[ClassGpu]:
    """Per config class (in the units' order) the GPU time of `attempt`'s verdict, units of one class
    summed (module docstring); [] where no unit rows were recorded."""
    script = {c.key: c.mean_pct for c in attempt.classes}
    return [ClassGpu(c.cls, c.units, _side(c.best_us, c.candidate_us),
                     None if c.op_best_us is None or c.op_candidate_us is None else _side(c.op_best_us, c.op_candidate_us),
                     c.loss, c.op_loss, script.get(c.cls)) for c in class_sums(unit_rows(attempt.gpu))]


@dataclass
class ClassGpuPoint:
    """One attempt's figures for one class, for the chart: attempt number, its verdict as shown (see
    charts.shown_verdict) and the class's figures."""
    attempt: int
    verdict: str
    figures: ClassGpu


@dataclass
class ClassGpuData:
    """Every unit-judged attempt's per-class GPU time, oldest first: classes in first-seen order,
    points[class] one per attempt that measured it."""
    classes: list[str] = field(default_factory=list)
    points: dict[str, list[ClassGpuPoint]] = field(default_factory=dict)


def class_gpu_data(events, refused: dict[int, str] | None = None) -> ClassGpuData:
    """Per-class GPU time of every attempt judged by harness unit (typed events or raw records);
    `refused`: attempt -> commit refusal code (charts.refusals), shown in the point's verdict."""
    d = ClassGpuData()
    for e in as_events(events):
        if not isinstance(e, Attempt):
            continue
        for c in class_gpu(e):
            if c.cls not in d.points:
                d.classes.append(c.cls)
            d.points.setdefault(c.cls, []).append(
                ClassGpuPoint(e.attempt, shown_verdict(e.verdict, (refused or {}).get(e.attempt)), c))
    return d


def gpu_decided(events) -> bool:
    """Whether some attempt of the session was judged on profiler GPU time per harness unit."""
    return any(isinstance(e, Attempt) and unit_rows(e.gpu) for e in as_events(events))
