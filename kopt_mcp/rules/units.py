"""The keep metric by harness unit (DESIGN.md: keep metric), pure: profiler GPU time per invocation
of the timed function, per unit of the benchmark's own harness, BEST before and after the candidate
in one lease (A/B/A). GPU time decides both ways, for the whole operation.

Evidence: the three runs' units (HarnessUnit: marked in the process, or segmented afterwards,
kopt_mcp/evidence/segment.py), in the harness's order: unit k of BEST and unit k of the candidate
are the same config. Target units are those whose invocations launch a target kernel in both BEST
runs; they map to the config classes in row order where the counts agree, or several units per
class where rules/unit_classes.py tells them apart.

Rule (`judge_units`), with per unit k the medians b1, c, b2 (unit_figures.figures):

1. Comparable: the same number of units in the three runs (where the counts differ, units are
   paired by their launch signature: rules/unit_pairing.py), and each target unit's invocations
   launch the target in the candidate too; else not kept (gpu_time_unreproducible / gpu_time_missing).
2. Persisting L2: the candidate set an L2 access policy window or the persisting-L2 limit where
   BEST did not (rules/hacks.py): not kept (persisting_l2, naming the calls). Replayed results: a
   candidate unit whose target is absent from invocations where BEST launched it, those invocations
   running only copies or few of them (rules/replay.py): not kept
   (replayed_result, with the counts). Skipped work: a candidate unit whose share of invocations
   without a target launch exceeds BEST's by more than SKIPPED_SHARE (results cached across calls, an
   early return): not kept.
3. Gain: r_k = c_k / mean(b1_k, b2_k), weights w_k = BEST's time share; gain = (1 - sum w r) x 100;
   the A/A shift = sum w (b2 - b1) / mean x 100; a bound gain -/+ z x SE from the medians' errors.
   The same for the operation time (every non-utility kernel of the invocation).
4. Floor: rules.floor.gpu_gain_floor of this attempt's A/A spread and the session's recent spreads
   (the harness earns its floor: per-invocation medians of one config spread far less than launch
   groups that mix configs). Each class's own floor (2x its unit's A/A spread, at least the floor;
   a loss there also beyond RESOLUTION_TICKS steps of the GPU timer) is reported with it.
5. Decision: a loss beyond the floor, significant, in the target or the operation -> `regressed`
   (gpu_time_loss, or other_kernel_grew naming the kernel that grew); a gain beyond the floor,
   significant, the operation not slower beyond the floor -> `improved` (gpu_time_win), or
   `divergent` (gpu_time_divergent) where a target unit is significantly worse beyond its own floor; a
   target gain whose saving the operation's other kernels took back (they grew by more than the
   floor, % of the operation) is kept only where the whole operation's gain clears the floor too,
   else `tie` (other_kernel_grew: on 4 x H200, 2026-11-27, Liger's backward at 4 programs per SM
   made its kernel 18.4% faster and the whole step 1.6%: the partial-sum reduction grew); else `tie`
   (gpu_time_below_floor / gpu_time_not_improved).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from pydantic import BaseModel, Field

from kopt_mcp.evidence.units import HarnessUnit
from kopt_mcp.rules.class_split import class_margin_pct
from kopt_mcp.rules.decision import Code, MeasuredOutcome
from kopt_mcp.rules.floor import GainFloor, gpu_gain_floor
from kopt_mcp.rules.hacks import persisting_l2
from kopt_mcp.rules.keep_totals import KeepDecision
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.replay import replayed_units
from kopt_mcp.rules.unit_classes import sum_by_class, unit_classes
from kopt_mcp.rules.unit_figures import UnitFigures, figures
from kopt_mcp.rules.unit_pairing import pair_units

#: a candidate unit with this much larger a share of invocations without a target launch skipped work
SKIPPED_SHARE = 0.25


class UnitDelta(BaseModel):
    """One target unit (a config class): BEST's median per invocation before and after (us), the
    candidate's, its gain (%), BEST's A/A spread (%) and the class's own floor (%); the same for the
    whole operation of the unit's invocations (`op_*`: every non-utility kernel, us and %)."""

    unit: int
    cls: str
    best_before_us: float
    best_after_us: float
    candidate_us: float
    gain_pct: float
    spread_pct: float
    floor_pct: float
    significant_loss: bool = False
    op_best_before_us: float | None = None
    op_best_after_us: float | None = None
    op_candidate_us: float | None = None
    op_gain_pct: float | None = None
    op_floor_pct: float | None = None
    #: the whole operation of this unit is slower beyond its own floor, and significantly so
    op_significant_loss: bool = False


def gain_pct(best_us: float | None, candidate_us: float | None) -> float | None:
    """(1 - candidate / BEST) x 100 (%, + = faster); None where BEST is missing or not positive, or the
    candidate is missing."""
    return (1.0 - candidate_us / best_us) * 100.0 if best_us and candidate_us is not None and best_us > 0 else None


class ClassSum(BaseModel):
    """The units of one config class summed (us per invocation): BEST = (before + after) / 2, the
    candidate's, for the target kernels and the whole operation (`op_*`: None where a unit lacks
    it), how many units, and whether some unit lost significantly. `gain_pct` / `op_gain_pct`:
    (1 - candidate / BEST) x 100, + = faster (for one unit exactly the rule's gain_pct)."""

    cls: str
    units: int
    best_us: float
    candidate_us: float
    op_best_us: float | None = None
    op_candidate_us: float | None = None
    loss: bool = False
    op_loss: bool = False

    @property
    def gain_pct(self) -> float | None:
        return gain_pct(self.best_us, self.candidate_us)

    @property
    def op_gain_pct(self) -> float | None:
        return gain_pct(self.op_best_us, self.op_candidate_us)


def class_sums(units: Sequence[UnitDelta]) -> list[ClassSum]:
    """Per config class (in the units' order) its units summed (ClassSum): what performance.md, the
    commit message and the report show per class of a verdict judged by harness unit. Never raises."""
    by: dict[str, list[UnitDelta]] = {}
    for u in units:
        by.setdefault(u.cls, []).append(u)
    out = []
    for cls, us in by.items():
        ops = [(u.op_best_before_us, u.op_best_after_us, u.op_candidate_us) for u in us]
        whole = not any(v is None for row in ops for v in row)
        out.append(ClassSum(cls=cls, units=len(us), best_us=sum((u.best_before_us + u.best_after_us) / 2.0 for u in us),
                            candidate_us=sum(u.candidate_us for u in us),
                            op_best_us=sum((b + a) / 2.0 for b, a, _ in ops) if whole else None,
                            op_candidate_us=sum(c for _, _, c in ops) if whole else None,
                            loss=any(u.significant_loss for u in us), op_loss=any(u.op_significant_loss for u in us)))
    return out


class UnitKeepDecision(KeepDecision):
    """The keep metric by harness unit: `outcome` (improved / regressed / divergent / tie), the
    target's and the operation's gain (%) with bounds, the floor, BEST's A/A spread, per-unit rows."""

    outcome: MeasuredOutcome = "tie"
    op_delta_pct: float | None = None
    floor: GainFloor | None = None
    spread_pct: float | None = None
    units: list[UnitDelta] = Field(default_factory=list)
    divergent_classes: list[str] = Field(default_factory=list)
    grew: str | None = None
    source: str = "marked"


def _not_kept(code: Code, reason: str, **kw) -> UnitKeepDecision:
    return UnitKeepDecision(kept=False, gpu_best_us=kw.pop("gpu_best_us", None), gpu_candidate_us=None,
                            gpu_delta_pct=None, metric_used="profiler GPU time", code=code, reason=reason, **kw)


class _Agg(BaseModel):
    gain: float
    lo: float
    hi: float
    shift: float
    best_us: float
    cand_us: float


def _aggregate(b1: list[float], c: list[float], b2: list[float], se: list[tuple[float, float, float]],
               z: float) -> _Agg:
    """The weighted gain over paired units (us per invocation) with its bound, and BEST's shift (%)."""
    means = [(x + y) / 2.0 for x, y in zip(b1, b2)]
    total = sum(means)
    w = [m / total for m in means] if total > 0 else [1.0 / len(means)] * len(means)
    r = [ci / m if m > 0 else 1.0 for ci, m in zip(c, means)]
    ratio = sum(wi * ri for wi, ri in zip(w, r))
    var = sum((wi * ri) ** 2 * ((s1 ** 2 + s2 ** 2) / 4.0 + sc ** 2) for wi, ri, (s1, sc, s2) in zip(w, r, se))
    gain = (1.0 - ratio) * 100.0
    half = z * math.sqrt(var) * 100.0
    shift = 100.0 * sum(wi * (y - x) / m for wi, x, y, m in zip(w, b1, b2, means) if m > 0)
    return _Agg(gain=gain, lo=gain - half, hi=gain + half, shift=shift, best_us=total, cand_us=sum(c))


def _class_names(n: int, classes: Sequence[str], figs: list[UnitFigures]) -> list[str]:
    """Each target unit's config class key: unit k -> class k, or several units per class where
    rules/unit_classes.py tells them apart; else "unit k (label)"."""
    of = unit_classes([f.target_us or 0.0 for f in figs], len(classes))
    if of is not None:
        return [classes[c] for c in of]
    return [f"unit {f.index + 1}" + (f" ({f.label})" if f.label else "") for f in figs]


def _grew(before: list[UnitFigures], cand: list[UnitFigures], after: list[UnitFigures]) -> str | None:
    """The kernel whose time per invocation grew most (us, summed over units), or None."""
    growth: dict[str, float] = {}
    for b1, c, b2 in zip(before, cand, after):
        for k, us in c.kernel_us.items():
            best = (b1.kernel_us.get(k, 0.0) + b2.kernel_us.get(k, 0.0)) / 2.0
            growth[k] = growth.get(k, 0.0) + us - best
    if not growth:
        return None
    name, delta = max(growth.items(), key=lambda kv: kv[1])
    return name if delta > 0 else None


def judge_units(before: Sequence[HarnessUnit], candidate: Sequence[HarnessUnit], after: Sequence[HarnessUnit],
                kernel_regex: str, policy: Policy, recent_spreads_pct: Sequence[float] = (),
                classes: Sequence[str] = ()) -> UnitKeepDecision:
    """The keep metric by harness unit (see the module docstring). `kernel_regex`: the target
    kernels (re.search); `recent_spreads_pct`: the session's earlier A/A spreads (%); `classes`:
    config class keys in row order. Never raises for data; re.error for a bad regex."""
    from scipy.stats import norm  # lazy: scipy's start-up cost, paid only where a verdict is made

    target = re.compile(kernel_regex)
    if before and not (len(before) == len(candidate) == len(after)):  # unequal counts: pair by signature
        paired = pair_units(before, candidate, after)
        if paired is not None:
            before, candidate, after = paired
    if not (len(before) == len(candidate) == len(after)) or not before:
        return _not_kept(Code.GPU_TIME_UNREPRODUCIBLE, (
            f"the harness ran {len(before)}, {len(candidate)} and {len(after)} measurement units in BEST's, the "
            "candidate's and BEST's runs: they cannot be paired config by config: not kept"))
    l2 = persisting_l2(before, candidate, after)
    if l2 is not None:
        return _not_kept(l2.code, l2.reason)
    fb, fc, fa = ([figures(u, target) for u in runs] for runs in (before, candidate, after))
    pick = [k for k in range(len(fb)) if fb[k].target_invocations >= 3 and fa[k].target_invocations >= 3]
    if not pick:
        return _not_kept(Code.GPU_TIME_MISSING, f"no unit of BEST's runs launched a kernel matching {kernel_regex!r} "
                         "in several invocations: not kept")
    names = _class_names(len(pick), classes, [fb[k] for k in pick])
    replayed = replayed_units(before, candidate, after, pick, names, target, SKIPPED_SHARE)
    if replayed:
        return _not_kept(Code.REPLAYED_RESULT, "replayed result: " + "; ".join(r.shown() for r in replayed[:4]) +
                         ": BEST launched the target in those invocations; a result cached across calls and copied "
                         "or returned is not faster work: not kept")
    skipped = [f"{names[j]}: {fc[k].empty_share:.0%} of its invocations launched no target kernel, BEST's "
               f"{fb[k].empty_share:.0%}" for j, k in enumerate(pick)
               if fc[k].target_us is None or fc[k].empty_share > max(fb[k].empty_share, fa[k].empty_share) + SKIPPED_SHARE]
    if skipped:
        return _not_kept(Code.SKIPPED_WORK, "skipped work: " + "; ".join(skipped[:4]) + ": the fixed benchmark "
                         "launches the target in every invocation unless results are cached or a call returns "
                         "early: not kept")
    return _decide(fb, fc, fa, pick, names, policy, recent_spreads_pct, float(norm.ppf(policy.confidence)),
                   before[0].source)


def _decide(fb: list[UnitFigures], fc: list[UnitFigures], fa: list[UnitFigures], pick: list[int], names: list[str],
            policy: Policy, recent: Sequence[float], z: float, source: str) -> UnitKeepDecision:
    """Steps 3-5 of the rule over the target units `pick` (all comparable)."""
    def rows(attr: str) -> tuple[list[float], list[float], list[float], list[tuple[float, float, float]]]:
        se = attr.replace("_us", "_se_rel")
        return ([getattr(fb[k], attr) or 0.0 for k in pick], [getattr(fc[k], attr) or 0.0 for k in pick],
                [getattr(fa[k], attr) or 0.0 for k in pick],
                [(getattr(fb[k], se), getattr(fc[k], se), getattr(fa[k], se)) for k in pick])

    t, op = _aggregate(*rows("target_us"), z=z), _aggregate(*rows("op_us"), z=z)
    spread = abs(t.shift)
    floor = gpu_gain_floor([*recent, spread], spread, policy.min_gpu_gain_pct)
    deltas = []
    for j, k in enumerate(pick):
        tg = _unit_gain(fb[k], fc[k], fa[k], "target", floor.pct, z, policy.min_gpu_gain_pct)
        og = _unit_gain(fb[k], fc[k], fa[k], "op", floor.pct, z, policy.min_gpu_gain_pct)
        deltas.append(UnitDelta(unit=fb[k].index, cls=names[j], best_before_us=tg.b1, best_after_us=tg.b2,
                                candidate_us=tg.c, gain_pct=tg.gain, spread_pct=tg.own, floor_pct=tg.floor,
                                significant_loss=tg.loss, op_best_before_us=og.b1, op_best_after_us=og.b2,
                                op_candidate_us=og.c, op_gain_pct=og.gain, op_floor_pct=og.floor,
                                op_significant_loss=og.loss))
    base = {"gpu_best_us": t.best_us, "lower_bound_pct": t.lo, "upper_bound_pct": t.hi, "op_delta_pct": op.gain,
            "floor": floor, "spread_pct": spread, "units": deltas, "source": source}
    op_worse = list(dict.fromkeys(d.cls for d in deltas if d.op_significant_loss))
    grew = _grew_in(fb, fc, fa, pick, deltas, op_worse) if op_worse else _grew(
        [fb[k] for k in pick], [fc[k] for k in pick], [fa[k] for k in pick])
    return _outcome(t, op, floor, deltas, policy, base, grew, op_worse)


class _UnitGain(BaseModel):
    b1: float
    c: float
    b2: float
    gain: float
    own: float
    floor: float
    loss: bool


#: a unit's loss counts only beyond this many GPU timer steps (UnitFigures.tick_us): an untouched 8-us unit moved 2
#: steps of 32 ns between processes (H200, Liger RMSNorm, 2026-12-02); real trade-offs there moved 55+ steps
RESOLUTION_TICKS = 4


def _unit_gain(b: UnitFigures, c: UnitFigures, a: UnitFigures, what: str, floor_pct: float, z: float,
               min_gain_pct: float) -> _UnitGain:
    """One unit's gain (%) on `what` ("target" or "op"), BEST's A/A spread there (%), the unit's own
    floor (rules/class_split.py class_margin_pct) and whether it lost beyond that floor significantly
    (its upper bound below -min_gain_pct) and by more than RESOLUTION_TICKS steps of the GPU timer."""
    b1, cv, b2 = (getattr(f, f"{what}_us") or 0.0 for f in (b, c, a))
    mean = (b1 + b2) / 2.0
    own = abs(b2 - b1) / mean * 100.0 if mean > 0 else 0.0
    gain = (1.0 - cv / mean) * 100.0 if mean > 0 else 0.0
    se = math.sqrt((getattr(b, f"{what}_se_rel") ** 2 + getattr(a, f"{what}_se_rel") ** 2) / 4.0
                   + getattr(c, f"{what}_se_rel") ** 2) * 100.0
    own_floor = class_margin_pct(floor_pct, own)
    resolved = not (tick := max(b.tick_us, c.tick_us, a.tick_us)) or round((cv - mean) / tick, 6) > RESOLUTION_TICKS
    return _UnitGain(b1=b1, c=cv, b2=b2, gain=gain, own=own, floor=own_floor,
                     loss=gain < -own_floor and gain + z * se < -min_gain_pct and resolved)


def _grew_in(fb: list[UnitFigures], fc: list[UnitFigures], fa: list[UnitFigures], pick: list[int],
             deltas: list[UnitDelta], classes: list[str]) -> str | None:
    """The kernel that grew most over the units of `classes` (`_grew` restricted to them)."""
    keep = [k for k, d in zip(pick, deltas) if d.cls in classes]
    return _grew([fb[k] for k in keep], [fc[k] for k in keep], [fa[k] for k in keep])


def _moved_pct(t: _Agg, op: _Agg) -> float:
    """How much the operation's other kernels grew (% of its BEST time per invocation): the saving it did not keep."""
    grown = (op.cand_us - t.cand_us) - (op.best_us - t.best_us)
    return 100.0 * grown / op.best_us if op.best_us > 0 else 0.0


def _outcome(t: _Agg, op: _Agg, floor: GainFloor, deltas: list[UnitDelta], policy: Policy, base: dict,
             grew: str | None, op_worse: list[str] = ()) -> UnitKeepDecision:
    """Step 5: regressed / improved / divergent / tie, with the code and the reason's numbers.
    `op_worse`: classes whose whole operation lost beyond their own floor, significantly; `grew`: the
    kernel that grew most (in those classes where there are any)."""
    m = policy.min_gpu_gain_pct
    how = (f"GPU time per invocation of the harness's {len(deltas)} unit(s) ({base['source']}): {t.best_us:.1f} -> "
           f"{t.cand_us:.1f} us, {t.gain:+.3f}% ({policy.confidence * 100:g}% bounds {t.lo:+.3f}..{t.hi:+.3f}%); "
           f"whole operation {op.gain:+.3f}%; {floor.shown()}; BEST's A/A shift {t.shift:+.3f}%")
    kw = {**base, "gpu_candidate_us": t.cand_us, "gpu_delta_pct": t.gain, "metric_used": "profiler GPU time"}
    target_loss = t.gain < -floor.pct and t.hi < -m
    op_loss = op.gain < -floor.pct and op.hi < -m
    if target_loss or op_loss:
        code = Code.GPU_TIME_LOSS if target_loss else Code.OTHER_KERNEL_GREW
        named = f"; grew most: {grew}" if grew else ""
        return UnitKeepDecision(kept=False, outcome="regressed", code=code, grew=grew, reason=(
            f"slower beyond the GPU-time floor: {how}{named}"), **kw)
    if t.gain > floor.pct and t.lo > m:
        if op_worse:  # a trade-off between classes, not an improvement (issue 34 item 3)
            shown = "; ".join(f"{d.cls} {d.op_gain_pct:+.2f}% (floor {d.op_floor_pct:.3g}%)"
                              for d in deltas if d.cls in op_worse and d.op_gain_pct is not None)
            named = f"; grew most there: {grew}" if grew else ""
            return UnitKeepDecision(kept=False, outcome="divergent", code=Code.OPERATION_DIVERGENT,
                                    divergent_classes=op_worse, grew=grew, reason=(
                                        f"the target kernels got faster ({how}), but the whole operation of class(es) "
                                        f"{', '.join(op_worse)} got slower beyond their floor ({shown}){named}: a "
                                        "trade-off between config classes, not an improvement; keep the winner behind "
                                        "dispatch for the classes where the whole operation gains"), **kw)
        moved = _moved_pct(t, op)
        if moved > floor.pct and not (op.gain > floor.pct and op.lo > m):
            named = f" (grew most: {grew})" if grew else ""
            return UnitKeepDecision(kept=False, outcome="tie", code=Code.OTHER_KERNEL_GREW, grew=grew, reason=(
                f"the target kernels got faster ({how}), but the operation's other kernels grew by {moved:.2f}% of "
                f"its time{named}, so the whole operation gained only {op.gain:+.3f}% ({op.lo:+.3f}..{op.hi:+.3f}%), "
                "not beyond the floor: work moved out of the target kernels is not a win: not kept"), **kw)
        worse = list(dict.fromkeys(d.cls for d in deltas if d.significant_loss))  # a class of several units once
        if worse:
            return UnitKeepDecision(kept=False, outcome="divergent", code=Code.GPU_TIME_DIVERGENT,
                                    divergent_classes=worse, reason=(
                                        f"faster overall ({how}), but class(es) {', '.join(worse)} significantly "
                                        "slower beyond their floor: keep the winner as a specialised kernel behind "
                                        "dispatch"), **kw)
        if op.gain < -floor.pct:
            return UnitKeepDecision(kept=False, outcome="tie", code=Code.OTHER_KERNEL_GREW, grew=grew, reason=(
                f"the target kernels got faster but the whole operation did not ({how}); grew most: {grew}: work "
                "moved out of the target kernels is not a win: not kept"), **kw)
        return UnitKeepDecision(kept=True, outcome="improved", code=Code.GPU_TIME_WIN, reason=f"faster: {how}", **kw)
    code = Code.GPU_TIME_BELOW_FLOOR if t.gain > 0 else Code.GPU_TIME_NOT_IMPROVED
    return UnitKeepDecision(kept=False, outcome="tie", code=code, reason=(
        f"GPU time did not move beyond the floor: {how}: not kept"), **kw)


def unit_spread_pct(first: Sequence[HarnessUnit], second: Sequence[HarnessUnit], kernel_regex: str) -> float | None:
    """BEST's A/A spread (%) between two profiled runs by harness unit (the quantity `judge_units`
    puts in `spread_pct`), for the baseline's adjacent profiles; None where the runs' units do not
    pair or launch no target kernel. Never raises for data."""
    target = re.compile(kernel_regex)
    if len(first) != len(second) or not first:
        return None
    fa, fb = [figures(u, target) for u in first], [figures(u, target) for u in second]
    pick = [k for k in range(len(fa)) if fa[k].target_invocations >= 3 and fb[k].target_invocations >= 3]
    if not pick:
        return None
    b1, b2 = [fa[k].target_us or 0.0 for k in pick], [fb[k].target_us or 0.0 for k in pick]
    return abs(_aggregate(b1, b1, b2, [(0.0, 0.0, 0.0)] * len(pick), 0.0).shift)


def unit_gpu_times(units: Sequence[HarnessUnit], kernel_regex: str, classes: Sequence[str]
                   ) -> tuple[float | None, dict[str, float] | None]:
    """BEST's GPU time in the keep metric's quantity: the sum over target units of the target's
    median per invocation (us), and per config class where the target units map to `classes`
    (rules/unit_classes.py; a class of several units: their sum; else None). Never raises for data."""
    target = re.compile(kernel_regex)
    figs = [f for f in (figures(u, target) for u in units) if f.target_invocations >= 3 and f.target_us is not None]
    if not figs:
        return None, None
    total = sum(f.target_us for f in figs)
    of = unit_classes([f.target_us for f in figs], len(classes))
    if of is None:
        return total, None
    return total, sum_by_class((classes[c], f.target_us) for f, c in zip(figs, of))


__all__ = ["RESOLUTION_TICKS", "SKIPPED_SHARE", "UnitDelta", "UnitKeepDecision", "judge_units", "unit_gpu_times", "unit_spread_pct"]
