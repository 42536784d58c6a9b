"""rules/unit_classes.py: several harness units per config class (the Triton example's bench.py times
each of its 3 classes in 5 do_bench windows, alternating), and what the keep metric makes of them."""

from __future__ import annotations

from kopt_mcp.evidence.profiles import Profiles, TargetProfile
from kopt_mcp.evidence.trace import KernelTrace
from kopt_mcp.evidence.units import HarnessUnit
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.gpu_time import judge_profiles
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.unit_classes import unit_classes
from kopt_mcp.rules.units import judge_units, unit_gpu_times

CLASSES = ["M=302592,N=197", "M=4096,N=16384", "M=2048,N=32000"]
#: BEST's target time per invocation (a burst of 4 calls, us) of each class, H100-like
BEST = [800.0, 400.0, 660.0]


def test_rounds_blocks_and_one_unit_per_class_are_told_apart():
    rounds = [800.0, 400.0, 660.0] * 5
    assert unit_classes(rounds, 3) == [0, 1, 2] * 5
    blocks = [800.0] * 5 + [400.0] * 5 + [660.0] * 5
    assert unit_classes(blocks, 3) == [0] * 5 + [1] * 5 + [2] * 5
    assert unit_classes([800.0, 400.0, 660.0], 3) == [0, 1, 2]


def test_units_that_cannot_be_told_apart_map_to_no_class():
    assert unit_classes([100.0] * 6, 3) is None  # every class the same time: both orders fit
    assert unit_classes([800.0, 400.0, 660.0, 800.0], 3) is None  # not a multiple
    assert unit_classes([800.0, 400.0, 660.0, 400.0, 800.0, 660.0], 3) is None  # neither order
    assert unit_classes([], 3) is None and unit_classes([1.0], 0) is None


def _units(per_class_us: list[float], rounds: int = 5, invocations: int = 9) -> list[HarnessUnit]:
    """One run's do_bench units, classes alternating round by round; each invocation launches the
    target once (with +-0.1% jitter) and do_bench's L2 flush once."""
    units = []
    for r in range(rounds):
        for c, us in enumerate(per_class_us):
            k = r * len(per_class_us) + c
            per = {i: us * (1.0 + 0.001 * ((i + k) % 3 - 1)) for i in range(invocations)}
            units.append(HarnessUnit(index=k, harness="triton.testing.do_bench", invocations=invocations,
                                     per_invocation={"softmax_kernel": per,
                                                     "at::native::vectorized_elementwise_kernel<4, "
                                                     "at::native::FillFunctor<int>>": {i: 90.0 for i in range(invocations)}},
                                     launches={"softmax_kernel": {i: 1 for i in range(invocations)}}))
    return units


def test_each_class_of_several_units_is_named_and_summed():
    total, per = unit_gpu_times(_units(BEST), "softmax", CLASSES)
    assert round(total) == 5 * sum(BEST)
    assert {k: round(v) for k, v in per.items()} == {c: 5 * round(b) for c, b in zip(CLASSES, BEST)}
    keep = judge_units(_units(BEST), _units([400.0, 400.0, 660.0]), _units(BEST), "softmax", Policy(noise_pct=1.0), (), CLASSES)
    assert keep.outcome == "improved" and keep.code == Code.GPU_TIME_WIN
    assert [d.cls for d in keep.units] == CLASSES * 5


def _profile(units: list[HarnessUnit]) -> TargetProfile:
    trace = KernelTrace(backend="cupti", kernels=[], total_gpu_us=0.0, units=units)
    return TargetProfile(trace=trace, us=1.0, names=["softmax_kernel"], launches=1)


def test_a_class_split_of_several_units_per_class_gives_per_class_rows():
    """The example's four-rows step: the short-row class 2x faster, the others slower; its class rows
    (the evidence of a GPU-time divergent, rules/class_split.py) sum each class's five units."""
    cand = [400.0, 680.0, 5900.0]
    p = Profiles(before=_profile(_units(BEST)), candidate=_profile(_units(cand)), after=_profile(_units(BEST)))
    j = judge_profiles(p, "softmax", Policy(noise_pct=1.0), (), False, CLASSES, False)
    assert j.outcome == "regressed"  # overall a loss: the per-class split is the verdict's to make
    rows = {r.cls: r for r in j.class_rows}
    assert list(rows) == CLASSES
    assert round(rows[CLASSES[0]].candidate_us) == 2000 and round(rows[CLASSES[0]].best_before_us) == 4000
    assert rows[CLASSES[0]].faster(1.0) and rows[CLASSES[2]].slower(1.0)
    assert round(j.class_gpu_us[CLASSES[1]]) == 3400
