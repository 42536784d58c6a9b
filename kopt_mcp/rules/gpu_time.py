"""The keep metric of one A/B/A triple of profiled runs (pure), in this order of preference:

1. by harness unit where every trace has units, marked in the process or found in the launch
   stream (rules/units.py `judge_units`: GPU time per invocation of the timed function, per config;
   it decides both ways: a loss beyond the floor is `regressed`);
2. by launch group where every trace has them (rules/keep.py `judge_groups`: median launch per
   kernel and shape, robust to time-driven repetition, warm-up launches and input-generation
   kernels; a win or a loss beyond the floor, else tie);
3. on the target kernels' totals, paired per launch where recorded (rules/keep_totals.py; a loss
   is `regressed` only where paired).

A loss beyond the floor is `regressed` on every path: on the H100 (2026-11-27) the Triton example's
3.5x slower candidate was a `tie` while the groups path could only confirm a win.

Evidence: `Profiles` (evidence/profiles.py). The session's history enters as numbers
(`recent_spreads_pct`, `known_time_driven`); what the referee must remember afterwards comes back
in `GpuTimeJudgement` (the spread to record, whether the harness is time-driven).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from kopt_mcp.evidence.profiles import Profiles
from kopt_mcp.evidence.segment import trace_units
from kopt_mcp.evidence.trace import exact_names_regex
from kopt_mcp.rules.class_split import ClassGpuTime, class_rows
from kopt_mcp.rules.decision import Code, MeasuredOutcome
from kopt_mcp.rules.floor import GainFloor, gpu_gain_floor
from kopt_mcp.rules.keep import judge_groups
from kopt_mcp.rules.keep_totals import KeepDecision, apply_keep_metric
from kopt_mcp.rules.launch_groups import class_gpu_times
from kopt_mcp.rules.percent import spread_pct
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.unit_classes import sum_by_class
from kopt_mcp.rules.units import judge_units


class GpuTimeJudgement(BaseModel):
    """The keep decision of one triple, the GPU-time floor it had to clear, and what the session
    remembers: `record_spread_pct` (BEST's spread between its two profiles, % ; None: nothing to
    record, e.g. a spread that is BEST's SM clock step, or profiles that could not be compared),
    `spread_pct` (that spread as measured, for the reason), `time_driven` (the harness launched a
    group a different number of times in BEST's profiles), `class_gpu_us` (the candidate's GPU
    time per config class, us, where the groups map to classes), `class_rows` (BEST before, the
    candidate and BEST after per config class, us, where units or groups map to classes: the
    evidence of a GPU-time divergent, rules/class_split.py)."""

    keep: KeepDecision
    #: what the GPU time concludes: improved / regressed / divergent / tie (units decide both ways;
    #: groups and paired totals: improved, regressed (gpu_time_loss) or tie)
    outcome: MeasuredOutcome = "tie"
    floor: GainFloor | None = None
    spread_pct: float | None = None
    record_spread_pct: float | None = None
    time_driven: bool = False
    class_gpu_us: dict[str, float] | None = None
    class_rows: list[ClassGpuTime] | None = None
    #: the candidate's whole-operation GPU time per config class and in total (us per invocation, every
    #: non-utility kernel: rules/units.py UnitDelta.op_candidate_us), where judged by harness unit
    class_op_us: dict[str, float] | None = None
    op_us: float | None = None


def judge_profiles(p: Profiles, kernel_regex: str | None, policy: Policy, recent_spreads_pct: Sequence[float],
                   known_time_driven: bool, classes: Sequence[str], suspect: bool,
                   by_unit: bool = True) -> GpuTimeJudgement:
    """Judge the triple `p` on the target kernels (`kernel_regex`: [profiler] kernel, else BEST's
    target names exactly) against the floor from `recent_spreads_pct` (the session's earlier BEST
    spreads, %) and `policy.min_gpu_gain_pct`, at `policy.confidence`. `classes`: config class keys
    in row order (for class_gpu_us). `suspect`: the script metric showed a clear win (only words
    change). `by_unit` False: skip step 1 (`kopt-mcp rejudge --keep-metric groups` shows the rule
    before harness units). Never raises for data."""
    units = [trace_units(x.trace) for x in (p.before, p.candidate, p.after)] if by_unit else [None]
    if all(units):
        regex = kernel_regex or exact_names_regex(p.before.names) or "."
        keep = judge_units(*units, regex, policy, recent_spreads_pct, classes)
        if keep.spread_pct is None:
            return GpuTimeJudgement(keep=keep, outcome="tie")
        mapped = bool(keep.units) and all(d.cls in classes for d in keep.units)
        per = [sum_by_class((d.cls, getattr(d, f)) for d in keep.units)
               for f in ("best_before_us", "candidate_us", "best_after_us")]  # several units per class: summed
        ops = [(d.cls, d.op_candidate_us) for d in keep.units if d.op_candidate_us is not None]
        return GpuTimeJudgement(keep=keep, outcome=keep.outcome, floor=keep.floor, spread_pct=keep.spread_pct,
                                record_spread_pct=keep.spread_pct, class_gpu_us=per[1] if mapped else None,
                                class_rows=class_rows(*per) if mapped else None,
                                class_op_us=sum_by_class(ops) if mapped and ops else None,
                                op_us=sum(us for _, us in ops) if ops else None)
    if p.grouped:
        keep = judge_groups(p.before.trace, p.candidate.trace, p.after.trace, kernel_regex,
                            recent_spreads_pct=recent_spreads_pct, min_gain_pct=policy.min_gpu_gain_pct,
                            confidence=policy.confidence, suspect=suspect, classes=list(classes),
                            clocks=(p.before.clock, p.candidate.clock, p.after.clock),
                            known_time_driven=known_time_driven)
        if keep.spread_pct is None:  # BEST's profiles could not be compared: nothing to learn
            return GpuTimeJudgement(keep=keep, floor=keep.floor)
        # a spread that is BEST's SM clock step is not noise: it stays out of the session's spreads
        explained = keep.clock is not None and keep.clock.spread_explained
        regex = kernel_regex or exact_names_regex(p.before.names)
        rows = class_rows(*(class_gpu_times(x.trace, classes, regex) for x in (p.before, p.candidate, p.after)))
        return GpuTimeJudgement(keep=keep, outcome=keep_outcome(keep), floor=keep.floor,
                                spread_pct=keep.spread_pct, record_spread_pct=None if explained else keep.spread_pct,
                                time_driven=keep.time_driven, class_gpu_us=keep.class_gpu_us, class_rows=rows)
    b1, c, b2 = p.before, p.candidate, p.after
    spread = spread_pct(b1.us, b2.us)
    floor = gpu_gain_floor([*recent_spreads_pct, spread], spread, policy.min_gpu_gain_pct)
    d1, d2 = b1.durations_us, b2.durations_us
    best_launches = (None if d1 is None or d2 is None else
                     [(x + y) / 2.0 for x, y in zip(d1, d2)] if len(d1) == len(d2) else d1)
    keep = apply_keep_metric((b1.us + b2.us) / 2.0, c.us, c.names, b1.launches, c.launches, best_launches,
                             c.durations_us, confidence=policy.confidence, min_gain_pct=floor.pct, suspect=suspect)
    keep.reason += (f" (BEST profiled before and after the candidate: {b1.us:.1f} and {b2.us:.1f} us, spread "
                    f"{spread:.3f}%; {floor.shown()})")
    return GpuTimeJudgement(keep=keep, outcome=keep_outcome(keep), floor=floor, spread_pct=spread,
                            record_spread_pct=spread)


def keep_outcome(keep: KeepDecision) -> MeasuredOutcome:
    """improved (kept), regressed (gpu_time_loss) or tie: the outcome of the groups and totals paths."""
    return "improved" if keep.kept else "regressed" if keep.code == Code.GPU_TIME_LOSS else "tie"


__all__ = ["GpuTimeJudgement", "judge_profiles", "keep_outcome"]
