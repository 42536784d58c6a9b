"""NcuProfiler.parse on the two recorded ncu CSV layouts, and its unit handling.

Expected numbers are the fixture's own values (copied here, not recomputed by the parser):
raw page gpu__time_duration.sum in ns, details page "Duration" in nsecond.
"""

from __future__ import annotations

import csv
import io

import pytest

from kopt_mcp.profilers.ncu import NcuProfiler
from tests.profilers.conftest import DETAILS, RAW

# gpu__time_duration.sum (ns) per launch, by short kernel name, from the raw-page fixture.
RAW_NS = {
    "softmax_warp_forward": [41920, 41376, 41152, 41408],
    "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT": [25504, 25504, 25568, 25600],
    "unrolled_elementwise_kernel": [13568, 14240, 13568, 13472],
    "reduce_kernel": [10272, 10240, 10208, 10240],
    "distribution_elementwise_grid_stride_kernel": [13696, 13696],
}
# "Duration" (nsecond), one launch each, from the details-page fixture.
DETAILS_NS = {
    "cuda_compute_flux(int,int*,float*,float*,float*)": 38528,
    "cuda_time_step(int,int,float*,float*,float*,float*)": 12320,
    "cuda_compute_step_factor(int,float*,float*,float*)": 8992,
}


def _by_fragment(trace, fragment):
    (hit,) = [k for k in trace.kernels if fragment in k.name]
    return hit


def test_raw_page_groups_launches_by_kernel_hottest_first(ncu_dir):
    trace = NcuProfiler().parse(ncu_dir(RAW))
    assert trace.backend == "ncu"
    assert len(trace.kernels) == 5
    order = sorted(RAW_NS, key=lambda n: -sum(RAW_NS[n]))
    assert [next(f for f in RAW_NS if f in k.name) for k in trace.kernels] == order
    assert "softmax_warp_forward" in trace.kernels[0].name
    for fragment, launches in RAW_NS.items():
        k = _by_fragment(trace, fragment)
        assert k.calls == len(launches)
        assert k.total_us == pytest.approx(sum(launches) / 1000, rel=1e-12)
        assert k.avg_us == pytest.approx(sum(launches) / 1000 / len(launches), rel=1e-12)
    all_ns = sum(sum(v) for v in RAW_NS.values())
    assert trace.total_gpu_us == pytest.approx(all_ns / 1000, rel=1e-12)  # 391.232 us
    assert sum(k.share_pct for k in trace.kernels) == pytest.approx(100.0)
    assert trace.kernels[0].share_pct == pytest.approx(100 * 165856 / all_ns)
    assert trace.warnings == []  # the "unmodified GPU clocks" note is expected, not a warning


def test_raw_page_launch_config_thousands_separators_and_shared_memory(ncu_dir):
    trace = NcuProfiler().parse(ncu_dir(RAW))
    gemm = _by_fragment(trace, "nvjet_sm90")
    assert (gemm.registers_per_thread, gemm.block_size, gemm.grid_size) == (168, 384, 128)
    assert gemm.shared_mem_per_block_bytes == 213188  # dynamic "213,188" + static "0"
    reduce = _by_fragment(trace, "reduce_kernel")
    assert reduce.shared_mem_per_block_bytes == 16 + 2048  # static + dynamic
    copy = _by_fragment(trace, "unrolled_elementwise_kernel")
    assert copy.grid_size == 8192  # written "8,192"
    assert _by_fragment(trace, "distribution_elementwise").grid_size == 1056  # "1,056"


def test_raw_page_detail_metrics_are_means_over_launches(ncu_dir):
    gemm = _by_fragment(NcuProfiler(detail=True).parse(ncu_dir(RAW)), "nvjet_sm90")
    assert gemm.extra["sm_throughput_pct"] == pytest.approx((72.91 + 72.96 + 72.79 + 72.65) / 4)
    assert gemm.extra["dram_throughput_pct"] == pytest.approx((13.73 + 13.79 + 13.76 + 13.72) / 4)
    assert gemm.extra["achieved_occupancy_pct"] == pytest.approx(14.14)
    assert gemm.extra["occupancy_limit_registers"] == 1
    assert gemm.extra["occupancy_limit_shared_mem"] == 1
    assert gemm.extra["occupancy_limit_warps"] == 5
    assert gemm.extra["occupancy_limit_blocks"] == 32
    assert gemm.extra["waves_per_sm"] == pytest.approx(0.97)


def test_details_page_parses_to_the_same_fields(ncu_dir):
    trace = NcuProfiler().parse(ncu_dir(DETAILS))  # starts with 9 lines of application stdout
    assert [k.name for k in trace.kernels] == list(DETAILS_NS)  # already hottest first
    for k in trace.kernels:
        assert k.calls == 1
        assert k.total_us == pytest.approx(DETAILS_NS[k.name] / 1000, rel=1e-12)
        assert k.avg_us == k.total_us
        assert k.shared_mem_per_block_bytes == 0
        assert (k.block_size, k.grid_size) == (192, 506)
    assert trace.total_gpu_us == pytest.approx(sum(DETAILS_NS.values()) / 1000, rel=1e-12)
    assert sum(k.share_pct for k in trace.kernels) == pytest.approx(100.0)
    assert [k.registers_per_thread for k in trace.kernels] == [60, 22, 20]
    flux = trace.kernels[0]
    assert flux.extra["achieved_occupancy_pct"] == pytest.approx(39.11)
    assert flux.extra["occupancy_limit_registers"] == 5
    assert flux.extra["occupancy_limit_warps"] == 10
    assert flux.extra["occupancy_limit_blocks"] == 32
    assert flux.extra["waves_per_sm"] == pytest.approx(1.27)
    assert flux.extra["sm_throughput_pct"] == pytest.approx(26.02)


@pytest.mark.parametrize(
    ("unit", "value"),
    [("nsecond", "8992"), ("usecond", "8.992"), ("msecond", "0.008992"), ("nsecond", "8,992")],
)
def test_details_duration_units_convert_to_us(ncu_dir, unit, value):
    old = '"Duration","nsecond","8992"'
    new = f'"Duration","{unit}","{value}"'
    trace = NcuProfiler().parse(ncu_dir(DETAILS, lambda t: t.replace(old, new)))
    step = next(k for k in trace.kernels if k.name.startswith("cuda_compute_step_factor"))
    assert step.total_us == pytest.approx(8.992)


def test_raw_page_time_units_convert_to_us(ncu_dir):
    # The same launches with the time column re-expressed in us (1,000x smaller numbers).
    def to_us(text):
        lines = text.splitlines()
        start = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
        rows = list(csv.reader(lines[start:]))
        col = rows[0].index("gpu__time_duration.sum")
        rows[1][col] = "us"
        for row in rows[2:]:
            row[col] = str(float(row[col].replace(",", "")) / 1000)
        buf = io.StringIO()
        csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
        return "\n".join(lines[:start]) + "\n" + buf.getvalue()

    trace = NcuProfiler().parse(ncu_dir(RAW, to_us))
    assert trace.kernels[0].total_us == pytest.approx(165.856)
    assert trace.total_gpu_us == pytest.approx(391.232)


def test_kbyte_shared_memory_is_1000_bytes(ncu_dir):
    # ncu's Kbyte is SI: the recorded summary shows 213,188 bytes as "213.19 Kbyte/block".
    old = '"Dynamic Shared Memory Per Block","byte/block","0"'
    new = '"Dynamic Shared Memory Per Block","Kbyte/block","213.19"'
    trace = NcuProfiler().parse(ncu_dir(DETAILS, lambda t: t.replace(old, new, 1)))
    step = next(k for k in trace.kernels if k.name.startswith("cuda_compute_step_factor"))
    assert step.shared_mem_per_block_bytes == 213190


def test_grid_and_block_given_as_dims_are_multiplied(ncu_dir):
    # Without the launch__grid_size/launch__block_size metrics, the raw page's own
    # "Grid Size" "(2, 64, 1)" and "Block Size" "(32, 4, 1)" columns are used.
    def drop_sizes(text):
        return text.replace('"launch__grid_size"', '"x1"').replace('"launch__block_size"', '"x2"')

    trace = NcuProfiler().parse(ncu_dir(RAW, drop_sizes))
    assert _by_fragment(trace, "nvjet_sm90").grid_size == 2 * 64 * 1
    assert _by_fragment(trace, "softmax_warp_forward").block_size == 32 * 4 * 1
    assert _by_fragment(trace, "reduce_kernel").grid_size == 1 * 512 * 1


def test_every_launch_time_is_kept_in_order_for_the_paired_keep_test(ncu_dir):
    from kopt_mcp.evidence.trace import target_durations

    trace = NcuProfiler().parse(ncu_dir(RAW))
    for k in trace.kernels:
        assert k.durations_us is not None and len(k.durations_us) == k.calls
        assert sum(k.durations_us) == pytest.approx(k.total_us)
        assert "durations_us" not in k.model_dump()  # never serialized into results or the ledger
    hot = trace.kernels[0]
    assert target_durations(trace, [hot.name]) == hot.durations_us
