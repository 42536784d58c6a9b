"""The verdict where every run is profiled (rules/verdict.py `profiled_verdict`), on the launch-group
path: a GPU-time loss beyond the floor is `regressed`, also where the script metric did not see it
(on the H100, 2026-11-27, the Triton example's 3.5x and 10% slower candidates were `tie`: groups could
only confirm a win), and `divergent` where the script metric found the target class faster and another
slower. Traces: the replayed do_bench CUPTI traces of tests/rules/conftest.py (`runs`), planted effects
of 10% and more; the script metric: rules.script.decide on planted rounds (no timing on the CPU)."""

from __future__ import annotations

from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.gpu_time import GpuTimeJudgement, keep_outcome
from kopt_mcp.rules.keep import judge_groups
from kopt_mcp.rules.keep_totals import apply_keep_metric
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.verdict import profiled_verdict
from tests.rules.conftest import configs
from tests.rules.test_verdict import R, one, run

POLICY = Policy(noise_pct=1.0, confirmations=2, max_rounds=3)


def _groups(runs, scale: float) -> GpuTimeJudgement:
    keep = judge_groups(runs(configs()), runs(configs(scale, scale)), runs(configs()))
    return GpuTimeJudgement(keep=keep, outcome=keep_outcome(keep), floor=keep.floor)


def test_a_gpu_time_loss_the_script_did_not_see_is_regressed(runs):
    gpu = _groups(runs, 1.10)  # 10% slower kernels; the script metric saw no change
    assert gpu.keep.code == Code.GPU_TIME_LOSS and gpu.keep.upper_bound_pct < -5
    v = profiled_verdict(run([one(100.0, 100.1)]), gpu, POLICY, can_measure=True)
    assert (v.outcome, v.code) == ("regressed", Code.GPU_TIME_LOSS)


def test_a_clear_target_win_with_a_gpu_loss_gets_a_round_then_is_divergent(runs):
    gpu = _groups(runs, 3.5)  # the Triton example's "four rows per program everywhere": 3.5x slower overall
    r = R({"a": 100.0, "b": 100.0}, {"a": 63.0, "b": 666.0})  # the target class a faster, b 6.7x slower
    first = profiled_verdict(run([r], target="a"), gpu, POLICY, can_measure=True)
    assert (first.outcome, first.code) == ("needs_round", Code.NEEDS_ROUND)
    second = profiled_verdict(run([r, r], target="a"), gpu, POLICY, can_measure=True)
    assert (second.outcome, second.code) == ("divergent", Code.SCRIPT_DIVERGENT)
    out_of_rounds = profiled_verdict(run([r], target="a"), gpu, POLICY, can_measure=False)
    assert out_of_rounds.outcome == "regressed"


def test_within_the_floor_a_slower_gpu_time_stays_a_tie(runs):
    gpu = _groups(runs, 1.0)
    assert gpu.outcome == "tie" and gpu.keep.code in (Code.GPU_TIME_NOT_IMPROVED, Code.GPU_TIME_BELOW_FLOOR)
    assert profiled_verdict(run([one(100.0, 100.0)]), gpu, POLICY, can_measure=False).outcome == "tie"


def test_paired_totals_call_a_loss_only_with_its_upper_bound():
    best = [100.0 + 0.05 * (i % 3) for i in range(60)]
    slower = [x * 1.05 for x in best]
    d = apply_keep_metric(sum(best), sum(slower), ["k"], 60, 60, best, slower, min_gain_pct=0.5)
    assert d.code == Code.GPU_TIME_LOSS and d.upper_bound_pct < -4.0
    same = apply_keep_metric(sum(best), sum(best) * 1.001, ["k"], 60, 60, best, [x * 1.001 for x in best],
                             min_gain_pct=0.5)
    assert same.code == Code.GPU_TIME_NOT_IMPROVED  # 0.1% slower: within the floor
    unpaired = apply_keep_metric(sum(best), sum(slower), ["k"], 60, 60, min_gain_pct=0.5)
    assert unpaired.code == Code.GPU_TIME_NOT_IMPROVED and unpaired.upper_bound_pct is None  # no bound: no loss
