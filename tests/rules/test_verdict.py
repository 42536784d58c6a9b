"""Per-class verdicts: regression, clear win, divergence, sub-noise confirmation, global target,
and the keep metric (profiler GPU time)."""

from __future__ import annotations

import math

import pytest

from kopt_mcp.rules.verdict import GLOBAL, Round, VerdictError, apply_keep_metric, decide


def R(best: dict[str, float], cand: dict[str, float]) -> Round:
    return Round(best=best, candidate=cand)


def one(best: float, cand: float) -> Round:
    return R({"n=1": best}, {"n=1": cand})


def run(rounds, target="n=1", hib=False, noise=1.0, conf=2):
    return decide(rounds, target, higher_is_better=hib, noise_pct=noise, confirmations=conf)


# --- regressed ------------------------------------------------------------------------------------


def test_slower_beyond_noise_is_regressed():
    d = run([one(100.0, 102.0)])
    assert (d.outcome, d.needs_round) == ("regressed", False)
    assert d.target_deltas_pct == [pytest.approx(-2.0)]


def test_slower_exactly_noise_is_regressed():
    assert run([one(100.0, 101.0)]).outcome == "regressed"


def test_regression_wins_over_better_other_classes():
    d = run([R({"a": 100.0, "b": 100.0}, {"a": 105.0, "b": 50.0})], target="a")
    assert d.outcome == "regressed"


def test_lower_value_is_regressed_when_higher_is_better():
    assert run([one(100.0, 95.0)], hib=True).outcome == "regressed"


# --- clear improvement ------------------------------------------------------------------------------


def test_clear_improvement_in_one_round_is_improved():
    d = run([one(100.0, 95.0)])
    assert (d.outcome, d.needs_round) == ("improved", False)
    assert d.target_deltas_pct == [pytest.approx(5.0)]
    assert d.worse_classes == []


def test_improvement_exactly_noise_is_improved():
    assert run([one(100.0, 99.0)]).outcome == "improved"


def test_higher_value_is_improved_when_higher_is_better():
    assert run([one(100.0, 105.0)], hib=True).outcome == "improved"


def test_other_class_worse_by_less_than_noise_is_no_divergence():
    d = run([R({"a": 100.0, "b": 100.0}, {"a": 90.0, "b": 100.5})], target="a")
    assert (d.outcome, d.needs_round) == ("improved", False)


# --- divergence ---------------------------------------------------------------------------------------


def test_divergence_first_asks_for_a_confirming_round():
    d = run([R({"a": 100.0, "b": 100.0}, {"a": 90.0, "b": 105.0})], target="a")
    assert (d.outcome, d.needs_round) == ("tie", True)
    assert d.worse_classes == []


def test_divergence_confirmed_names_the_worse_classes():
    r = R({"a": 100.0, "b": 100.0, "c": 100.0}, {"a": 90.0, "b": 105.0, "c": 100.0})
    d = run([r, r], target="a")
    assert (d.outcome, d.needs_round) == ("divergent", False)
    assert d.worse_classes == ["b"]
    assert "b" in d.reason


def test_divergence_needs_two_rounds_even_with_one_confirmation():
    r = R({"a": 100.0, "b": 100.0}, {"a": 90.0, "b": 105.0})
    assert run([r], target="a", conf=1).needs_round is True


def test_divergence_not_reproduced_is_improved():
    r1 = R({"a": 100.0, "b": 100.0}, {"a": 90.0, "b": 105.0})
    r2 = R({"a": 100.0, "b": 100.0}, {"a": 90.0, "b": 100.0})
    d = run([r1, r2], target="a")
    assert d.outcome == "improved"
    assert d.worse_classes == []


def test_divergence_follows_higher_is_better():
    r = R({"a": 100.0, "b": 100.0}, {"a": 110.0, "b": 95.0})
    d = run([r, r], target="a", hib=True)
    assert d.outcome == "divergent" and d.worse_classes == ["b"]
    assert [c.deltas_pct for c in d.classes] == [[pytest.approx(10.0)] * 2, [pytest.approx(-5.0)] * 2]


# --- sub-noise wins -----------------------------------------------------------------------------------


def test_subnoise_win_asks_for_a_confirming_round():
    d = run([one(100.0, 99.4)])
    assert (d.outcome, d.needs_round) == ("tie", True)


def test_subnoise_win_confirmed_twice_is_improved():
    d = run([one(100.0, 99.4), one(100.0, 99.3)])
    assert (d.outcome, d.needs_round) == ("improved", False)


def test_subnoise_win_not_reproduced_is_tie():
    d = run([one(100.0, 99.5), one(100.0, 100.2)])
    assert (d.outcome, d.needs_round) == ("tie", False)


def test_subnoise_confirmation_below_floor_is_tie():
    d = run([one(100.0, 99.4), one(100.0, 99.6)])  # 0.4% < noise/2
    assert (d.outcome, d.needs_round) == ("tie", False)


def test_subnoise_win_within_best_spread_is_tie():
    # BEST measured 100 then 100.8 (0.8% spread): 0.5% wins are within BEST's own jitter
    d = run([one(100.0, 99.5), one(100.8, 100.3)])
    assert (d.outcome, d.needs_round) == ("tie", False)


def test_tiny_subnoise_change_is_tie_without_another_round():
    d = run([one(100.0, 99.6)])  # 0.4% < noise/2
    assert (d.outcome, d.needs_round) == ("tie", False)


def test_subnoise_slowdown_is_tie_without_another_round():
    d = run([one(100.0, 100.5)])
    assert (d.outcome, d.needs_round) == ("tie", False)


def test_three_confirmations_need_three_rounds():
    r = one(100.0, 99.4)
    assert run([r, r], conf=3).needs_round is True
    assert run([r, r, r], conf=3).outcome == "improved"


def test_confirmed_subnoise_win_with_reproducibly_worse_class_is_tie():
    r = R({"a": 100.0, "b": 100.0}, {"a": 99.5, "b": 110.0})
    d = run([r, r], target="a")
    assert (d.outcome, d.needs_round) == ("tie", False)


def test_subnoise_noise_threshold_comes_from_the_argument():
    d = run([one(100.0, 97.0), one(100.0, 97.0)], noise=5.0)  # 3% < 5%, floor 2.5%
    assert d.outcome == "improved"
    assert run([one(100.0, 97.0)], noise=5.0).needs_round is True
    assert run([one(100.0, 98.0)], noise=5.0).needs_round is False  # 2% < floor 2.5%


# --- global target ------------------------------------------------------------------------------------


def test_global_is_geometric_mean_of_ratios():
    # ratios 0.5 and 1.0: geomean sqrt(0.5) -> 29.3% better; an arithmetic mean of values says 0.05%
    d = run([R({"a": 1.0, "b": 1000.0}, {"a": 0.5, "b": 1000.0})], target=GLOBAL)
    assert d.target_deltas_pct == [pytest.approx((1 - math.sqrt(0.5)) * 100)]
    assert d.outcome == "improved"


def test_global_halving_and_doubling_cancel_out():
    d = run([R({"a": 100.0, "b": 100.0}, {"a": 50.0, "b": 200.0})], target=GLOBAL)
    assert d.target_deltas_pct == [pytest.approx(0.0, abs=1e-9)]
    assert d.outcome == "tie"


def test_global_divergence_considers_every_class():
    r = R({"a": 100.0, "b": 100.0, "c": 100.0}, {"a": 70.0, "b": 100.0, "c": 105.0})
    d = run([r, r], target=GLOBAL)
    assert d.outcome == "divergent"
    assert d.worse_classes == ["c"]


# --- per-class view and errors ----------------------------------------------------------------------------


def test_every_class_gets_its_deltas():
    rounds = [R({"a": 100.0, "b": 200.0}, {"a": 90.0, "b": 200.0}),
              R({"a": 100.0, "b": 200.0}, {"a": 80.0, "b": 202.0})]
    d = run(rounds, target="a")
    c = {x.key: x for x in d.classes}
    assert c["a"].deltas_pct == [pytest.approx(10.0), pytest.approx(20.0)]
    assert c["a"].mean_pct == pytest.approx(15.0)
    assert (c["a"].best, c["a"].candidate) == (100.0, 80.0)
    assert c["b"].deltas_pct == [pytest.approx(0.0), pytest.approx(-1.0)]


def test_unknown_target_is_a_verdict_error_listing_classes():
    with pytest.raises(VerdictError, match="'n=9'.*n=1"):
        run([one(100.0, 90.0)], target="n=9")


def test_candidate_with_different_classes_is_a_verdict_error():
    with pytest.raises(VerdictError, match="same config classes"):
        run([R({"a": 100.0, "b": 100.0}, {"a": 90.0})], target="a")


def test_classes_changing_between_rounds_is_a_verdict_error():
    rounds = [R({"a": 100.0}, {"a": 99.5}), R({"a": 100.0, "b": 1.0}, {"a": 99.5, "b": 1.0})]
    with pytest.raises(VerdictError):
        run(rounds, target="a")


def test_no_round_is_a_verdict_error():
    with pytest.raises(VerdictError):
        run([], target="a")


# --- keep metric ---------------------------------------------------------------------------------------


def test_kept_when_gpu_time_is_lower():
    k = apply_keep_metric(100.0, 90.0, ["softmax_kernel"])
    assert k.kept is True
    assert k.metric_used == "profiler GPU time"
    assert k.gpu_delta_pct == pytest.approx(10.0)
    assert "softmax_kernel" in k.reason


def test_not_kept_when_gpu_time_is_equal():
    k = apply_keep_metric(100.0, 100.0, ["k"])
    assert k.kept is False
    assert "not kept" in k.reason


def test_not_kept_when_gpu_time_is_higher():
    k = apply_keep_metric(100.0, 101.0, ["k"])
    assert k.kept is False
    assert k.gpu_delta_pct == pytest.approx(-1.0)


def test_script_metric_decides_without_profiler():
    k = apply_keep_metric(None, None, [])
    assert k.kept is True
    assert k.metric_used == "script metric"
    assert k.gpu_delta_pct is None


def test_missing_candidate_gpu_time_with_profiled_best_is_not_kept():
    assert apply_keep_metric(100.0, None, ["k"]).kept is False


def test_missing_best_gpu_time_with_profiled_candidate_is_not_kept():
    k = apply_keep_metric(None, 90.0, ["k"])
    assert k.kept is False
    assert k.metric_used == "profiler GPU time"


def test_global_target_with_a_zero_metric_is_a_verdict_error():
    with pytest.raises(VerdictError):
        run([R({"a": 0.0, "b": 5.0}, {"a": 1.0, "b": 5.0})], target=GLOBAL, hib=True)
