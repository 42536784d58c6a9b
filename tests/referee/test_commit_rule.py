"""The commit step judges with the metric and the rule that decided the verdict (issue 34 item 1):
profiler GPU time per harness unit for a GPU-time keep, the script metric (with the verdict's rounds)
only where the script decided; a refusal carries the rule's own code and status shows it (item 2);
BEST's stored figures come from every run of the kept tree (item 1); the cost is reported (item 6).
Traces are planted format-3 files (tests/replay_units.py) read by the real parser; the toy's script
metric is a list of fixed numbers per run, so no verdict here can be flipped by a loaded machine."""

from __future__ import annotations

import pytest

from kopt_mcp.testing.toy import set_kernel
from tests.conftest import BASE_TIMES
from tests.replay_units import ReplayUnits

UNITS = {"1": 10.0, "2": 20.0}


@pytest.fixture
def units_ref(replayed_ref):
    return lambda **flags: replayed_ref(ReplayUnits, UNIT_US=UNITS, **flags)


def _commit_runs(r) -> list[str]:
    return sorted(p.name.split("-", 1)[1] for p in r.books.store.runs.iterdir() if "-commit-" in p.name)


def test_a_gpu_time_keep_commits_on_gpu_time_though_the_script_metric_reads_a_class_far_slower(units_ref):
    # GPU time 10% faster in every run; the benchmark's own (launch-bound) timer reads class 2 +40% slower
    # in the commit's run: the old commit rule (script metric, "no class worse beyond 1%") refused this
    r = units_ref()
    set_kernel(r.where.workspace_path, {"1": 100.0, "2": [200.0, 280.0]}, UNIT_US={"1": 9.0, "2": 18.0}, CODE="v2")
    v = r.save_and_test("global", "10% faster kernel")
    assert (v.verdict, v.code) == ("improved", "gpu_time_win"), v.reason
    c = r.commit_improvement("10% faster kernel")
    assert c.committed, c.reason
    assert c.code in ("still_better", "unconfirmed")  # no ncu here: the out-of-process confirmation is unavailable
    # the pair's script screen read slower, so (as at the verdict) BEST ran once more: the A/B/A triple decided
    assert _commit_runs(r) == ["commit-best-1", "commit-best-1b", "commit-candidate-1"]
    assert c.cost is not None and c.cost.runs == 3 and c.cost.x_plain_run is not None and c.cost.x_plain_run > 0
    assert "profiler GPU time" in r.where.repo.commit(c.commit).message


def test_a_gpu_time_win_that_vanishes_at_commit_is_refused_with_the_rules_code_and_status_says_so(units_ref):
    # the candidate's GPU time: 9 / 18 us in the verdict's profiled run, back to BEST's 10 / 20 us after it
    r = units_ref()
    set_kernel(r.where.workspace_path, BASE_TIMES, UNIT_US={"1": [9.0, 10.0], "2": [18.0, 20.0]}, CODE="v2")
    v = r.save_and_test("global", "flaky")
    assert (v.verdict, v.code) == ("improved", "gpu_time_win"), v.reason
    c = r.commit_improvement("flaky")
    assert not c.committed
    assert c.code in ("gpu_time_below_floor", "gpu_time_not_improved"), c.reason  # the verdict rule's code
    assert "after formatting" not in c.reason and c.format_status == "not_configured"
    assert _commit_runs(r) == ["commit-best-1", "commit-best-1b", "commit-candidate-1"]  # undecided: BEST again
    st = r.status()
    assert st.phase == "ready" and st.kept == 0
    assert st.last_verdict["commit"] == "refused" and st.last_verdict["commit_code"] == c.code


def test_a_clean_gpu_time_win_commits_on_one_profiled_pair(units_ref):
    r = units_ref()
    set_kernel(r.where.workspace_path, BASE_TIMES, UNIT_US={"1": 9.0, "2": 18.0}, CODE="v2")
    assert r.save_and_test("global", "10% faster kernel").verdict == "improved"
    c = r.commit_improvement("10% faster kernel")
    assert c.committed and _commit_runs(r) == ["commit-best-1", "commit-candidate-1"], c.reason
    assert r.books.state.best.gpu_us == pytest.approx(27.0, rel=0.02)  # 9 + 18 us, pooled over the verdict's and the commit's
    # performance.md and the Stop Summary count the whole operation too: the target plus torch_sum's 1 us per call
    assert r.books.state.best.op_us == pytest.approx(29.0, rel=0.02)
    perf = (r.where.workspace_path / "performance.md").read_text()
    row = next(x for x in perf.splitlines() if "| keep |" in x and "| n=1 (target) |" not in x and "n=2" in x)
    assert "(whole op 19" in row and "whole operation" in perf


def test_a_gpu_time_loss_at_commit_is_refused_as_the_verdict_would_rule_it(units_ref):
    r = units_ref()
    set_kernel(r.where.workspace_path, BASE_TIMES, UNIT_US={"1": [9.0, 12.0], "2": [18.0, 24.0]}, CODE="v2")
    assert r.save_and_test("global", "slower later").verdict == "improved"
    c = r.commit_improvement("slower later")
    assert (c.committed, c.code) == (False, "gpu_time_loss"), c.reason
    assert _commit_runs(r) == ["commit-best-1", "commit-candidate-1"]  # a clear loss needs no third run


def test_best_figures_after_a_keep_are_pooled_over_the_verdicts_and_the_commits_runs(ref):
    # the script metric decided (CPU): 50 us at both verdict rounds, 70 us in the commit's run; the new BEST
    # is the median of the three runs of this tree (50 us), not the one commit-time run
    set_kernel(ref.where.workspace_path, {"1": [50.0, 50.0, 70.0], "2": 200.0})
    v = ref.save_and_test("n=1", "halve n=1")
    assert (v.verdict, v.rounds) == ("improved", 2)
    c = ref.commit_improvement("halve n=1")
    assert c.committed and c.cost is not None and c.cost.runs == 2
    assert ref.books.state.best.metrics["n=1"] == 50.0 and ref.status().best_metrics["n=1"] == 50.0
