"""One harness unit's figures: GPU time per invocation of the timed function (pure).

Per invocation i of a unit (kopt_mcp.evidence.units.HarnessUnit), divided by its weight (the
statements of a timed block; 1 for do_bench and pytest-benchmark):

- target time: the target kernels' GPU time (us);
- operation time: every kernel of the invocation but input-generation and copy utilities
  (evidence.names.is_utility_kernel): what the timed call costs on the GPU, so work moved out of the
  target kernels still counts;
- per kernel: each kernel's GPU time.

Launches between two invocations of the unit, outside both (HarnessUnit.between_us: a thread the
timed call left running, work deferred past its window) add their time spread over the unit's
invocations, so deferred work is not free (issue 38 item 4).

A unit's figure is the median over the invocations that launched a target kernel: robust to
do_bench's warm-up calls and its first call, and unlike a launch group's median it sums every
launch of one call (forward and backward in one step, a persistent grid whose launch shape is the
same for every config). `se_rel` is the median's relative standard error (1.2533 x 1.4826 x MAD /
sqrt n / median, normal data).

`tick_us`: the GPU timer's step where the per-invocation target times sit on a lattice (`timer_tick_us`):
CUPTI's kernel durations on an H200 are multiples of 32 ns (Liger's 5-us forward kernel: 4.992, 5.024,
5.056 ... us; tests/fixtures/cupti/h200_liger_units), so a unit's median moves in steps of 0.4-0.6% of a
5-8 us kernel and its standard error says nothing below one step. 0.0 where the times are not on one.
"""

from __future__ import annotations

import math
import re
import statistics

from pydantic import BaseModel

from kopt_mcp.evidence.names import is_utility_kernel
from kopt_mcp.evidence.units import HarnessUnit

#: standard error of a sample median relative to the scale, for normal data: sqrt(pi / 2)
_MEDIAN_SE = math.sqrt(math.pi / 2.0)


class UnitFigures(BaseModel):
    """A unit's figures (us per invocation): `target_us` and `op_us` (medians), their relative
    standard errors, per-kernel medians `kernel_us`, the invocations seen (`invocations`) and how
    many launched a target kernel (`target_invocations`)."""

    index: int
    label: str = ""
    target_us: float | None
    target_se_rel: float = 0.0
    op_us: float | None
    op_se_rel: float = 0.0
    kernel_us: dict[str, float]
    invocations: int
    target_invocations: int
    tick_us: float = 0.0

    @property
    def empty_share(self) -> float:
        """The share of invocations that launched no target kernel (0..1)."""
        return 1.0 - self.target_invocations / self.invocations if self.invocations else 1.0


def _median_se(values: list[float]) -> tuple[float | None, float]:
    if not values:
        return None, 0.0
    med = statistics.median(values)
    if len(values) < 2 or med <= 0:
        return med, 0.0
    mad = statistics.median(abs(v - med) for v in values)
    return med, _MEDIAN_SE * 1.4826 * mad / math.sqrt(len(values)) / med


#: a lattice: at least this share of the values lie within LATTICE_SLACK_US of a multiple of the step (a sum of
#: a few kernels' recorded µs figures carries a few ns of rounding), the step is at least MIN_TICK_US (random
#: times lie that close to a multiple of a smaller step too often), and there are MIN_VALUES values at least
LATTICE_SHARE = 0.9
LATTICE_SLACK_US = 0.0035
MIN_TICK_US = 0.016
MIN_VALUES = 20


def timer_tick_us(values: list[float]) -> float:
    """The timer step (us) the values sit on, measured from the lowest level (a unit's times may all carry the
    same offset: launches between invocations spread over them). Values within 2 x LATTICE_SLACK_US of a
    level's first value are that level; the step is first the median of the gaps between neighbouring levels
    under 1.5 x the smallest gap of at least MIN_TICK_US (single steps; at least two of them), then fitted to
    every value (least squares of time on step number, which also gives the lattice's origin), and
    LATTICE_SHARE of the values must lie on it. 0.0 otherwise (continuous times, under MIN_VALUES values, no
    repeated step). Never raises."""
    positive = sorted(v for v in values if v > 0)
    if len(positive) < MIN_VALUES:
        return 0.0
    rel = [v - positive[0] for v in positive]
    levels: list[list[float]] = []
    for r in rel:
        if levels and r - levels[-1][0] <= 2 * LATTICE_SLACK_US:
            levels[-1].append(r)
        else:
            levels.append([r])
    centres = [statistics.fmean(lv) for lv in levels]
    gaps = [b - a for a, b in zip(centres, centres[1:]) if b - a >= MIN_TICK_US]
    if not gaps:
        return 0.0
    single = [g for g in gaps if g < 1.5 * min(gaps)]
    if len(single) < 2:
        return 0.0
    rough = statistics.median(single)
    # refined on every value: a straight line through (level number, time), least squares; far levels pin the step
    # to a fraction of a ns, and all values together the lattice's origin
    steps_at = [0]  # each level's step number: neighbouring gaps are a few steps each, so rounding them is safe
    for a, b in zip(centres, centres[1:]):
        steps_at.append(steps_at[-1] + round((b - a) / rough))
    n = [k for k, lv in zip(steps_at, levels) for _ in lv]
    n_mean, r_mean = statistics.fmean(n), statistics.fmean(rel)
    spread = sum((k - n_mean) ** 2 for k in n)
    if spread <= 0:
        return 0.0
    step = sum((k - n_mean) * (r - r_mean) for k, r in zip(n, rel)) / spread
    origin = r_mean - step * n_mean
    on = sum(abs(r - origin - k * step) <= LATTICE_SLACK_US for k, r in zip(n, rel))
    return round(step, 4) if on >= LATTICE_SHARE * len(rel) else 0.0


def figures(unit: HarnessUnit, target: re.Pattern) -> UnitFigures:
    """The figures of `unit` for the target kernels `target` (re.search on the kernel name)."""
    invs = unit.invocations_of(unit.per_invocation)
    targets = [k for k in unit.per_invocation if target.search(k)]
    ops = [k for k in unit.per_invocation if not is_utility_kernel(k)]
    hit = unit.invocations_of(targets)
    seen = max(unit.invocations, len(invs))
    # launches between invocations (work deferred past the timed window) count too, spread over them all
    t_between = sum(us for k, us in unit.between_us.items() if target.search(k)) / max(seen, 1)
    o_between = sum(us for k, us in unit.between_us.items() if not is_utility_kernel(k)) / max(seen, 1)
    per_target = [unit.invocation_us(targets, i) + t_between for i in hit]
    target_us, target_se = _median_se(per_target)
    op_us, op_se = _median_se([unit.invocation_us(ops, i) + o_between for i in hit])
    kernel_us = {k: statistics.median(v / unit.weights.get(i, 1) for i, v in per.items())
                 for k, per in unit.per_invocation.items() if per}
    return UnitFigures(index=unit.index, label=unit.label, target_us=target_us, target_se_rel=target_se, op_us=op_us,
                       op_se_rel=op_se, kernel_us=kernel_us, invocations=seen, target_invocations=len(hit),
                       tick_us=timer_tick_us(per_target))


__all__ = ["LATTICE_SHARE", "MIN_TICK_US", "MIN_VALUES", "UnitFigures", "figures", "timer_tick_us"]
