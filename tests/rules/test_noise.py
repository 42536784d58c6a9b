"""The noise rule: changes under noise_pct are noise; sub-noise wins need confirmations above a floor."""

from __future__ import annotations

import pytest

from kopt_mcp.metrics import improvement_pct
from kopt_mcp.rules.noise import classify_change, confirmation_floor_pct, spread_pct, subnoise_confirmed


def test_change_below_noise_is_noise():
    assert classify_change(0.9, 1.0) == "noise"


def test_change_at_noise_threshold_is_better():
    assert classify_change(1.0, 1.0) == "better"


def test_negative_change_below_noise_is_noise():
    assert classify_change(-0.9, 1.0) == "noise"


def test_negative_change_at_noise_threshold_is_worse():
    assert classify_change(-1.0, 1.0) == "worse"


def test_large_changes_are_better_or_worse():
    assert classify_change(25.0, 1.0) == "better"
    assert classify_change(-25.0, 1.0) == "worse"


def test_zero_change_is_noise():
    assert classify_change(0.0, 1.0) == "noise"


def test_noise_threshold_comes_from_the_argument():
    assert classify_change(1.5, 2.0) == "noise"
    assert classify_change(2.0, 2.0) == "better"


def test_measured_one_percent_faster_is_better():
    assert classify_change(improvement_pct(100.0, 99.0, False), 1.0) == "better"


def test_measured_point_nine_percent_faster_is_noise():
    assert classify_change(improvement_pct(100.0, 99.1, False), 1.0) == "noise"


def test_exact_one_percent_with_rounding_error_is_better():
    assert classify_change(improvement_pct(10.0, 9.9, False), 1.0) == "better"


def test_spread_is_max_minus_min_over_min():
    assert spread_pct([100.0, 102.0, 101.0]) == pytest.approx(2.0)


def test_spread_of_fewer_than_two_samples_is_zero():
    assert spread_pct([]) == 0.0
    assert spread_pct([100.0]) == 0.0


def test_spread_with_non_positive_sample_is_zero():
    assert spread_pct([0.0, 5.0]) == 0.0


def test_floor_is_half_of_noise_when_best_is_steady():
    assert confirmation_floor_pct(1.0, [100.0, 100.1]) == pytest.approx(0.5)


def test_floor_is_best_spread_when_larger():
    assert confirmation_floor_pct(1.0, [100.0, 100.6]) == pytest.approx(0.6)


def test_subnoise_confirmed_when_every_last_delta_clears_floor():
    assert subnoise_confirmed([0.5, 0.4], 0.25, 2) is True


def test_subnoise_not_confirmed_when_one_delta_is_below_floor():
    assert subnoise_confirmed([0.5, 0.2], 0.25, 2) is False
    assert subnoise_confirmed([0.2, 0.5], 0.25, 2) is False


def test_subnoise_not_confirmed_with_too_few_deltas():
    assert subnoise_confirmed([0.5], 0.25, 2) is False


def test_subnoise_uses_only_the_last_confirmations_deltas():
    assert subnoise_confirmed([-3.0, 0.5, 0.5], 0.25, 2) is True
    assert subnoise_confirmed([0.5, 0.5, 0.1], 0.25, 2) is False


def test_subnoise_delta_equal_to_floor_counts():
    assert subnoise_confirmed([0.25, 0.25], 0.25, 2) is True


def test_subnoise_zero_floor_still_needs_a_positive_delta():
    assert subnoise_confirmed([0.0, 0.0], 0.0, 2) is False


def test_subnoise_three_confirmations_need_three_deltas():
    assert subnoise_confirmed([0.5, 0.5], 0.25, 3) is False
    assert subnoise_confirmed([0.5, 0.5, 0.5], 0.25, 3) is True
