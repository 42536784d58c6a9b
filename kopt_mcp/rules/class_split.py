"""`divergent` from GPU time per config class (pure): the target class's kernels got faster beyond
the floor while another class's got slower beyond it. The script metric's divergent rule
(rules/script.py) asks the same of the benchmark's own numbers; this one reads the profiler, so a
launch-bound timer cannot hide the split (issue 24 item 2: `divergent` works per unit and class).

Seen on 4 x H200 (2026-11-27, benchmarks/results/2026-11-27-h200x4-device-lanes.md): the Triton
example's `four-rows-per-program-everywhere`, target the short-row class, ran that class's
softmax_kernel in 89.0 us per launch against BEST's 183.7 / 183.8 us, and the long-row class's in
800 us against 90. The benchmark's own timer read the target class 187.8 -> 189.7 us per call (host
launch overhead on a busy host), so the verdict was `regressed`: two demos of three failed.

A class counts as faster (slower) when the candidate beats (loses to) BOTH of BEST's profiles by
more than the margin: the GPU-time floor, or twice that class's own A/A spread between BEST's two
profiles where that is larger.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pydantic import BaseModel

from kopt_mcp.rules.percent import spread_pct


def class_margin_pct(floor_pct: float, own_spread_pct: float) -> float:
    """How far beyond BEST a config class must move to count (%): the GPU-time floor, or twice the
    class's own A/A spread between BEST's two profiles where that is larger (also each harness
    unit's own floor, rules/units.py)."""
    return max(floor_pct, 2.0 * own_spread_pct)


class ClassGpuTime(BaseModel):
    """One config class's target GPU time in one A/B/A triple (us): BEST before, the candidate,
    BEST after. `gain_pct`: the candidate against BEST's mean (%, > 0 faster)."""

    cls: str
    best_before_us: float
    candidate_us: float
    best_after_us: float

    @property
    def gain_pct(self) -> float:
        best = (self.best_before_us + self.best_after_us) / 2.0
        return 100.0 * (1.0 - self.candidate_us / best) if best > 0 else 0.0

    @property
    def spread_pct(self) -> float:
        """BEST's A/A spread in this class between its two profiles (%)."""
        return spread_pct(self.best_before_us, self.best_after_us)

    def margin_pct(self, floor_pct: float) -> float:
        """How far beyond BEST the candidate must be (%): `class_margin_pct` of its spread."""
        return class_margin_pct(floor_pct, self.spread_pct)

    def _gains(self) -> tuple[float, float]:
        return tuple(100.0 * (1.0 - self.candidate_us / b) if b > 0 else 0.0
                     for b in (self.best_before_us, self.best_after_us))

    def faster(self, floor_pct: float) -> bool:
        """Faster than both BEST profiles by more than `margin_pct(floor_pct)`."""
        return min(self._gains()) > self.margin_pct(floor_pct)

    def slower(self, floor_pct: float) -> bool:
        """Slower than both BEST profiles by more than `margin_pct(floor_pct)`."""
        return max(self._gains()) < -self.margin_pct(floor_pct)

    def shown(self) -> str:
        return (f"{self.cls} {self.best_before_us:.1f} / {self.best_after_us:.1f} -> {self.candidate_us:.1f} us "
                f"({self.gain_pct:+.2f}%)")


class ClassSplit(BaseModel):
    """The evidence of a GPU-time `divergent`: the target class faster, `slower` classes slower."""

    target: ClassGpuTime
    slower: list[ClassGpuTime]
    floor_pct: float

    def reason(self) -> str:
        return (f"GPU time per config class: the target {self.target.shown()} is faster beyond its margin, but "
                f"{'; '.join(c.shown() for c in self.slower)} slower beyond theirs (margin: the GPU-time floor "
                f"{self.floor_pct:.3g}% or twice the class's own spread between BEST's profiles)")


def class_rows(before: Mapping[str, float] | None, candidate: Mapping[str, float] | None,
               after: Mapping[str, float] | None) -> list[ClassGpuTime] | None:
    """Pair three runs' GPU time per config class (class key -> us, e.g. rules.launch_groups
    `class_gpu_times`) into rows, in `before`'s order; None unless all three hold the same classes,
    each with a positive time."""
    if not before or not candidate or not after or not (set(before) == set(candidate) == set(after)):
        return None
    if any(us <= 0 for m in (before, candidate, after) for us in m.values()):
        return None  # a class without a target launch in some run: nothing to compare
    return [ClassGpuTime(cls=k, best_before_us=before[k], candidate_us=candidate[k], best_after_us=after[k])
            for k in before]


def split_on_target(rows: Sequence[ClassGpuTime] | None, target: str, floor_pct: float) -> ClassSplit | None:
    """The split when the `target` class (a class key; `global` never splits) is faster and at least
    one other class slower, each beyond its margin (module docstring); None otherwise. Never raises."""
    by = {r.cls: r for r in rows or ()}
    t = by.get(target)
    if t is None or not t.faster(floor_pct):
        return None
    slower = [r for r in by.values() if r.cls != target and r.slower(floor_pct)]
    return ClassSplit(target=t, slower=slower, floor_pct=floor_pct) if slower else None


__all__ = ["ClassGpuTime", "ClassSplit", "class_margin_pct", "class_rows", "split_on_target"]
