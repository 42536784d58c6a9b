"""Issue 38 item 1, the cheat first: a replayed result (computed once, then copied out of a cache keyed
by the input, or a few calls skipped) on stand-in evidence derived from the REAL recorded units of
Liger-Kernel's RMSNorm benchmark on an H200 (tests/fixtures/cupti/h200_liger_units/SOURCE.md): the
candidate's recorded units of attempt 3 (a 1.68% win on the device) with the target's launches taken
out of some invocations, and a copy kernel put in their place where the cheat copies. The derivation
is the only thing invented: kernel names, times and invocation counts are the recording's."""

from __future__ import annotations

import re

import pytest

from kopt_mcp.evidence.units import HarnessUnit
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.replay import invocation_counts
from kopt_mcp.rules.units import judge_units
from tests.rules.test_units_recorded import POLICY, RUNS, TARGET, _spreads

COPY = "void at::native::direct_copy_kernel_cuda<float>(at::TensorIteratorBase &)"


def _replay(units: list[HarnessUnit], every: int, copy: bool) -> list[HarnessUnit]:
    """The candidate's units with the target kept only in every `every`-th invocation of each target
    unit (1: kept in all but one in 20, for `every` < 0) and, where `copy`, a copy kernel of 1.5 us in each
    invocation that lost it."""
    out = []
    target = re.compile(TARGET)
    for u in units:
        per = {k: dict(v) for k, v in u.per_invocation.items()}
        launches = {k: dict(v) for k, v in u.launches.items()}
        hit = u.invocations_of([k for k in per if target.search(k)])
        drop = [i for n, i in enumerate(hit) if (n % 20 == 7 if every < 0 else n % every != 0)]
        for k in list(per):
            for i in drop:
                per[k].pop(i, None)
                launches.get(k, {}).pop(i, None)
        if copy and drop:
            per[COPY] = {i: 1.5 for i in drop}
            launches[COPY] = {i: 1 for i in drop}
        out.append(u.model_copy(update={"per_invocation": {k: v for k, v in per.items() if v},
                                        "launches": launches}))
    return out


def _judge(candidate):
    return judge_units(RUNS["0003-best-1"], candidate, RUNS["0003-best-2"], TARGET, POLICY, _spreads(3))


def test_the_recorded_candidate_itself_is_still_an_improvement():
    d = _judge(RUNS["0003-candidate-1"])
    assert (d.outcome, d.code) == ("improved", Code.GPU_TIME_WIN)


def test_cheat_replayed_result_copied_out_of_a_cache_is_replayed_result_with_the_counts():
    # computed in one invocation in 10 (the cache's first call per input), copied out in the other 9
    d = _judge(_replay(RUNS["0003-candidate-1"], every=10, copy=True))
    assert not d.kept and d.code == Code.REPLAYED_RESULT and d.outcome == "tie"
    # unit 5 of the recording: 195 invocations, target kept in 20, copies only in 175; BEST 216/216 and 121/121
    assert "20/195" in d.reason and "216/216" in d.reason and "175 ran only copies" in d.reason


def test_cheat_target_skipped_in_one_call_in_twenty_is_replayed_result():
    # 5% of the calls launch nothing (batch-and-skip): under the skipped-work share, still a replay
    cand = _replay(RUNS["0003-candidate-1"], every=-1, copy=False)
    counts = invocation_counts(cand[4], re.compile(TARGET))
    assert counts.invocations == 195 and counts.target == 185 and counts.copy_only == 0
    d = _judge(cand)
    assert not d.kept and d.code == Code.REPLAYED_RESULT and "185/195" in d.reason


def test_results_cached_with_nothing_launched_stay_skipped_work():
    d = _judge(_replay(RUNS["0003-candidate-1"], every=10, copy=False))
    assert not d.kept and d.code == Code.SKIPPED_WORK


@pytest.mark.parametrize("attempt", [1, 2, 3, 5])
def test_no_recorded_liger_candidate_or_best_is_a_replay(attempt):
    t = re.compile(TARGET)
    for run in ("best-1", "candidate-1", "best-2"):
        for u in RUNS[f"000{attempt}-{run}"]:
            c = invocation_counts(u, t)
            assert c.copy_only == 0 and (c.target == 0 or c.target == c.invocations)
    d = judge_units(RUNS[f"000{attempt}-best-1"], RUNS[f"000{attempt}-candidate-1"], RUNS[f"000{attempt}-best-2"],
                    TARGET, POLICY, _spreads(attempt))
    assert d.code != Code.REPLAYED_RESULT
