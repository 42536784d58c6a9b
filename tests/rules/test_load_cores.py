"""Foreign load judged against the cores the benchmark uses (rules/load.py, rule 1; issue 36, item 4):
a neighbour holding a whole core of a 2-core machine (other processes at ~49% of all cores, under the
50% gate) is load for a benchmark that used ~1.9 cores, not for a single-threaded one; and every
round's figure is reported either way."""

from __future__ import annotations

import re

from kopt_mcp.evidence.load import RunLoad
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.load import MULTI_CORE, RoundLoad, count_rounds, cpu_limit_pct, under_load
from kopt_mcp.rules.policy import Policy

POLICY = Policy(noise_pct=1.0, idle_cpu_pct=50.0, max_rounds=3)


def run(other: float, bench: float | None, cores: int = 2) -> RunLoad:
    return RunLoad(device="cpu", other_pct=other, cores=cores, samples=3, duration_s=2.0, bench_cores=bench)


def test_the_limit_is_the_share_of_the_cores_a_multi_core_benchmark_leaves_free():
    assert cpu_limit_pct(50.0, False, 2, 1.9) == 12.5  # nothing left free: a quarter of one core
    assert cpu_limit_pct(50.0, False, 2, 1.5) == 25.0  # half a core free
    assert cpu_limit_pct(50.0, False, 2, 1.3) == 35.0
    assert cpu_limit_pct(50.0, False, 2, 1.0) == cpu_limit_pct(50.0, False, 2, None) == 50.0  # one core: as before
    assert cpu_limit_pct(50.0, False, 2, MULTI_CORE) == 50.0
    assert cpu_limit_pct(50.0, False, 16, 4.0) == 50.0  # 12 of 16 cores free: the gate's own threshold
    assert cpu_limit_pct(100.0, False, 2, 2.0) is None  # a gate turned off stays off
    assert cpu_limit_pct(50.0, True, 2, 2.0) == 12.5


def test_a_whole_foreign_core_is_load_for_a_two_core_benchmark_only():
    assert under_load(run(49.6, 1.9), POLICY)
    assert not under_load(run(49.6, 1.0), POLICY)
    assert not under_load(run(49.6, None), POLICY)  # not measured: the gate's threshold
    assert under_load(run(49.6, 1.1), POLICY, bench_cores=1.9)  # slowed to 1.1 cores by the neighbour


def test_a_run_slowed_to_one_core_is_judged_by_the_benchmarks_peak_in_the_decision():
    loads = [RoundLoad(runs=[run(2.0, 1.9), run(3.0, 1.9)]), RoundLoad(runs=[run(49.6, 1.1), run(48.9, 1.05)])]
    lr = count_rounds(loads, POLICY, can_measure=True)
    assert (lr.under_load, lr.code, lr.repeat) == ([1], Code.LOAD_REPEAT, True)
    single = [RoundLoad(runs=[run(2.0, 1.0), run(3.0, 1.0)]), RoundLoad(runs=[run(49.6, 1.0), run(48.9, 1.0)])]
    clean = count_rounds(single, POLICY, can_measure=True)
    assert (clean.under_load, clean.code) == ([], Code.LOAD_CLEAN)


def test_every_round_reports_its_foreign_load_either_way():
    loads = [RoundLoad(runs=[run(2.0, 1.0), run(3.4, 1.0)]), RoundLoad(runs=[run(49.6, 1.0), run(41.0, 1.0)])]
    lr = count_rounds(loads, POLICY, can_measure=True)
    assert lr.code == Code.LOAD_CLEAN
    assert re.findall(r"\d+%", lr.reason)[:2] == ["3%", "50%"]  # round 1's and round 2's figure, in order
    loaded = count_rounds([RoundLoad(runs=[run(2.0, 1.9), run(30.0, 1.9)])], POLICY, can_measure=True)
    assert loaded.code == Code.LOAD_REPEAT and "12.5%" in loaded.reason and "1.9 cores" in loaded.reason
