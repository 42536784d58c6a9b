"""The repair rule: an incorrect candidate gets up to max_repairs repairs, then it is abandoned."""

from __future__ import annotations

from kopt_mcp.rules.repair import RepairState, after_incorrect


def test_first_incorrect_result_starts_repairing():
    outcome, st = after_incorrect(None, attempt=7, target="n=1", hypothesis="vectorize", max_repairs=3)
    assert outcome == "repairing"
    assert st == RepairState(first_attempt=7, target="n=1", hypothesis="vectorize", repairs_used=0)


def test_failing_repairs_count_up():
    _, st = after_incorrect(None, 7, "n=1", "h", 3)
    outcome, st = after_incorrect(st, 8, "n=1", "h", 3)
    assert (outcome, st.repairs_used) == ("repairing", 1)
    outcome, st = after_incorrect(st, 9, "n=1", "h", 3)
    assert (outcome, st.repairs_used) == ("repairing", 2)


def test_repair_keeps_the_first_attempt_and_its_target():
    _, st = after_incorrect(None, 7, "n=1", "vectorize", 3)
    _, st = after_incorrect(st, 8, "n=2", "other", 3)
    assert (st.first_attempt, st.target, st.hypothesis) == (7, "n=1", "vectorize")


def test_third_failing_repair_abandons():
    _, st = after_incorrect(None, 1, "n=1", "h", 3)
    for attempt in (2, 3):
        outcome, st = after_incorrect(st, attempt, "n=1", "h", 3)
        assert outcome == "repairing"
    outcome, st = after_incorrect(st, 4, "n=1", "h", 3)
    assert (outcome, st) == ("abandoned", None)


def test_one_repair_allowed_abandons_after_the_first_repair():
    _, st = after_incorrect(None, 1, "n=1", "h", 1)
    assert after_incorrect(st, 2, "n=1", "h", 1) == ("abandoned", None)


def test_zero_repairs_abandons_at_once():
    assert after_incorrect(None, 1, "n=1", "h", max_repairs=0) == ("abandoned", None)


def test_input_state_is_not_mutated():
    _, st = after_incorrect(None, 1, "n=1", "h", 3)
    after_incorrect(st, 2, "n=1", "h", 3)
    assert st.repairs_used == 0
