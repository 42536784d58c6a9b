"""The session state machine: which tool each phase allows, and what to call instead."""

from __future__ import annotations

import pytest

from kopt_mcp.session import Best, Phase, SessionError, SessionState, next_actions, require

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
    from kopt_mcp.session import Best, SessionState, spread_pct

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
