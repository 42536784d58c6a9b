"""The smallest detectable effect (rules/detectable.py, issue 36 item 11): numbers checked against the
formula by hand (scipy's t and normal quantiles), and the round proposal at its edges."""

from __future__ import annotations

import math

import pytest
from scipy.stats import norm
from scipy.stats import t as student_t

from kopt_mcp.rules.detectable import detectable, rounds_for
from kopt_mcp.rules.policy import Policy

POLICY = Policy(noise_pct=1.0)  # max_rounds 3, confidence 0.995, confirmations 2


def test_three_rounds_at_a_10pct_spread_detect_about_a_third():
    d = detectable(10.0, 2, 3, POLICY)
    # 3 rounds: keeps may look after rounds 2 and 3, so each look is at 1 - 0.005 / 2; df 2 + 2 x 2
    assert (d.rounds, d.df, d.confidence) == (3, 6, pytest.approx(0.9975))
    log = (student_t.ppf(0.9975, 6) + norm.ppf(0.8)) * math.sqrt(2) * 10.0 / math.sqrt(3)
    assert d.log_pct == pytest.approx(log)
    assert d.ratio_x == pytest.approx(math.exp(log / 100))
    assert d.effect_pct == pytest.approx(100 * (1 - math.exp(-log / 100)))  # lower is better: less time
    assert 30.0 < d.effect_pct < 40.0  # issue 36: "a win needs about 25%" at 10-20% spread per round


def test_more_rounds_detect_less_and_higher_is_better_reads_the_same_ratio():
    effects = [detectable(10.0, 2, n, POLICY).effect_pct for n in (2, 3, 5, 10)]
    assert effects == sorted(effects, reverse=True)
    lo, hi = detectable(10.0, 2, 5, POLICY), detectable(10.0, 2, 5, POLICY, higher_is_better=True)
    assert lo.ratio_x == pytest.approx(hi.ratio_x) and hi.effect_pct == pytest.approx(100 * (hi.ratio_x - 1))


def test_one_round_looks_once_and_without_any_degree_of_freedom_detects_nothing():
    d = detectable(10.0, 2, 1, POLICY)  # a verdict of 1 round may keep after it: one look at 99.5%
    assert (d.df, d.confidence) == (2, pytest.approx(0.995)) and d.effect_pct > detectable(10.0, 2, 2, POLICY).effect_pct
    none = detectable(10.0, 0, 1, POLICY)  # no repeated run: the spread is not measurable
    assert (none.df, none.effect_pct, none.ratio_x) == (0, None, None)


def test_rounds_for_a_wanted_gain_is_the_fewest_that_detect_it_within_the_bound():
    n = rounds_for(25.0, 10.0, 2, POLICY, 10)
    assert n is not None and detectable(10.0, 2, n, POLICY).effect_pct <= 25.0
    assert detectable(10.0, 2, n - 1, POLICY).effect_pct > 25.0
    assert rounds_for(5.0, 10.0, 2, POLICY, 10) is None  # beyond 10 rounds
    with pytest.raises(ValueError, match="> 0"):
        rounds_for(0.0, 10.0, 2, POLICY, 10)
    with pytest.raises(ValueError):
        detectable(-1.0, 2, 3, POLICY)
