"""`divergent` from GPU time per config class (rules/class_split.py), directly and through the
verdict (rules/verdict.py `profiled_verdict`), on the recorded 4 x H200 traces where the Triton
example's `four-rows-per-program-everywhere` was judged `regressed` (tests/fixtures/cupti/
h200x4_triton_divergent: BEST, candidate, BEST of one demo's step 2, with each run's bench.csv)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from kopt_mcp.evidence.profiles import Profiles, TargetProfile
from kopt_mcp.evidence.trace import target_durations, target_gpu_time, target_launches
from kopt_mcp.profilers.cupti import parse_cupti_dir
from kopt_mcp.rules.class_split import ClassGpuTime, class_rows, split_on_target
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.gpu_time import judge_profiles
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.script import GLOBAL, Round
from kopt_mcp.rules.verdict import profiled_verdict
from tests.rules.test_verdict import run

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "cupti" / "h200x4_triton_divergent"
SHORT, WIDE, LONG = "M=302592,N=197,dtype=float16", "M=4096,N=16384,dtype=float16", "M=2048,N=32000,dtype=float16"
CLASSES = [SHORT, WIDE, LONG]
POLICY = Policy(noise_pct=1.0, confirmations=2, max_rounds=3)


def row(cls: str, before: float, cand: float, after: float) -> ClassGpuTime:
    return ClassGpuTime(cls=cls, best_before_us=before, candidate_us=cand, best_after_us=after)


def test_the_target_faster_and_another_class_slower_beyond_their_margins_is_a_split():
    rows = [row("a", 100.0, 50.0, 100.4), row("b", 100.0, 300.0, 100.0), row("c", 100.0, 100.1, 100.0)]
    split = split_on_target(rows, "a", floor_pct=1.0)
    assert split is not None and split.target.cls == "a" and [c.cls for c in split.slower] == ["b"]
    assert split.target.gain_pct == pytest.approx(50.1, abs=0.1)


def test_no_split_without_a_slower_class_for_a_global_target_or_a_target_within_its_margin():
    rows = [row("a", 100.0, 50.0, 100.0), row("b", 100.0, 100.5, 100.0)]
    assert split_on_target(rows, "a", floor_pct=1.0) is None  # b within the floor
    rows = [row("a", 100.0, 50.0, 100.0), row("b", 100.0, 300.0, 100.0)]
    assert split_on_target(rows, GLOBAL, floor_pct=1.0) is None
    assert split_on_target(rows, "b", floor_pct=1.0) is None  # the target itself is the slower one
    assert split_on_target(rows, "missing", floor_pct=1.0) is None


def test_a_class_must_beat_both_best_profiles_by_twice_its_own_spread():
    # BEST's own profiles of class a differ by 20%: a 15% faster candidate is within that class's noise
    noisy = [row("a", 90.0, 85.0, 110.0), row("b", 100.0, 300.0, 100.0)]
    assert noisy[0].spread_pct == pytest.approx(20.0)
    assert not noisy[0].faster(floor_pct=1.0) and split_on_target(noisy, "a", floor_pct=1.0) is None
    # slower than one BEST profile, faster than the other: neither
    mixed = row("b", 100.0, 105.0, 110.0)
    assert not mixed.faster(1.0) and not mixed.slower(1.0)


def test_class_rows_need_the_same_classes_with_positive_times_in_all_three_runs():
    a = {"x": 1.0, "y": 2.0}
    assert [r.cls for r in class_rows(a, {"x": 1.5, "y": 2.5}, a)] == ["x", "y"]
    assert class_rows(a, {"x": 1.5}, a) is None
    assert class_rows(a, {"x": 0.0, "y": 2.0}, a) is None
    assert class_rows(None, a, a) is None


def _profile(name: str) -> TargetProfile:
    trace = parse_cupti_dir(FIX / name)
    us, names = target_gpu_time(trace, "softmax")
    return TargetProfile(trace=trace, us=us, names=names, launches=target_launches(trace, names),
                         durations_us=target_durations(trace, names))


def _values(name: str) -> dict[str, float]:
    with open(FIX / name / "bench.csv", newline="") as f:
        return {f"M={r['M']},N={r['N']},dtype={r['dtype']}": float(r["us_per_call"]) for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def recorded():
    p = Profiles(before=_profile("0002-best-1"), candidate=_profile("0002-candidate-1"), after=_profile("0002-best-2"))
    return p, judge_profiles(p, "softmax", POLICY, [], False, CLASSES, suspect=False)


def test_the_recorded_h200_step_is_gpu_time_divergent_although_its_script_metric_saw_no_target_win(recorded):
    _, gpu = recorded
    assert gpu.outcome == "regressed" and gpu.keep.code == Code.GPU_TIME_LOSS
    by = {r.cls: r for r in gpu.class_rows}
    assert by[SHORT].best_before_us == pytest.approx(183.7, abs=0.1) and by[SHORT].candidate_us == pytest.approx(89.0, abs=0.1)
    assert by[SHORT].gain_pct == pytest.approx(51.6, abs=0.2) and by[LONG].gain_pct < -700
    script = run([Round(best=_values("0002-best-1"), candidate=_values("0002-candidate-1"))], target=SHORT)
    assert script.target_deltas_pct[0] == pytest.approx(-0.97, abs=0.01)  # the timer read no target win
    v = profiled_verdict(script, gpu, POLICY, can_measure=True)
    assert (v.outcome, v.code) == ("divergent", Code.GPU_TIME_DIVERGENT)
    # the same evidence for the whole operation (global target) stays a regression
    g = profiled_verdict(run([Round(best=_values("0002-best-1"), candidate=_values("0002-candidate-1"))],
                             target=GLOBAL), gpu, POLICY, can_measure=True)
    assert g.outcome in ("regressed", "needs_round") and g.code != Code.GPU_TIME_DIVERGENT


def test_a_target_win_with_a_slower_class_the_script_confirmed_slower_stays_regressed(recorded):
    _, gpu = recorded
    best = _values("0002-best-1")
    slower = {k: v * (1.2 if k == SHORT else 6.0) for k, v in best.items()}  # the target 20% slower, twice
    script = run([Round(best=best, candidate=slower)] * 2, target=SHORT)
    assert script.outcome == "regressed"
    assert profiled_verdict(script, gpu, POLICY, can_measure=True).outcome == "regressed"
