"""Paired statistics: the pooled noise estimate and the one-sided bounds, against hand-computed values."""

from __future__ import annotations

import math

import pytest

from kopt_mcp.rules.stats import NoiseEstimate, noise_from_groups, paired_interval

T_975_DF2 = 4.302652729911275  # Student t, 97.5% quantile, 2 degrees of freedom (standard tables)
T_995_DF1 = 63.65674116287399


def test_pooled_noise_is_the_within_group_sd_on_a_log_scale():
    e = math.e
    est = noise_from_groups([[1.0, e**0.01], [2.0, 2.0 * e**0.03]])  # log diffs of 1% and 3%
    # each pair of values x, y adds (x-y)^2/2 with df 1: (1 + 9) / 2 / 2 = 2.5
    assert est.df == 2 and est.run_sd_pct == pytest.approx(math.sqrt(2.5))


def test_groups_of_one_and_non_positive_values_add_nothing():
    assert noise_from_groups([[5.0], [], [0.0, -1.0]]) == NoiseEstimate(run_sd_pct=0.0, df=0)


def test_interval_from_the_deltas_alone_uses_their_sample_sd():
    iv = paired_interval([1.0, 2.0, 3.0], NoiseEstimate(run_sd_pct=0.0, df=0), 0.975)
    assert (iv.n, iv.df, iv.mean_pct, iv.sd_delta_pct) == (3, 2, 2.0, 1.0)
    assert iv.lo_pct == pytest.approx(2.0 - T_975_DF2 / math.sqrt(3))
    assert iv.hi_pct == pytest.approx(2.0 + T_975_DF2 / math.sqrt(3))


def test_a_delta_is_two_runs_so_the_run_sd_counts_twice_in_its_variance():
    iv = paired_interval([0.5], NoiseEstimate(run_sd_pct=1.0, df=1), 0.995)
    assert iv.sd_delta_pct == pytest.approx(math.sqrt(2.0))
    assert iv.lo_pct == pytest.approx(0.5 - T_995_DF1 * math.sqrt(2.0))


def test_deltas_of_runs_already_in_the_noise_add_no_second_estimate():
    # BEST ran 100, 101 and the candidate 99, 100 in this lease: the noise groups hold those four runs,
    # and the deltas (1%, 1%) are their differences, so their scatter is no new degree of freedom
    noise = noise_from_groups([[100.0, 101.0], [99.0, 100.0]])
    counted = paired_interval([1.0, 1.0], noise, 0.995, runs_in_noise=True)
    assert counted.df == noise.df == 2
    assert counted.sd_delta_pct == pytest.approx(math.sqrt(2) * noise.run_sd_pct)
    again = paired_interval([1.0, 1.0], noise, 0.995)  # the scatter (0 here) pooled a second time
    assert again.df == 3 and again.lo_pct > counted.lo_pct


def test_no_degree_of_freedom_gives_infinite_bounds():
    iv = paired_interval([5.0], NoiseEstimate(run_sd_pct=0.0, df=0), 0.99)
    assert math.isinf(iv.lo_pct) and math.isinf(iv.hi_pct) and iv.sd_delta_pct is None
    assert "not yet measurable" in iv.shown()


@pytest.mark.parametrize("conf", [0.5, 1.0, 1.2])
def test_confidence_outside_half_to_one_is_refused(conf):
    with pytest.raises(ValueError, match="confidence"):
        paired_interval([1.0], NoiseEstimate(run_sd_pct=1.0, df=3), conf)


def test_no_delta_is_refused():
    with pytest.raises(ValueError, match="no paired delta"):
        paired_interval([], NoiseEstimate(run_sd_pct=1.0, df=3), 0.99)


def test_slow_drift_within_a_lease_is_not_counted_as_noise():
    drift = [100.0 * math.exp(0.01 * i) for i in range(6)]  # +1% per run, no jitter
    est = noise_from_groups([drift])
    # successive differences are all 1%: s^2 = 5 * 1 / (2 * 5) = 0.5, not the 1.87 of the group variance
    assert est.df == 5 and est.run_sd_pct == pytest.approx(math.sqrt(0.5))


def test_guarded_keeps_the_pooled_bound_when_the_deltas_agree():
    from kopt_mcp.rules.stats import guarded

    iv = paired_interval([5.0, 5.0], NoiseEstimate(run_sd_pct=1.0, df=20), 0.995)
    assert guarded(iv, [5.0, 5.0]) == iv


def test_guarded_widens_with_the_deltas_own_sd():
    from kopt_mcp.rules.stats import guarded

    iv = paired_interval([4.0, 6.0], NoiseEstimate(run_sd_pct=0.1, df=100), 0.995)
    own = guarded(iv, [4.0, 6.0])
    assert own.sd_delta_pct == pytest.approx(math.sqrt(2.0))  # sd of 4, 6
    assert own.df == iv.df and own.mean_pct == iv.mean_pct
    assert (own.mean_pct - own.lo_pct) / (iv.mean_pct - iv.lo_pct) == pytest.approx(own.sd_delta_pct / iv.sd_delta_pct)


def test_guarded_leaves_infinite_bounds_alone():
    from kopt_mcp.rules.stats import guarded

    iv = paired_interval([5.0], NoiseEstimate(run_sd_pct=0.0, df=0), 0.995)
    assert guarded(iv, [5.0]) is iv


def test_log_deltas_map_back_to_improvement_percent():
    from kopt_mcp.rules.stats import as_improvement, log_delta_pct

    assert log_delta_pct(100.0, 50.0, False) == pytest.approx(100 * math.log(2))
    assert log_delta_pct(100.0, 50.0, True) == pytest.approx(-100 * math.log(2))
    iv = paired_interval([log_delta_pct(100.0, 50.0, False)] * 2, NoiseEstimate(run_sd_pct=1.0, df=10), 0.995)
    shown = as_improvement(iv, False)
    assert shown.mean_pct == pytest.approx(50.0) and 0 < shown.lo_pct < 50.0 < shown.hi_pct < 100.0
    up = as_improvement(paired_interval([100 * math.log(2)] * 2, NoiseEstimate(run_sd_pct=1.0, df=10), 0.995), True)
    assert up.mean_pct == pytest.approx(100.0)  # twice the throughput: +100%
    # a 30x faster candidate is far beyond a 40% run-to-run noise on the log scale, not within it
    big = paired_interval([100 * math.log(30)] * 2, NoiseEstimate(run_sd_pct=40.0, df=6), 0.995)
    assert as_improvement(big, False).lo_pct > 0
