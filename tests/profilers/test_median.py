"""KernelStat.median_us: the median per-launch GPU time, on the recorded ncu and CUPTI outputs.

Expected medians come from the fixtures' own per-launch values (copied in test_ncu_parse.RAW_NS /
DETAILS_NS from the files), not from the parser.
"""

from __future__ import annotations

import shutil
import statistics
from pathlib import Path

import pytest

from kopt_mcp.commands.demo import kernel_line
from kopt_mcp.evidence.groups import launch_median_us
from kopt_mcp.evidence.names import short_kernel_name
from kopt_mcp.profilers.cupti import parse_cupti_dir
from kopt_mcp.profilers.ncu import NcuProfiler
from kopt_mcp.results import KernelRow
from tests.profilers.conftest import DETAILS, RAW
from tests.profilers.test_ncu_parse import DETAILS_NS, RAW_NS

CUPTI = Path(__file__).resolve().parents[1] / "fixtures" / "cupti" / "h100_torch_matmul" / "cupti-438.json"


def test_ncu_raw_page_median_is_the_median_of_the_recorded_launch_times(ncu_dir):
    trace = NcuProfiler(detail=True).parse(ncu_dir(RAW))
    for fragment, launches in RAW_NS.items():
        (k,) = [k for k in trace.kernels if fragment in k.name]
        assert k.median_us == pytest.approx(statistics.median(launches) / 1000, rel=1e-12)
        assert k.median_us == statistics.median(k.durations_us)
    softmax = trace.kernels[0]
    assert softmax.median_us == pytest.approx((41376 + 41408) / 2 / 1000)  # even count: mean of the middle two
    assert softmax.median_us != pytest.approx(softmax.avg_us)  # a field of its own, not the mean again


def test_ncu_details_page_one_launch_median_is_that_launch(ncu_dir):
    for k in NcuProfiler().parse(ncu_dir(DETAILS)).kernels:
        assert k.median_us == pytest.approx(DETAILS_NS[k.name] / 1000, rel=1e-12)


def test_cupti_trace_without_per_launch_times_has_no_median(tmp_path):
    # this recording predates the injector's durations_ns: aggregates only, so no median
    shutil.copy(CUPTI, tmp_path / CUPTI.name)
    trace = parse_cupti_dir(tmp_path)
    assert all(k.durations_us is None and k.median_us is None for k in trace.kernels)
    assert launch_median_us(None) is None and launch_median_us([]) is None


def test_median_is_serialized_and_reaches_the_trace_report_row(ncu_dir):
    k = NcuProfiler().parse(ncu_dir(RAW)).kernels[0]
    dumped = k.model_dump()
    assert dumped["median_us"] == k.median_us and "durations_us" not in dumped
    row = KernelRow(**dumped, short_name=short_kernel_name(k.name))  # as kernel_trace_analysis builds it
    assert row.median_us == k.median_us
    assert row.model_dump(mode="json")["median_us"] == k.median_us


def test_demo_line_shows_the_median_only_where_there_is_one(ncu_dir, tmp_path):
    k = NcuProfiler().parse(ncu_dir(RAW)).kernels[0]
    row = KernelRow(**k.model_dump(), short_name=short_kernel_name(k.name)).model_dump()
    assert "median 41.39 us/launch" in kernel_line(row)
    shutil.copy(CUPTI, tmp_path / CUPTI.name)
    c = parse_cupti_dir(tmp_path).kernels[0]
    line = kernel_line(KernelRow(**c.model_dump(), short_name=short_kernel_name(c.name)).model_dump())
    assert "median" not in line and "20 calls" in line
