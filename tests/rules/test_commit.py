"""The commit gate's re-measure rule with the pair's foreign load (rules/commit.py
`commit_under_load`): a clean pair, or one still better despite load, decides as `still_better`
says; a loaded pair that is no longer better is measured again, then the commit waits."""

from __future__ import annotations

from kopt_mcp.rules.commit import LOAD_REMEASURES, commit_under_load
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
