"""The noise rule: a change under noise_pct is noise (its confirmation is tested in test_verdict.py)."""

from __future__ import annotations

from kopt_mcp.rules.noise import classify_change
from kopt_mcp.rules.percent import improvement_pct


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
