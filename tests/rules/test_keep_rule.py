"""The keep metric (rules.keep_totals.apply_keep_metric): profiler GPU time of the target kernels must
improve too (totals, per launch, or paired launch by launch), skipped work is never kept, and the
GPU-time floor (rules.floor.gpu_gain_floor) follows BEST's measured spreads."""

from __future__ import annotations

import pytest

from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.floor import gpu_gain_floor
from kopt_mcp.rules.keep_totals import apply_keep_metric


def test_gpu_gain_floor_takes_the_largest_of_its_three_parts():
    f = gpu_gain_floor([], 0.0, 0.2)
    assert (f.pct, f.binding) == (0.2, "min_gain")
    f = gpu_gain_floor([0.01, 0.02, 0.01], 0.01, 0.2)
    assert (f.pct, f.binding) == (0.2, "min_gain")
    f = gpu_gain_floor([0.01, 0.02, 0.3], 0.3, 0.2)  # a shift inside this attempt
    assert (f.pct, f.binding) == (pytest.approx(0.6), "own_spread")
    assert f.rest_pct == 0.2  # without the attempt's own spread, min_gpu_gain_pct would set it
    f = gpu_gain_floor([0.1, 0.12, 0.08, 0.1], 0.08, 0.2)  # steady process-to-process shifts
    assert (f.pct, f.binding) == (pytest.approx(0.5), "recent_spreads") and f.median_spread_pct == pytest.approx(0.1)
    assert "median spread" in f.shown() and "0.5%" in f.shown()


def test_one_rare_jump_does_not_raise_the_floor_of_later_attempts():
    # 0.742%: BEST's level jumped once (H100 decision-quality run, 2026-11-23); later attempts' own spreads are small
    spreads = [0.002, 0.004, 0.742, 0.003, 0.005]
    f = gpu_gain_floor(spreads, 0.005, 0.2)
    assert (f.pct, f.binding) == (0.2, "min_gain")
    old = [5.0] + [0.01] * 10  # older than the window
    assert gpu_gain_floor(old, 0.01, 0.2).pct == 0.2
    assert gpu_gain_floor(old * 3, 0.01, 0.2, window=33).binding == "min_gain"


def test_a_gpu_gain_under_the_floor_is_not_kept():
    floor = gpu_gain_floor([0.01, 0.01, 0.3], 0.3, 0.2)
    k = apply_keep_metric(1000.0, 995.0, ["k"], 10, 10, min_gain_pct=floor.pct)
    assert not k.kept and k.code == Code.GPU_TIME_BELOW_FLOOR
    assert k.gpu_delta_pct == pytest.approx(0.5) and floor.pct == pytest.approx(0.6)  # a gain under the floor


def test_kept_when_gpu_time_is_lower():
    k = apply_keep_metric(100.0, 90.0, ["softmax_kernel"])
    assert k.kept is True
    assert k.metric_used == "profiler GPU time"
    assert k.gpu_delta_pct == pytest.approx(10.0) and k.code == Code.GPU_TIME_WIN
    assert "softmax_kernel" in k.reason  # the text is the product: the reason names the timed kernel


def test_not_kept_when_gpu_time_is_equal():
    k = apply_keep_metric(100.0, 100.0, ["k"])
    assert k.kept is False
    assert k.code == Code.GPU_TIME_NOT_IMPROVED and k.gpu_delta_pct == 0.0


def test_not_kept_when_gpu_time_is_higher():
    k = apply_keep_metric(100.0, 101.0, ["k"])
    assert k.kept is False and k.code == Code.GPU_TIME_NOT_IMPROVED
    assert k.gpu_delta_pct == pytest.approx(-1.0)


def test_script_metric_decides_without_profiler():
    k = apply_keep_metric(None, None, [])
    assert k.kept is True and k.code == Code.SCRIPT_ONLY
    assert k.metric_used == "script metric"
    assert k.gpu_delta_pct is None


def test_missing_candidate_gpu_time_with_profiled_best_is_not_kept():
    k = apply_keep_metric(100.0, None, ["k"])
    assert (k.kept, k.code) == (False, Code.GPU_TIME_MISSING)


def test_missing_best_gpu_time_with_profiled_candidate_is_not_kept():
    k = apply_keep_metric(None, 90.0, ["k"])
    assert (k.kept, k.code) == (False, Code.GPU_TIME_MISSING)
    assert k.metric_used == "profiler GPU time"


def test_fewer_launches_than_best_is_skipped_work_and_never_kept():
    k = apply_keep_metric(1000.0, 500.0, ["scale_kernel"], best_calls=320, candidate_calls=160)
    assert not k.kept and k.code == Code.SKIPPED_WORK and k.gpu_delta_pct is None
    assert "160" in k.reason and "320" in k.reason  # the text is the product: it names both launch counts


def test_more_launches_than_best_are_compared_per_launch():
    # an autotuner's extra launches double the total, but each launch got 10% faster
    k = apply_keep_metric(1000.0, 1800.0, ["k"], best_calls=100, candidate_calls=200)
    assert k.kept and k.code == Code.GPU_TIME_WIN and k.gpu_delta_pct == pytest.approx(10.0)  # totals: -80%
    assert not apply_keep_metric(1000.0, 2200.0, ["k"], best_calls=100, candidate_calls=200).kept


def test_gpu_time_that_disagrees_with_the_script_names_the_likely_cheats():
    k = apply_keep_metric(1000.0, 1001.0, ["k"], best_calls=10, candidate_calls=10)
    assert not k.kept and k.code == Code.GPU_TIME_NOT_IMPROVED
    # `suspect` changes only the words: the text is the product, it names what to check in the timing
    assert "side stream" in k.reason and "synchronize" in k.reason


def test_per_launch_paired_test_keeps_a_small_steady_gpu_win():
    best = [100.0 + (i % 5) * 0.3 for i in range(300)]  # launch-to-launch jitter, same on both sides
    cand = [b * 0.995 for b in best]
    k = apply_keep_metric(sum(best), sum(cand), ["k"], 300, 300, best, cand)
    assert k.kept and k.code == Code.GPU_TIME_WIN and k.lower_bound_pct > 0.2  # the paired bound clears it too


def test_per_launch_paired_test_refuses_an_identical_kernel_that_happened_to_be_faster_in_total():
    import random

    rng = random.Random(7)
    best = [100.0 * (1 + rng.gauss(0, 0.01)) for _ in range(50)]
    cand = [100.0 * (1 + rng.gauss(0, 0.01)) for _ in range(50)]
    if sum(cand) >= sum(best):  # make the totals favour the candidate, as chance sometimes does
        best, cand = cand, best
    # without the material floor, only the paired bound stands between chance and a keep
    unpaired = apply_keep_metric(sum(best), sum(cand), ["k"], 50, 50, min_gain_pct=0.0)
    paired = apply_keep_metric(sum(best), sum(cand), ["k"], 50, 50, best, cand, min_gain_pct=0.0)
    assert unpaired.kept and unpaired.lower_bound_pct is None
    assert not paired.kept and paired.lower_bound_pct < 0 < paired.gpu_delta_pct
    assert paired.code == Code.GPU_TIME_BELOW_FLOOR


def test_a_significant_but_immaterial_per_launch_gain_is_not_kept():
    # what the H100 showed for an unchanged kernel moved to a side stream: +0.004%, every launch alike
    best = [368.0 + (i % 3) * 0.01 for i in range(310)]
    cand = [b * (1 - 0.00004) for b in best]
    k = apply_keep_metric(sum(best), sum(cand), ["spin_kernel"], 310, 310, best, cand)
    assert not k.kept and k.code == Code.GPU_TIME_BELOW_FLOOR
    assert k.lower_bound_pct > 0 and k.gpu_delta_pct < 0.2  # significant, and under the 0.2% floor


def test_launches_of_several_target_kernels_are_paired_in_launch_order():
    from kopt_mcp.evidence.trace import KernelStat, KernelTrace, target_durations

    # BEST: one kernel for both classes; candidate: short rows moved to a new kernel, 10% faster
    best = KernelTrace(backend="cupti", total_gpu_us=0, kernels=[
        KernelStat(name="softmax_kernel", calls=4, total_us=600, avg_us=150, share_pct=100,
                   durations_us=[100, 200, 100, 200], launch_order=[1, 2, 3, 4])])
    cand = KernelTrace(backend="cupti", total_gpu_us=0, kernels=[
        KernelStat(name="softmax_kernel", calls=2, total_us=360, avg_us=180, share_pct=60,
                   durations_us=[180, 180], launch_order=[12, 14]),
        KernelStat(name="softmax_rows_kernel", calls=2, total_us=180, avg_us=90, share_pct=40,
                   durations_us=[90, 90], launch_order=[11, 13])])
    assert target_durations(best, ["softmax_kernel"]) == [100, 200, 100, 200]
    assert target_durations(cand, ["softmax_kernel", "softmax_rows_kernel"]) == [90, 180, 90, 180]


def test_a_win_confined_to_one_class_of_launches_is_kept():
    # what the Triton demo's step 6 showed: short-row launches 46% faster, the other classes unchanged
    best = [100.0] * 5 + [200.0] * 10
    cand = [54.0] * 5 + [200.0] * 10
    k = apply_keep_metric(sum(best), sum(cand), ["softmax"], 15, 15, best, cand)
    assert k.kept and k.gpu_delta_pct == pytest.approx(9.2)


def test_an_unconfirmed_sub_noise_gain_is_called_noise_not_a_timing_cheat():
    k = apply_keep_metric(1000.0, 999.9, ["k"], 10, 10, suspect=False)
    assert not k.kept and k.code == Code.GPU_TIME_BELOW_FLOOR
    # `suspect` changes only the words: the text is the product (no timing cheat named for noise)
    assert "was noise" in k.reason and "side stream" not in k.reason


def test_a_keep_without_profiler_warns_that_the_script_metric_can_be_forged():
    from kopt_mcp.rules.keep_totals import SCRIPT_METRIC_WARNING, apply_keep_metric

    k = apply_keep_metric(None, None, [])
    assert k.kept and k.metric_used == "script metric" and k.code == Code.SCRIPT_ONLY
    assert SCRIPT_METRIC_WARNING in k.reason and "forged" in k.reason  # the warning text is the product
