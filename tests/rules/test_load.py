"""Which paired rounds count under foreign load (rules/load.py): codes and numbers."""

from __future__ import annotations

import pytest

from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.load import (
    EXCLUSIVE_CORE_PCT,
    ForeignProcess,
    RoundLoad,
    RunLoad,
    count_rounds,
    counted_policy,
    cpu_limit_pct,
    decide_counted,
    under_load,
)
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.script import Round

POLICY = Policy(noise_pct=1.0, idle_cpu_pct=50.0, max_rounds=3)


def cpu(other: float, cores: int = 2) -> RunLoad:
    return RunLoad(device="cpu", other_pct=other, cores=cores, samples=3, duration_s=1.0)


def rnd(*others: float | None) -> RoundLoad:
    return RoundLoad(runs=[None if o is None else cpu(o) for o in others])


CLEAN, LOADED = rnd(3.0, 4.0), rnd(3.0, 71.0)


def test_the_cpu_limit_is_the_gates_threshold_or_a_quarter_core_when_exclusive():
    assert cpu_limit_pct(50.0, False, 2) == 50.0
    assert cpu_limit_pct(100.0, False, 2) is None  # the gate is off
    assert cpu_limit_pct(100.0, True, 2) == EXCLUSIVE_CORE_PCT / 2 == 12.5
    assert cpu_limit_pct(50.0, True, 16) == pytest.approx(25.0 / 16)


def test_a_run_is_under_load_at_the_threshold_or_with_another_compute_process():
    assert not under_load(None, POLICY) and not under_load(cpu(49.9), POLICY) and under_load(cpu(50.0), POLICY)
    exclusive = POLICY.model_copy(update={"exclusive_cpu": True})
    assert under_load(cpu(13.0), exclusive) and not under_load(cpu(12.0), exclusive)
    assert not under_load(cpu(100.0), POLICY.model_copy(update={"idle_cpu_pct": 100.0}))
    gpu = RunLoad(device="gpu", util_pct=99.0)  # our own run's utilization is no foreign load
    assert not under_load(gpu, POLICY)
    assert under_load(gpu.model_copy(update={"processes": [ForeignProcess(pid=400, name="python", mem_mib=874)]}),
                      POLICY)


@pytest.mark.parametrize("rounds, can, code, counted, repeat", [
    ([CLEAN], True, Code.LOAD_CLEAN, [0], False),
    ([rnd(None, None)], True, Code.LOAD_CLEAN, [0], False),  # no figures: nothing to leave out
    ([LOADED], True, Code.LOAD_REPEAT, [], True),
    ([LOADED], False, Code.UNDER_LOAD, [], False),  # the budget is spent: nothing left to decide on
    ([LOADED, CLEAN], True, Code.LOAD_LEFT_OUT, [1], False),
    ([LOADED, LOADED], True, Code.UNDER_LOAD, [], False),  # a round in place of one is not replaced again
    ([CLEAN, LOADED], True, Code.LOAD_REPEAT, [0], True),
    ([CLEAN, LOADED, CLEAN], True, Code.LOAD_LEFT_OUT, [0, 2], False),
    ([LOADED, CLEAN, LOADED], True, Code.LOAD_REPEAT, [1], True),
])
def test_a_round_under_load_is_left_out_and_measured_once_more(rounds, can, code, counted, repeat):
    lr = count_rounds(rounds, POLICY, can)
    assert (lr.code, lr.counted, lr.repeat) == (code, counted, repeat)
    assert lr.left_out == [i for i in range(len(rounds)) if i not in counted] == lr.under_load


def test_the_counted_rounds_get_the_budget_that_is_left():
    lr = count_rounds([LOADED, CLEAN], POLICY, True)
    assert counted_policy(POLICY, lr).max_rounds == 2 and counted_policy(POLICY, lr).script_rounds == 2
    assert counted_policy(POLICY.screen(), lr).script_rounds == 1


def R(best: float, cand: float) -> Round:
    return Round(best={"n=1": best}, candidate={"n=1": cand})


QUIET = [[{"n=1": 100.0 * f} for f in (1.0, 1.001, 0.999, 1.0005, 0.9995)] for _ in range(3)]


def test_a_win_seen_only_under_load_is_not_kept():
    """Round 1: the candidate looked 40% faster while a neighbour loaded BEST's run; the clean rounds
    measure no change: the decision, on them alone, is no keep."""
    rounds = [R(100.0, 60.0), R(100.0, 100.02), R(100.0, 99.98)]
    d, lr = decide_counted(rounds, [LOADED, CLEAN, CLEAN], "n=1", False, POLICY, QUIET, can_measure=False)
    assert (lr.code, lr.counted, d.rounds_under_load) == (Code.LOAD_LEFT_OUT, [1, 2], 1)
    assert d.outcome == "tie" and d.code != Code.SCRIPT_WIN and len(d.target_deltas_pct) == 2
    d, lr = decide_counted(rounds[:1], [LOADED], "n=1", False, POLICY, QUIET, can_measure=True)
    assert (d.needs_round, d.code, d.rounds_under_load, d.keep_interval) == (True, Code.LOAD_REPEAT, 1, None)


def test_every_round_under_load_is_a_tie_that_still_shows_the_numbers():
    d, lr = decide_counted([R(100.0, 60.0), R(100.0, 61.0)], [LOADED, LOADED], "n=1", False, POLICY, QUIET,
                           can_measure=True)
    assert (d.outcome, d.needs_round, d.code, d.rounds_under_load) == ("tie", False, Code.UNDER_LOAD, 2)
    assert d.classes[0].mean_pct == pytest.approx(39.5, abs=0.1)


def test_without_load_figures_the_decision_is_the_plain_rule():
    from kopt_mcp.rules.script import decide

    rounds = [R(100.0, 90.0), R(100.0, 90.1)]
    d, lr = decide_counted(rounds, [rnd(None, None)] * 2, "n=1", False, POLICY, QUIET, can_measure=False)
    plain = decide(rounds, "n=1", False, POLICY, QUIET)
    assert (d.outcome, d.code, d.target_deltas_pct, d.rounds_under_load) == (
        plain.outcome, plain.code, plain.target_deltas_pct, 0) and lr.reason == ""

