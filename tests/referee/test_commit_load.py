"""The commit step with the re-measure's foreign load (rules/commit.py `commit_under_load` through
referee/commit_measure.py), on the toy repository while real loops spin on both cores
(kopt_mcp.testing.toy.ForeignLoad; `[gates] idle_cpu_pct` 1%: every loaded run is over the limit, and
a verdict taken without planted load stands whatever else the VM runs, its rounds counted anyway).
The toy's metrics are fixed numbers, so the asserted codes and counts cannot flip on a loaded machine."""

from __future__ import annotations

import pytest

import kopt_mcp.referee.commit_measure as commit_step
from kopt_mcp.errors import RefereeError
from kopt_mcp.rules.commit import LOAD_REMEASURES
from kopt_mcp.rules.decision import Code, Decision
from kopt_mcp.testing.toy import ForeignLoad, make_toy_repo, set_kernel
from tests.conftest import BASE_TIMES


def _improved(tmp_path, make_referee):
    r = make_referee(make_toy_repo(tmp_path / "r", BASE_TIMES, idle_cpu_pct=1.0, extra_gates="cpu_wait_s = 0.0"))
    r.run_benchmark()
    set_kernel(r.where.workspace_path, {"1": 50.0, "2": 100.0})  # a planted 2x win, judged without load
    v = r.save_and_test("global", "halve")
    assert v.verdict == "improved"
    return r


def _commit_runs(r) -> list[str]:
    return sorted(p.name for p in r.books.store.runs.iterdir() if "-commit-" in p.name)


def test_a_re_measure_under_load_that_still_favours_the_candidate_commits_and_says_so(tmp_path, make_referee):
    r = _improved(tmp_path, make_referee)
    with ForeignLoad(2):
        c = r.commit_improvement()
    assert c.committed and c.code == Code.SCRIPT_ONLY  # a CPU device: the script metric decided the keep
    assert "ran under foreign load" in c.reason  # in the result and the commit message
    assert len(_commit_runs(r)) == 2  # one pair: not measured again


def test_a_loaded_re_measure_that_reads_no_longer_better_never_throws_the_keep_away(tmp_path, make_referee,
                                                                                   monkeypatch):
    r = _improved(tmp_path, make_referee)
    real = commit_step.commit_decision
    monkeypatch.setattr(commit_step, "commit_decision", lambda *a, **k: Decision(
        outcome="not_kept", code=Code.NO_LONGER_BETTER, reason="no longer better (planted)"))
    with ForeignLoad(2), pytest.raises(RefereeError, match="Nothing was committed and nothing is lost"):
        r.commit_improvement()
    assert len(_commit_runs(r)) == 2 * (1 + LOAD_REMEASURES)  # the pair, then measured again twice
    assert r.status().phase == "improved"  # still pending
    monkeypatch.setattr(commit_step, "commit_decision", real)
    c = r.commit_improvement()  # the device idle again: the keep lands
    assert c.committed and c.code == Code.SCRIPT_ONLY
