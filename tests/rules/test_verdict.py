"""Per-class verdicts: regression, clear win, divergence, sub-noise confirmation, global target,
paired statistics and the adaptive number of rounds. The keep metric (profiler GPU time) is in
test_keep_rule.py.

Unless a test says otherwise the session's earlier BEST runs (`history`) show a quiet GPU: six
leases of five runs each jittering by +-0.1% (run-to-run SD about 0.08%; the rules pool the latest 8 degrees of freedom)."""

from __future__ import annotations

import math
import random

import pytest

from kopt_mcp.errors import VerdictError
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.script import GLOBAL, Round, decide


def R(best: dict[str, float], cand: dict[str, float]) -> Round:
    return Round(best=best, candidate=cand)


def one(best: float, cand: float) -> Round:
    return R({"n=1": best}, {"n=1": cand})


def history(keys, jitter: float = 0.001, leases: int = 6) -> list[list[dict[str, float]]]:
    """BEST runs of earlier leases: each lease five runs at 100 * (1 +- jitter, 1 +- jitter/2, 1)."""
    factors = [1.0, 1 + jitter, 1 - jitter, 1 + jitter / 2, 1 - jitter / 2]
    return [[{k: 100.0 * f for k in keys} for f in factors] for _ in range(leases)]


def run(rounds, target="n=1", hib=False, noise=1.0, conf=2, hist=None, max_rounds=3, confidence=0.995,
        profiler_confirms=False):
    if hist is None:
        hist = history(list(rounds[0].best)) if rounds else []
    policy = Policy(noise_pct=noise, confirmations=conf, confidence=confidence, max_rounds=max_rounds,
                    profiler_confirms=profiler_confirms)
    return decide(rounds, target, higher_is_better=hib, policy=policy, history=hist)


# --- regressed ------------------------------------------------------------------------------------


def test_slower_beyond_noise_is_confirmed_in_a_second_round_then_regressed():
    d = run([one(100.0, 102.0)])  # the script metric alone never counts a regression on one round
    assert (d.outcome, d.needs_round, d.code) == ("tie", True, Code.NEEDS_ROUND)
    assert d.target_interval.hi_pct < 0  # already significant: the round is the confirming one
    d = run([one(100.0, 102.0), one(100.0, 101.9)])
    assert (d.outcome, d.needs_round, d.code) == ("regressed", False, Code.SCRIPT_REGRESSION)
    assert d.target_deltas_pct == [pytest.approx(-2.0), pytest.approx(-1.9)]


def test_slower_exactly_noise_is_regressed():
    assert run([one(100.0, 101.0)] * 2).outcome == "regressed"


def test_regression_wins_over_better_other_classes():
    d = run([R({"a": 100.0, "b": 100.0}, {"a": 105.0, "b": 50.0})] * 2, target="a")
    assert d.outcome == "regressed"


def test_lower_value_is_regressed_when_higher_is_better():
    assert run([one(100.0, 95.0)] * 2, hib=True).outcome == "regressed"


def test_with_a_budget_of_one_round_one_round_counts_a_regression():
    assert run([one(100.0, 102.0)], max_rounds=1).outcome == "regressed"


def test_one_run_hit_by_a_burst_is_no_regression():
    # quiet history; the candidate's first run was hit by a burst of a neighbour's load (measured
    # live: -85.6% on an identical candidate, 2026-11-23); the next rounds show no change
    d = run([one(100.0, 185.6)], noise=5.0)
    assert (d.outcome, d.needs_round) == ("tie", True)
    d = run([one(100.0, 185.6), one(100.0, 100.4)], noise=5.0)
    assert (d.outcome, d.needs_round) == ("tie", True)
    d = run([one(100.0, 185.6), one(100.0, 100.4), one(100.0, 99.8)], noise=5.0)
    assert (d.outcome, d.needs_round, d.code) == ("tie", False, Code.SCRIPT_NOT_CONFIRMED)
    assert d.target_interval.mean_pct <= -5.0  # a slowdown on the mean, not confirmed round by round


def test_a_slowdown_seen_twice_but_spread_wide_is_not_yet_a_regression():
    # identical candidate under a steady CPU hog (measured live, 2026-11-24): -6.0%, -15.3%
    d = run([one(100.0, 106.2), one(100.0, 116.5)], noise=5.0)
    assert (d.outcome, d.needs_round) == ("tie", True)


# --- clear improvement ------------------------------------------------------------------------------


def test_clear_improvement_is_confirmed_in_a_second_round_then_improved():
    d = run([one(100.0, 95.0)])  # the script metric alone never keeps on one round
    assert (d.outcome, d.needs_round, d.code) == ("tie", True, Code.NEEDS_ROUND)
    assert d.target_interval.lo_pct > 0  # already significant: the round is the confirming one
    d = run([one(100.0, 95.0), one(100.0, 95.1)])
    assert (d.outcome, d.needs_round, d.code) == ("improved", False, Code.SCRIPT_WIN)
    assert d.target_deltas_pct == [pytest.approx(5.0), pytest.approx(4.9)]
    assert d.worse_classes == []


def test_with_a_budget_of_one_round_one_round_decides():
    assert run([one(100.0, 95.0)], max_rounds=1).outcome == "improved"


def test_improvement_exactly_noise_is_improved():
    assert run([one(100.0, 99.0)] * 2).outcome == "improved"


def test_higher_value_is_improved_when_higher_is_better():
    assert run([one(100.0, 105.0)] * 2, hib=True).outcome == "improved"


def test_other_class_worse_by_less_than_noise_is_no_divergence():
    d = run([R({"a": 100.0, "b": 100.0}, {"a": 90.0, "b": 100.5})] * 2, target="a")
    assert (d.outcome, d.needs_round) == ("improved", False)


# --- the script metric under a load that changed since the noise was measured (issue 11, item 8) ----


def test_a_win_seen_in_one_round_only_is_not_kept():
    # quiet history; round 1 looks like a 20% win (a burst of load on BEST's run), round 2 does not
    d = run([one(120.0, 100.0), one(100.0, 99.8)], noise=5.0)
    assert (d.outcome, d.needs_round) == ("tie", True)
    d = run([one(120.0, 100.0), one(100.0, 99.8), one(100.0, 100.3)], noise=5.0)
    assert (d.outcome, d.needs_round, d.code) == ("tie", False, Code.SCRIPT_NOT_CONFIRMED)
    assert d.target_interval.mean_pct >= 5.0 and sum(x >= 5.0 for x in d.target_deltas_pct) == 1  # seen once


def test_noise_is_pooled_from_the_latest_best_runs_only():
    # an old, very noisy BEST (e.g. a slow baseline under load) no longer hides a clear divergence
    old_noisy = history(["a", "b"], jitter=0.3, leases=2)
    recent_quiet = history(["a", "b"], jitter=0.001, leases=3)  # 12 df: beyond RECENT_NOISE_DF
    r = R({"a": 100.0, "b": 100.0}, {"a": 60.0, "b": 150.0})
    assert run([r, r], target="a", hist=old_noisy + recent_quiet).outcome == "divergent"
    assert run([r, r], target="a", hist=old_noisy + recent_quiet).target_interval.lo_pct > 0
    assert run([r, r], target="a", hist=recent_quiet + old_noisy).target_interval.lo_pct < 0


def test_noise_of_an_older_best_at_another_level_is_left_out(monkeypatch):
    # the slow baseline (level 3000, spreading 2x under a bursty load) was replaced by a 30x faster
    # BEST; its spread says nothing about the new BEST's runs
    import kopt_mcp.rules.stats as v

    slow = [[{"n=1": x} for x in (3000.0, 6000.0, 1500.0, 4000.0, 2000.0)] for _ in range(2)]
    rounds = [one(100.0, 60.0), one(100.4, 60.1)]
    d = run(rounds, hist=slow, noise=7.0)
    assert d.outcome == "improved" and d.target_interval.df == 2  # this attempt's runs only: 1 df per tree
    monkeypatch.setattr(v, "LEVEL_FACTOR", float("inf"))
    assert run(rounds, hist=slow, noise=7.0).outcome == "tie"  # the old BEST's spread hid a 40% win
    monkeypatch.undo()
    same_level_noisy = [[{"n=1": x} for x in (100.0, 200.0, 60.0, 130.0, 70.0)] for _ in range(2)]
    assert run(rounds, hist=same_level_noisy, noise=7.0).outcome == "tie"  # noise at this level counts


def test_deltas_own_spread_widens_a_bound_from_a_quiet_history():
    d = run([one(100.0, 94.0), one(100.0, 60.0)], noise=5.0)  # +6% and +40%: own SD ~24%
    assert d.outcome == "tie" and d.needs_round


def test_a_large_win_repeated_under_load_is_still_kept():
    noisy = history(["n=1"], jitter=0.05)  # run-to-run SD ~4%
    rounds = [one(100.0, 70.0), one(108.0, 74.0), one(97.0, 69.0)]  # ~30% faster, BEST moving by 10%
    assert run(rounds, hist=noisy, noise=7.0).outcome == "improved"


# --- divergence ---------------------------------------------------------------------------------------


def test_divergence_first_asks_for_a_confirming_round():
    d = run([R({"a": 100.0, "b": 100.0}, {"a": 90.0, "b": 105.0})], target="a")
    assert (d.outcome, d.needs_round) == ("tie", True)
    assert d.worse_classes == []


def test_divergence_confirmed_names_the_worse_classes():
    r = R({"a": 100.0, "b": 100.0, "c": 100.0}, {"a": 90.0, "b": 105.0, "c": 100.0})
    d = run([r, r], target="a")
    assert (d.outcome, d.needs_round) == ("divergent", False)
    assert d.worse_classes == ["b"] and d.code == Code.SCRIPT_DIVERGENT


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


# --- how often an identical candidate is kept (script metric alone) ---------------------------------


def _simulated(rng: random.Random, effect_pct: float) -> str:
    """One verdict as the referee reaches it right after a commit (no earlier BEST group at the new
    level): rounds of BEST and a candidate `effect_pct` faster, each run with 1% log-normal noise."""
    def run_value() -> float:
        return 100.0 * math.exp(rng.gauss(0.0, 0.01))

    rounds: list[Round] = []
    while True:
        rounds.append(R({"n=1": run_value()}, {"n=1": run_value() * math.exp(-effect_pct / 100.0)}))
        d = decide(rounds, "n=1", higher_is_better=False, policy=Policy(noise_pct=7.0), history=[])
        if not d.needs_round:
            return d.outcome


def test_an_identical_candidate_is_kept_at_most_one_minus_confidence_of_the_time():
    # seeded, so the count is fixed: 7 of 2000. Before each look got its share of 1 - confidence and
    # the deltas' scatter stopped being pooled twice, this was 1.9% (38 of 2000): an identical rename
    # in the three-agent demo was kept on CI (2026-11-24)
    rng = random.Random(11)
    kept = sum(_simulated(rng, 0.0) == "improved" for _ in range(2000))
    assert kept <= 0.005 * 2000
    rng = random.Random(12)  # and the rule still keeps what is there: a 10% win, 10 x the noise
    assert sum(_simulated(rng, 10.0) == "improved" for _ in range(300)) >= 0.95 * 300


@pytest.mark.parametrize(("max_rounds", "confirmations", "profiler", "expected"), [
    (3, 2, False, 0.9975),  # a keep can be declared after round 2 or 3: two looks
    (2, 2, False, 0.995),  # one look
    (4, 1, False, 1 - 0.005 / 4),  # one confirmation: looks after rounds 1..4
    (3, 2, True, 0.995),  # the GPU screen: 2 script rounds, one look
])
def test_each_look_at_a_keep_gets_its_share_of_one_minus_confidence(max_rounds, confirmations, profiler, expected):
    p = Policy(noise_pct=1.0, confirmations=confirmations, max_rounds=max_rounds, profiler_confirms=profiler)
    assert p.keep_confidence == pytest.approx(expected)


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


def test_subnoise_win_within_the_measured_noise_is_measured_again_then_tie():
    noisy = history(["n=1"], jitter=0.01)  # run-to-run SD ~0.8%
    assert run([one(100.0, 99.4), one(100.0, 99.6)], hist=noisy).needs_round is True
    d = run([one(100.0, 99.4), one(100.0, 99.6), one(100.0, 99.5)], hist=noisy)
    assert (d.outcome, d.needs_round, d.code) == ("tie", False, Code.SCRIPT_NOT_CONFIRMED)
    assert 0 < d.target_interval.mean_pct < 1.0  # a sub-noise win on the mean, not significant


def test_small_but_steady_subnoise_win_on_a_quiet_gpu_is_improved():
    d = run([one(100.0, 99.6), one(100.0, 99.62)])  # 0.4% twice; noise SD ~0.08%
    assert (d.outcome, d.code) == ("improved", Code.SCRIPT_SUB_NOISE_WIN) and d.target_interval.lo_pct > 0


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
    d = run([one(100.0, 97.0), one(100.0, 97.0)], noise=5.0)  # 3% < 5%: a sub-noise win, confirmed
    assert d.outcome == "improved"
    assert run([one(100.0, 97.0)], noise=5.0).needs_round is True


# --- the profiled run confirms (a per-launch profiler follows the script metric) -------------------


def screen(rounds, **kw):
    return run(rounds, confidence=0.95, profiler_confirms=True, **kw)


def test_with_a_profiler_one_faster_run_passes_the_screen_even_within_the_noise():
    # the deltas' scatter hides a 0.5% win from the script test; the profiled run is the second measurement
    d = screen([one(100.0, 99.5)], hist=history(["n=1"], jitter=0.01))
    assert (d.outcome, d.needs_round, d.code) == ("improved", False, Code.SCRIPT_SCREEN_PASSED)


def test_with_a_profiler_a_slower_last_run_is_measured_again_then_tie():
    d = screen([one(100.0, 100.3)])
    assert (d.outcome, d.needs_round) == ("tie", True)
    d = screen([one(100.0, 100.3), one(100.0, 99.6)])  # faster in the last run, and on the mean
    assert d.outcome == "improved"
    d = screen([one(100.0, 99.4), one(100.0, 100.3)])  # faster, then not: the budget is spent
    assert (d.outcome, d.needs_round, d.code) == ("tie", False, Code.SCRIPT_NOT_CONFIRMED)
    assert d.target_deltas_pct[-1] < 0 < d.target_interval.mean_pct  # faster on the mean, not in the last run


def test_with_a_profiler_the_script_rounds_leave_one_candidate_run_for_the_profile():
    assert Policy(noise_pct=1.0, max_rounds=3, profiler_confirms=True).script_rounds == 2
    assert Policy(noise_pct=1.0, max_rounds=3).script_rounds == 3
    assert Policy(noise_pct=1.0, max_rounds=1, profiler_confirms=True).script_rounds == 1
    d = screen([one(100.0, 100.2)], max_rounds=1)
    assert (d.outcome, d.needs_round) == ("tie", False)


def test_with_a_profiler_a_faster_last_run_but_slower_mean_is_not_passed():
    d = screen([one(100.0, 100.6), one(100.0, 99.8)])  # mean -0.2%
    assert (d.outcome, d.needs_round) == ("tie", False)


def test_with_a_profiler_a_regression_is_confirmed_in_a_second_round():
    """On the H100 (2026-11-24) one run of triton-kernels' own benchmark halved one class's bandwidth
    and an identical candidate came back regressed at -1.40% after one round: one round no longer decides."""
    d = screen([one(100.0, 101.4)])
    assert (d.outcome, d.needs_round) == ("tie", True)
    assert screen([one(100.0, 101.4), one(100.0, 99.9)]).outcome == "tie"  # not seen again
    assert screen([one(100.0, 102.0), one(100.0, 102.1)]).outcome == "regressed"
    assert screen([one(100.0, 102.0)], max_rounds=1).outcome == "regressed"  # a budget of one round


def test_with_a_profiler_divergence_is_still_named():
    r = R({"a": 100.0, "b": 100.0}, {"a": 95.0, "b": 110.0})
    assert screen([r], target="a").needs_round is True
    d = screen([r, r], target="a")
    assert d.outcome == "divergent" and d.worse_classes == ["b"]
    sub = R({"a": 100.0, "b": 100.0}, {"a": 99.5, "b": 110.0})  # a sub-noise win that costs class b
    d = screen([sub, sub], target="a")
    assert (d.outcome, d.code) == ("tie", Code.SCRIPT_WORSE_CLASS)


# --- paired statistics and the number of rounds ------------------------------------------------------


def test_without_any_noise_estimate_one_round_is_never_enough():
    d = run([one(100.0, 95.0)], hist=[])
    assert (d.outcome, d.needs_round) == ("tie", True)
    assert math.isinf(d.target_interval.lo_pct)
    d = run([one(100.0, 95.0), one(100.0, 94.9)], hist=[])
    # BEST run twice (1) + the candidate run twice (1); the deltas are differences of those same runs
    assert d.outcome == "improved" and d.target_interval.df == 2


def test_clear_win_under_heavy_noise_is_measured_again_then_tie():
    noisy = history(["n=1"], jitter=0.05)  # run-to-run SD ~4%
    assert run([one(100.0, 97.0)], hist=noisy).needs_round is True
    d = run([one(100.0, 97.0)] * 3, hist=noisy)
    assert (d.outcome, d.needs_round, d.code) == ("tie", False, Code.SCRIPT_NOT_CONFIRMED)
    assert d.target_interval.mean_pct >= 1.0 and d.target_interval.lo_pct <= 0  # a clear win, not significant


def test_regression_under_heavy_noise_is_measured_again_before_it_counts():
    noisy = history(["n=1"], jitter=0.05)
    assert run([one(100.0, 102.0)], hist=noisy).needs_round is True
    d = run([one(100.0, 102.0)] * 3, hist=noisy)
    assert (d.outcome, d.code) == ("tie", Code.SCRIPT_NOT_CONFIRMED)
    assert d.target_interval.mean_pct <= -1.0 and d.target_interval.hi_pct >= 0  # slower, not significantly


def test_the_round_budget_is_never_exceeded():
    d = run([one(100.0, 99.5)], max_rounds=1)
    assert d.needs_round is False and d.outcome == "tie"


def test_the_verdict_shows_mean_bounds_and_degrees_of_freedom():
    d = run([one(100.0, 95.0)], max_rounds=1)
    iv = d.target_interval
    # the latest two leases of history (4 df each: RECENT_NOISE_DF = 8), this attempt's BEST adds none
    assert iv.n == 1 and iv.df == 8 and iv.lo_pct > 0 and iv.hi_pct > iv.mean_pct
    # where the spread came from, for the reason's words: 2 earlier leases of 5 BEST runs (one round: no
    # group of this lease has 2 runs), and no degree of freedom from the one delta itself
    assert (iv.pooled.earlier_leases, iv.pooled.earlier_runs, iv.pooled.best_runs, iv.pooled.candidate_runs,
            iv.own_df) == (2, 10, 0, 0, 0)
    assert d.classes[0].interval.mean_pct == pytest.approx(5.0)


def test_a_keep_names_its_looks_and_rounds_its_confidence():
    """A keep on the script metric alone is tested after each round that may keep (rounds 2..4 of 4:
    3 looks), each at 1 - 0.005 / 3; the reason gives 99.5% over 3 looks and 99.8% each, never 99.8333%."""
    d = run([one(100.0, 90.0), one(100.0, 90.1)], max_rounds=4)
    k = d.target_interval
    assert d.outcome == "improved" and d.code == "script_win"
    assert "99.8333" not in d.reason and "99.5% over 3 looks" in d.reason and "99.8% each" in d.reason
    assert k.n == 2 and k.confidence == pytest.approx(0.995)  # the target's interval is the pooled one


def test_the_classes_values_are_the_ones_their_mean_change_is_computed_from():
    """A candidate slower on average never shows a positive change: best/candidate are the means over
    the rounds (geometric, the scale of the paired deltas), not the last round's values."""
    from kopt_mcp.rules.percent import improvement_pct

    rounds = [R({"a": 100.0, "b": 100.0}, {"a": 80.0, "b": 140.0}),
              R({"a": 100.0, "b": 100.0}, {"a": 80.0, "b": 90.0})]  # b: slower on average, faster last
    d = run(rounds, target="a")
    for c in d.classes:
        assert improvement_pct(c.best, c.candidate, False) == pytest.approx(c.mean_pct)
    b = next(c for c in d.classes if c.key == "b")
    assert b.mean_pct < 0 and b.candidate > b.best and b.candidate == pytest.approx(math.sqrt(140.0 * 90.0))


def test_higher_confidence_needs_more_evidence():
    rounds = [one(100.0, 99.5), one(100.0, 99.46)]  # 0.5% wins
    noisy = history(["n=1"], jitter=0.002)
    assert run(rounds, hist=noisy, confidence=0.9).outcome == "improved"
    assert run(rounds, hist=noisy, confidence=0.9999).outcome == "tie"


# --- global target ------------------------------------------------------------------------------------


def test_global_is_geometric_mean_of_ratios():
    # ratios 0.5 and 1.0: geomean sqrt(0.5) -> 29.3% better; an arithmetic mean of values says 0.05%
    d = run([R({"a": 1.0, "b": 1000.0}, {"a": 0.5, "b": 1000.0})] * 2, target=GLOBAL)
    assert d.target_deltas_pct == [pytest.approx((1 - math.sqrt(0.5)) * 100)] * 2
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
    assert c["a"].mean_pct == pytest.approx(100 * (1 - math.sqrt(0.9 * 0.8)))  # geometric mean ratio
    assert (c["a"].best, c["a"].candidate) == (pytest.approx(100.0), pytest.approx(math.sqrt(90.0 * 80.0)))
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


def test_global_target_with_a_zero_metric_is_a_verdict_error():
    with pytest.raises(VerdictError):
        run([R({"a": 0.0, "b": 5.0}, {"a": 1.0, "b": 5.0})], target=GLOBAL, hib=True)


def test_a_split_under_a_changing_load_is_divergent_by_the_attempts_own_spread():
    # the demo's transposed kernel on a loaded CPU (2026-11-23): BEST's own runs jumped by ~50%
    # between leases (noisy history), the paired deltas per class were steady
    levels = {"a": 400.0, "b": 230.0, "c": 200.0}  # BEST's level, as in the rounds below
    noisy = [[{k: v * f for k, v in levels.items()} for f in (1.0, 1.5, 0.5, 1.25, 0.75)] for _ in range(3)]
    rounds = [R({"a": 372.3, "b": 209.5, "c": 181.1}, {"a": 225.3, "b": 219.1, "c": 270.4}),
              R({"a": 500.0, "b": 300.0, "c": 250.0}, {"a": 286.6, "b": 302.8, "c": 404.1}),
              R({"a": 372.3, "b": 209.5, "c": 181.1}, {"a": 215.0, "b": 218.6, "c": 294.9})]
    d = run(rounds, target="a", hist=noisy, noise=7.0)
    assert d.target_interval.lo_pct < 0  # the pooled bound alone: not significant
    assert (d.outcome, d.worse_classes) == ("divergent", ["c"])


def test_the_attempts_own_spread_never_keeps_what_it_does_not_split():
    noisy = history(["a", "b"], jitter=0.5, leases=3)
    rounds = [R({"a": 100.0, "b": 100.0}, {"a": 60.0, "b": 101.0}), R({"a": 130.0, "b": 130.0}, {"a": 78.0, "b": 131.0})]
    assert run(rounds, target="a", hist=noisy, noise=7.0, max_rounds=2).outcome == "tie"
