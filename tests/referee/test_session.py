"""The session state machine: which tool each phase allows, and what to call instead."""

from __future__ import annotations

import pytest

from kopt_mcp.errors import SessionError
from kopt_mcp.session import NOISE_GROUPS_KEPT, Best, Phase, SessionState, next_actions, require

TOOLS = ["save_and_test", "commit_improvement", "revert_to_best", "run_benchmark",
         "kernel_trace_analysis", "warm_up_harness", "find_idle_gpu"]

ALLOWED = {
    Phase.needs_baseline: {"revert_to_best", "run_benchmark", "kernel_trace_analysis", "warm_up_harness",
                           "find_idle_gpu"},
    Phase.ready: {"save_and_test", "revert_to_best", "run_benchmark", "kernel_trace_analysis",
                  "warm_up_harness", "find_idle_gpu"},
    Phase.repairing: {"save_and_test", "revert_to_best", "run_benchmark", "kernel_trace_analysis",
                      "warm_up_harness", "find_idle_gpu"},
    Phase.improved: {"commit_improvement", "revert_to_best", "run_benchmark", "kernel_trace_analysis",
                     "warm_up_harness", "find_idle_gpu"},
    Phase.stopped: set(),
}

# what the refusal must tell the caller to do instead, per phase
INSTEAD = {
    Phase.needs_baseline: "call run_benchmark first",
    Phase.ready: "call save_and_test",
    Phase.repairing: "call save_and_test, or revert_to_best",
    Phase.improved: "call commit_improvement to keep it, or revert_to_best",
}


def state(phase: Phase, **kw) -> SessionState:
    return SessionState(tag="t1", branch="kernel-opt/t1", repo="/r", workspace="/r/.kopt/worktrees/t1",
                        best_worktree="/r/.kopt/worktrees/t1-best", config_path="/r/kopt.toml",
                        config_sha256="0" * 64, phase=phase, best=Best(commit="abcdef0123456789" * 2 + "abcdef01"),
                        **kw)


ALLOWED_CASES = [(p, t) for p in ALLOWED for t in TOOLS if t in ALLOWED[p]]
REFUSED_CASES = [(p, t) for p in ALLOWED for t in TOOLS if t not in ALLOWED[p] and p != Phase.stopped]


def test_new_state_needs_a_baseline():
    s = SessionState(tag="t", branch="b", repo="r", workspace="w", best_worktree="bw", config_path="c",
                     config_sha256="x", best=Best(commit="c"))
    assert s.phase == Phase.needs_baseline
    assert (s.next_attempt, s.kept, s.regressions.consecutive) == (1, 0, 0)


@pytest.mark.parametrize(("phase", "tool"), ALLOWED_CASES, ids=lambda v: getattr(v, "value", v))
def test_allowed_tool_passes(phase, tool):
    require(state(phase), tool)


@pytest.mark.parametrize(("phase", "tool"), REFUSED_CASES, ids=lambda v: getattr(v, "value", v))
def test_refused_tool_names_what_to_call_instead(phase, tool):
    with pytest.raises(SessionError) as ei:
        require(state(phase), tool)
    msg = str(ei.value)
    assert tool in msg and phase.value in msg
    assert INSTEAD[phase] in msg


def test_save_and_test_before_baseline_is_refused():
    with pytest.raises(SessionError, match="run_benchmark"):
        require(state(Phase.needs_baseline), "save_and_test")


def test_second_candidate_while_improved_is_refused():
    with pytest.raises(SessionError, match="commit_improvement"):
        require(state(Phase.improved), "save_and_test")


def test_commit_without_improvement_is_refused():
    with pytest.raises(SessionError, match="not allowed"):
        require(state(Phase.ready), "commit_improvement")


@pytest.mark.parametrize("tool", TOOLS)
def test_stopped_refuses_every_tool_with_the_stop_reason(tool):
    s = state(Phase.stopped, stop_reason="5 consecutive regressions", stopped_at="2025-01-01T00:00:00+00:00")
    with pytest.raises(SessionError) as ei:
        require(s, tool)
    msg = str(ei.value)
    assert "5 consecutive regressions" in msg
    assert "2025-01-01T00:00:00+00:00" in msg
    assert s.best.commit[:12] in msg
    assert "new session" in msg


@pytest.mark.parametrize(
    ("phase", "actions"),
    [
        (Phase.needs_baseline, ["run_benchmark"]),
        (Phase.ready, ["save_and_test", "kernel_trace_analysis", "run_benchmark"]),
        (Phase.repairing, ["save_and_test", "revert_to_best"]),
        (Phase.improved, ["commit_improvement", "revert_to_best"]),
        (Phase.stopped, []),
    ],
)
def test_next_actions_per_phase(phase, actions):
    assert next_actions(state(phase)) == actions


@pytest.mark.parametrize("phase", list(Phase))
def test_next_actions_are_all_allowed(phase):
    for tool in next_actions(state(phase)):
        require(state(phase), tool)


def test_state_roundtrips_through_json():
    s = state(Phase.improved, next_attempt=9, kept=2)
    assert SessionState.model_validate_json(s.model_dump_json()) == s


def test_gpu_spreads_are_relative_to_the_pair_mean_and_keep_the_latest():
    s = SessionState(tag="t", branch="b", repo="r", workspace="w", best_worktree="bw", config_path="c",
                     config_sha256="x", best=Best(commit="abc"))
    assert s.record_gpu_spread(1000.0, 1010.0) == pytest.approx(10.0 / 1005.0 * 100.0)
    assert s.record_gpu_spread(1001.0, 1001.0) == 0.0
    assert s.gpu_spreads_pct == pytest.approx([10.0 / 1005.0 * 100.0, 0.0])
    for _ in range(30):
        s.record_gpu_spread(1000.0, 1001.0)
    assert len(s.gpu_spreads_pct) == 20 and s.gpu_spreads_pct[0] == pytest.approx(1.0 / 1000.5 * 100.0)
    with pytest.raises(ValueError, match="positive"):
        s.record_gpu_spread(0.0, 1.0)


def test_outbox_is_empty_by_default_and_roundtrips_with_the_state():
    s = state(Phase.ready)
    assert s.outbox == []
    s.outbox.append({"event": "attempt", "id": "abc", "attempt": 1, "verdict": "tie"})
    again = SessionState.model_validate_json(s.model_dump_json())
    assert again.outbox == [{"event": "attempt", "id": "abc", "attempt": 1, "verdict": "tie"}]


def test_a_state_saved_before_the_outbox_existed_still_loads():
    data = state(Phase.improved).model_dump(mode="json")
    del data["outbox"]
    assert SessionState.model_validate(data).outbox == []


def test_spreads_are_recorded_from_times_or_directly_and_bad_values_refused():
    from kopt_mcp.rules.percent import spread_pct
    from kopt_mcp.session import Best, SessionState

    s = SessionState(tag="t", branch="b", repo="r", workspace="w", best_worktree="bw", config_path="c",
                     config_sha256="x", best=Best(commit="0" * 40))
    assert s.record_gpu_spread(100.0, 102.0) == pytest.approx(spread_pct(100.0, 102.0)) == pytest.approx(200 / 101)
    assert s.record_spread_pct(0.05) == 0.05
    assert s.gpu_spreads_pct == pytest.approx([200 / 101, 0.05])
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite percentage"):
            s.record_spread_pct(bad)
    with pytest.raises(ValueError, match="positive"):
        s.record_gpu_spread(0.0, 1.0)
    assert len(s.gpu_spreads_pct) == 2  # refused values change nothing


# -- phase transitions: methods of SessionState, each tested directly ------------------------------

def _pending(n: int = 3):
    from kopt_mcp.session import PendingImprovement

    return PendingImprovement(attempt=n, tree="t" * 40, target="global", hypothesis="h", candidate_metrics={"1": 90.0},
                              candidate_gpu_us=9.0, kernels=["k"], target_delta_pct=10.0, metric_used="script metric")


def _note(n: int):
    from kopt_mcp.rules.stop import RegressionNote

    return RegressionNote(attempt=n, at="2026-01-01T00:00:00+00:00", target="global", hypothesis="h", change_pct=-5.0)


def test_jobs_and_attempt_numbers():
    s = state(Phase.ready)
    assert (s.new_attempt(), s.new_attempt(), s.next_attempt) == (1, 2, 3)
    s.begin_job("save_and_test", attempt=2)
    assert s.in_progress["tool"] == "save_and_test" and s.in_progress["attempt"] == 2 and s.in_progress["since"]
    s.begin_job("baseline", base="abc")
    assert s.in_progress["base"] == "abc" and "attempt" not in s.in_progress
    s.end_job()
    assert s.in_progress is None


def test_baseline_sets_best_then_commit_moves_to_ready():
    s = state(Phase.needs_baseline)
    s.begin_job("baseline", base=s.best.commit)
    s.baseline_recorded({"1": 100.0}, 12.5, ["k"])
    assert (s.best.metrics, s.best.gpu_us, s.best.kernels, s.phase) == ({"1": 100.0}, 12.5, ["k"], Phase.needs_baseline)
    s.baseline_committed("b" * 40)
    assert (s.best.commit, s.phase, s.in_progress) == ("b" * 40, Phase.ready, None)
    with pytest.raises(SessionError, match="once"):
        s.baseline_recorded({"1": 1.0}, None, [])


def test_incorrect_then_improved_then_adopted():
    from kopt_mcp.rules.repair import RepairState

    s = state(Phase.ready, regressions=state(Phase.ready).regressions.regressed(_note(1)))
    s.repairing(RepairState(first_attempt=2, target="global", hypothesis="h"))
    assert s.phase == Phase.repairing and s.repair.first_attempt == 2
    s.improved(_pending(3))
    assert (s.phase, s.repair, s.pending.attempt) == (Phase.improved, None, 3)
    old = s.best.commit
    assert s.adopted("c" * 40, {"1": 90.0}, 9.0) == old
    assert (s.phase, s.pending, s.best.commit, s.best.metrics, s.best.gpu_us, s.kept) == (
        Phase.ready, None, "c" * 40, {"1": 90.0}, 9.0, 1)
    assert s.regressions.consecutive == 0 and len(s.regressions.window) == 1  # the window stays


@pytest.mark.parametrize("phase", [Phase.repairing, Phase.improved, Phase.ready])
def test_dropping_a_candidate_returns_to_ready(phase):
    s = state(phase, pending=_pending() if phase == Phase.improved else None)
    s.dropped_candidate()
    assert (s.phase, s.pending, s.repair) == (Phase.ready, None, None)


@pytest.mark.parametrize("phase", [Phase.needs_baseline, Phase.stopped])
def test_dropping_a_candidate_keeps_needs_baseline_and_stopped(phase):
    s = state(phase)
    s.dropped_candidate()
    assert s.phase == phase


def test_regressions_count_and_reset_and_verdicts_are_remembered():
    s = state(Phase.ready)
    for n in range(1, 8):
        s.regressed(_note(n))
    assert s.regressions.consecutive == 7 and [x.attempt for x in s.regressions.window] == [3, 4, 5, 6, 7]
    s.reset_regressions()
    assert s.regressions.consecutive == 0
    s.ruled(7, "regressed", "global", "slower")
    assert (s.last.attempt, s.last.verdict, s.last.reason) == (7, "regressed", "slower")


def test_commit_refused_drops_the_pending_candidate_and_resets():
    s = state(Phase.improved, pending=_pending())
    s.regressed(_note(1))
    s.begin_job("commit_improvement", attempt=3)
    s.commit_refused()
    assert (s.phase, s.pending, s.in_progress, s.regressions.consecutive) == (Phase.ready, None, None, 0)


def test_stop_is_terminal_and_happens_once():
    s = state(Phase.ready)
    assert s.stopped_now("5 consecutive measured regressions") is True
    at = s.stopped_at
    assert (s.phase, s.stop_reason) == (Phase.stopped, "5 consecutive measured regressions") and at
    assert s.stopped_now("no idle GPU") is False
    assert (s.stop_reason, s.stopped_at) == ("5 consecutive measured regressions", at)


def test_best_record_holds_only_the_groups_of_best_commits_own_tree():
    s = state(Phase.ready)
    s.record_best_runs([{"x": 100.0}, {"x": 101.0}])  # the baseline
    s.record_best_runs([{"x": 100.5}])  # one run adds nothing
    s.record_best_runs([{"x": 99.0}, {"x": 100.0}])  # an attempt's BEST runs
    assert s.best_groups == 2 and s.best_record() == s.noise_history
    s.record_best_runs([{"x": 80.0}, {"x": 81.0}], new_best=True)  # a keep: the new BEST's first group
    assert s.best_record() == [[{"x": 80.0}, {"x": 81.0}]] and len(s.noise_history) == 3
    s.record_best_runs([], new_best=True)  # re-applied onto a newer BEST: no run of its tree
    assert s.best_groups == 0 and s.best_record() == []
    s.record_best_runs([{"x": 70.0}, {"x": 71.0}])
    s.best_moved("b" * 40, {"x": 60.0}, None, [])  # another slot moved BEST: these runs are of the older one
    assert s.best_record() == [] and len(s.noise_history) == 4
    for i in range(12):
        s.record_best_runs([{"x": 60.0 + i}, {"x": 60.5 + i}])
    assert s.best_groups == 12 and s.best_record() == s.noise_history[4:]
    for i in range(NOISE_GROUPS_KEPT):  # the history is trimmed to its latest groups; the record never outgrows it
        s.record_best_runs([{"x": 50.0 + i}, {"x": 50.5 + i}])
    assert s.best_groups == len(s.noise_history) == NOISE_GROUPS_KEPT and s.best_record()[0] == [{"x": 50.0}, {"x": 50.5}]
