"""The launch-group keep metric on REAL recorded traces of a time-driven harness: four processes
of one unchanged `triton.testing.do_bench` benchmark recorded on an H100 on 2026-11-23
(tests/fixtures/cupti/SOURCE.md). No number here is generated."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kopt_mcp.evidence.groups import target_groups
from kopt_mcp.evidence.trace import trace_groups
from kopt_mcp.profilers.cupti import parse_cupti_dir
from kopt_mcp.rules.keep import group_spread_pct, judge_groups

RUNS = sorted((Path(__file__).resolve().parents[1] / "fixtures" / "cupti" / "h100_dobench").glob("run*"))
XMMA = r"^sm80_xmma_gemm"  # the n=1024 gemm: do_bench launched it 18-91 times per process


@pytest.fixture(scope="module")
def traces():
    assert len(RUNS) == 4
    return [parse_cupti_dir(r) for r in RUNS]


def test_do_bench_totals_spread_where_the_median_launch_does_not(traces):
    groups = [target_groups(trace_groups(t), XMMA)[0] for t in traces]
    calls, totals = [g.calls for g in groups], [g.total_us for g in groups]
    assert max(calls) > 3 * min(calls)  # the harness picks its own repetition count
    assert max(totals) / min(totals) > 3  # so a comparison of totals is meaningless
    medians = [g.median_us for g in groups]
    assert max(medians) / min(medians) < 1.01  # the median launch moves well under 1%
    spreads = [group_spread_pct(a, b, XMMA) for a, b in zip(traces, traces[1:])]
    assert max(spreads) < 1.0, spreads


def test_the_default_target_is_the_gemm_not_do_bench_s_cache_clearing_fill(traces):
    [target] = {g.kernel for g in target_groups(trace_groups(traces[0]), None)}
    assert re.search("sgemm", target) and "Fill" not in target


@pytest.mark.parametrize("first", [0, 1])
def test_an_unchanged_kernel_in_three_real_processes_is_not_kept(traces, first):
    b1, c, b2 = traces[first:first + 3]
    v = judge_groups(b1, c, b2)
    assert not v.kept, v.reason
    assert v.time_driven  # BEST's two processes launched the sgemm a different number of times
    assert abs(v.gpu_delta_pct) < 1.0 and v.spread_pct < 1.0
