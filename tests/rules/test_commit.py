"""The commit gate's re-measure rule with the pair's foreign load (rules/commit.py
`commit_under_load`): a clean pair, or one still better despite load, decides as `still_better`
says; a loaded pair that is no longer better is measured again, then the commit waits."""

from __future__ import annotations

from kopt_mcp.rules.commit import LOAD_REMEASURES, commit_under_load, neutral_keep
from kopt_mcp.rules.decision import Code, Decision

PASS = Decision(outcome="commit", code=Code.STILL_BETTER, reason="re-measured at commit: +10.00%")
FAIL = Decision(outcome="not_kept", code=Code.NO_LONGER_BETTER, reason="no longer better: -3.00%")


def test_a_clean_pair_decides_as_still_better_says():
    assert commit_under_load(PASS, loaded=False, tries_left=2) == PASS
    assert commit_under_load(FAIL, loaded=False, tries_left=2) == FAIL


def test_a_loaded_pair_still_better_commits_and_says_it_ran_under_load():
    d = commit_under_load(PASS, loaded=True, tries_left=0, load_shown="other processes 140% of 2 cores")
    assert (d.outcome, d.code) == ("commit", Code.STILL_BETTER) and "140% of 2 cores" in d.reason


def test_a_loaded_pair_no_longer_better_is_measured_again_then_waits_without_committing():
    tries = [commit_under_load(FAIL, loaded=True, tries_left=n).outcome for n in range(LOAD_REMEASURES, -1, -1)]
    assert tries == ["measure_again"] * LOAD_REMEASURES + ["wait"]
    last = commit_under_load(FAIL, loaded=True, tries_left=0)
    assert last.code == Code.UNDER_LOAD and last.numbers == FAIL.numbers
    assert commit_under_load(FAIL, loaded=True, tries_left=1).code == Code.LOAD_REPEAT


# ---- verdict_stands: the fewest runs at commit (issue 34 item 6) ----

def test_a_tight_verdict_on_the_judged_tree_stands_when_a_confirmation_will_run():
    from kopt_mcp.rules.commit import STANDS_MARGIN, verdict_stands

    # Liger's backward at 16 warps, H200 2026-12-02: lower bound +1.232% against a floor of 0.494%
    d = verdict_stands(1.232, 0.494, fresh_tree=False, confirmable=True)
    assert (d.outcome, d.code) == ("commit", Code.VERDICT_STANDS)
    assert d.numbers == {"lower_bound_pct": 1.232, "floor_pct": 0.494, "margin": STANDS_MARGIN}
    edge = verdict_stands(STANDS_MARGIN * 0.5, 0.5, fresh_tree=False, confirmable=True)
    assert edge.outcome == "commit"


def test_a_verdict_is_measured_again_when_its_bound_is_loose_the_tree_new_or_nothing_confirms():
    from kopt_mcp.rules.commit import verdict_stands

    cases = [verdict_stands(0.9, 0.494, False, True),   # below 2 x the floor
             verdict_stands(1.232, 0.494, True, True),  # formatted or re-applied
             verdict_stands(1.232, 0.494, False, False),  # no ncu / rocprofv3, or confirm = "off"
             verdict_stands(None, 0.494, False, True),  # a keep without a GPU-time bound
             verdict_stands(1.232, None, False, True),
             verdict_stands(1.232, 0.0, False, True)]
    assert [(d.outcome, d.code) for d in cases] == [("measure_again", Code.NEEDS_ROUND)] * 6


# a neutral keep (issue 36 item 9): a tie kept by name, no class worse beyond the 1% noise threshold
FIX = "correctness fix: non-1-D weights"


def test_a_tie_with_a_reason_and_no_class_worse_beyond_noise_is_kept_as_neutral():
    d = neutral_keep(FIX, "tie", True, {"n=1": -0.6, "n=2": 0.4}, -0.1, 1.0, {"n=1": 0.994, "n=2": 1.004})
    assert (d.outcome, d.code, d.numbers["worse_classes"]) == ("commit", Code.NEUTRAL_KEPT, 0)
    assert "(0.99x)" in d.reason  # the ratio beside the percent


def test_a_class_worse_beyond_the_noise_threshold_refuses_the_neutral_keep():
    d = neutral_keep(FIX, "tie", True, {"n=1": -1.5, "n=2": 3.0}, 0.7, 1.0)
    assert (d.outcome, d.code, d.numbers["worse_classes"]) == ("not_kept", Code.NEUTRAL_REFUSED_WORSE_CLASS, 1)
    # the target alone worse beyond noise refuses too; exactly at -noise counts as worse
    assert neutral_keep(FIX, "tie", True, {"a": 0.0}, -1.0, 1.0).code == Code.NEUTRAL_REFUSED_WORSE_CLASS
    assert neutral_keep(FIX, "tie", True, {"a": -0.99}, None, 1.0).code == Code.NEUTRAL_KEPT


def test_a_neutral_keep_needs_a_reason_a_tie_and_the_same_best_in_that_order():
    assert neutral_keep("  ", "tie", True, {}, 0.0, 1.0).code == Code.NEUTRAL_REFUSED_NO_REASON
    for verdict in ("regressed", "divergent", "incorrect", "improved", None):
        assert neutral_keep(FIX, verdict, True, {}, 0.0, 1.0).code == Code.NEUTRAL_REFUSED_NOT_TIE
    assert neutral_keep(FIX, "tie", False, {"a": 5.0}, 0.0, 1.0).code == Code.NEUTRAL_REFUSED_BEST_MOVED
