"""The stop rule: max_consecutive_regressions measured regressions in a row stop the session."""

from __future__ import annotations

from kopt_mcp.rules.stop import WINDOW, RegressionCounter, RegressionNote, should_stop


def note(n: int) -> RegressionNote:
    return RegressionNote(attempt=n, at=f"2025-01-01T00:00:{n:02d}+00:00", target="n=1", hypothesis=f"h{n}",
                          change_pct=-2.0 * n)


def regress(counter: RegressionCounter, *attempts: int) -> RegressionCounter:
    for a in attempts:
        counter = counter.regressed(note(a))
    return counter


def test_fresh_counter_does_not_stop():
    assert should_stop(RegressionCounter(), 5) is False


def test_four_regressions_do_not_stop():
    c = regress(RegressionCounter(), 1, 2, 3, 4)
    assert c.consecutive == 4
    assert should_stop(c, 5) is False


def test_five_consecutive_regressions_stop():
    c = regress(RegressionCounter(), 1, 2, 3, 4, 5)
    assert c.consecutive == 5
    assert should_stop(c, 5) is True


def test_a_reset_breaks_the_chain():
    c = regress(RegressionCounter(), 1, 2, 3, 4).reset()
    c = regress(c, 6, 7, 8, 9)
    assert c.consecutive == 4
    assert should_stop(c, 5) is False


def test_reset_zeroes_the_count_and_keeps_the_window():
    c = regress(RegressionCounter(), 1, 2).reset()
    assert c.consecutive == 0
    assert [n.attempt for n in c.window] == [1, 2]


def test_window_keeps_the_last_five():
    c = regress(RegressionCounter(), *range(1, 9))
    assert WINDOW == 5
    assert [n.attempt for n in c.window] == [4, 5, 6, 7, 8]


def test_threshold_comes_from_the_argument():
    c = regress(RegressionCounter(), 1, 2)
    assert should_stop(c, 2) is True
    assert should_stop(c, 3) is False


def test_regressed_returns_a_new_counter():
    c = RegressionCounter()
    c.regressed(note(1))
    assert (c.consecutive, c.window) == (0, [])
