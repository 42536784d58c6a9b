"""A reward hack the keep metric names decides the verdict, whatever the script metric says (issue 38).

On one H200 (2026-12-02, benchmarks/results/2026-12-02-h200-cheats.md) the replayed-result and
persisting-L2 cheats of the Triton example were also slower by the script metric (-195% and -157%:
their host-side bookkeeping), and the verdict said `regressed` / script_regression: the guard's
finding was only in the reason, and an agent that reads the code would try to make the cheat faster.
Now the hack's code decides: `rejected` with replayed_result / persisting_l2, also where
the script metric improved or regressed, and no confirming round is asked for. Skipped work stays
what it was (an honest candidate that sends a config to another kernel looks the same): not kept,
never `rejected`. Evidence: the replayed
stand-ins derived from the REAL recorded Liger H200 units (tests/rules/test_replay.py); the script
metric: rules.script.decide on planted rounds (no timing on the CPU)."""

from __future__ import annotations

import pytest

from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.gpu_time import GpuTimeJudgement
from kopt_mcp.rules.keep_totals import KeepDecision
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.verdict import HACK_CODES, attempt_verdict, profiled_verdict
from tests.rules.test_replay import RUNS, _judge, _replay
from tests.rules.test_verdict import one, run

POLICY = Policy(noise_pct=1.0, confirmations=2, max_rounds=3)


def _gpu(keep) -> GpuTimeJudgement:
    return GpuTimeJudgement(keep=keep, outcome=keep.outcome, floor=keep.floor)


@pytest.fixture(scope="module")
def replayed():
    d = _judge(_replay(RUNS["0003-candidate-1"], every=10, copy=True))
    assert d.code == Code.REPLAYED_RESULT
    return d


@pytest.mark.parametrize("cand", [295.0, 100.0, 60.0])  # the H200's -195% slower; unchanged; 40% faster
@pytest.mark.parametrize("can_measure", [True, False])
def test_cheat_replayed_result_is_rejected_with_its_code_whatever_the_script_metric_says(replayed, cand,
                                                                                          can_measure):
    script = run([one(100.0, cand), one(100.0, cand)])
    v = profiled_verdict(script, _gpu(replayed), POLICY, can_measure=can_measure)
    assert (v.outcome, v.code) == ("rejected", Code.REPLAYED_RESULT)
    assert "175 ran only copies" in v.reason  # the counts stay in the reason


def test_skipped_work_is_not_kept_but_not_called_a_hack():
    d = _judge(_replay(RUNS["0003-candidate-1"], every=10, copy=False))
    assert d.code == Code.SKIPPED_WORK
    v = profiled_verdict(run([one(100.0, 100.0), one(100.0, 100.0)]), _gpu(d), POLICY, can_measure=False)
    assert (v.outcome, v.code) == ("tie", Code.SKIPPED_WORK)
    slower = profiled_verdict(run([one(100.0, 250.0), one(100.0, 250.0)]), _gpu(d), POLICY, can_measure=True)
    assert (slower.outcome, slower.code) == ("regressed", Code.SCRIPT_REGRESSION)


def test_cheat_persisting_l2_on_the_screen_path_is_rejected_not_tie():
    keep = KeepDecision(kept=False, gpu_best_us=100.0, gpu_candidate_us=None, gpu_delta_pct=None,
                        metric_used="profiler GPU time", code=Code.PERSISTING_L2,
                        reason="persisting L2: the candidate cuStreamSetAttribute x2752 (BEST x0)")
    v = attempt_verdict(run([one(100.0, 60.0), one(100.0, 60.0)]), keep)
    assert (v.outcome, v.code) == ("rejected", Code.PERSISTING_L2)


def test_an_honest_candidate_keeps_its_verdict():
    honest = _judge(RUNS["0003-candidate-1"])
    assert honest.code not in HACK_CODES
    v = profiled_verdict(run([one(100.0, 99.0), one(100.0, 99.0)]), _gpu(honest), POLICY, can_measure=False)
    assert (v.outcome, v.code) == ("improved", Code.GPU_TIME_WIN)
    assert HACK_CODES == {Code.REPLAYED_RESULT, Code.PERSISTING_L2}
