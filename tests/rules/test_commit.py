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
