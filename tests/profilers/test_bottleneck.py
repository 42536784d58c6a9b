"""Bottleneck classes of the kernels in the recorded ncu and rocprofv3 fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from kopt_mcp.evidence.trace import KernelStat
from kopt_mcp.profilers.bottleneck import AMD_HIGH_VGPR, BOUND_PCT, classify
from kopt_mcp.profilers.ncu import parse_ncu_csv
from kopt_mcp.profilers.rocprof import parse_rocprof_csv
from tests.profilers.conftest import DETAILS, RAW

ROC = Path(__file__).resolve().parents[1] / "fixtures" / "rocprofv3"


def by_prefix(trace, prefix: str) -> KernelStat:
    return next(k for k in trace.kernels if prefix in k.name)


def test_thresholds():
    assert BOUND_PCT == 60.0 and AMD_HIGH_VGPR == 128


def test_h200_raw_page_gemm_is_compute_bound():
    nvjet = by_prefix(parse_ncu_csv(RAW), "nvjet_sm90")
    b = classify(nvjet)
    # SM 72.8% >= 60 and DRAM 13.75%
    assert b.kind == "compute-bound"
    assert b.evidence["sm_throughput_pct"] == pytest.approx(72.8275)
    assert b.evidence["dram_throughput_pct"] == pytest.approx(13.75)


def test_h200_raw_page_softmax_is_latency_bound_limited_by_registers():
    softmax = by_prefix(parse_ncu_csv(RAW), "softmax_warp_forward")
    b = classify(softmax)
    # SM 45.0%, DRAM 8.7%: both under 60; block limits: registers 6 < warps 16 < smem/blocks 32
    assert b.kind == "latency/occupancy-bound"
    assert b.evidence["occupancy_limit_registers"] == 6.0
    assert b.evidence["achieved_occupancy_pct"] == pytest.approx(21.3, abs=0.05)
    assert min(v for k, v in b.evidence.items() if k.startswith("occupancy_limit_")) == 6.0  # registers limit it
    # the advice is the product (get_trace shows it): it names the limiter and calls the occupancy low
    assert "occupancy limiter: registers (6 blocks/SM)" in b.reason and "21.3% (low)" in b.reason


def test_h200_raw_page_copy_elementwise_is_latency_bound_at_full_occupancy():
    copy = by_prefix(parse_ncu_csv(RAW), "unrolled_elementwise_kernel")
    b = classify(copy)
    # SM 48.2%, DRAM 12.9%; registers and warps both allow 16 blocks/SM; achieved occupancy 84.9%
    assert b.kind == "latency/occupancy-bound"
    assert b.evidence["occupancy_limit_registers"] == b.evidence["occupancy_limit_warps"] == 16.0
    # the advice is the product: occupancy is already at the hardware maximum, so it is not the lever
    assert "hardware warp/block maximum" in b.reason


def test_h200_raw_page_every_kernel():
    kinds = {k.name.split("(")[0][:40]: classify(k).kind for k in parse_ncu_csv(RAW).kernels}
    assert sorted(kinds.values()) == sorted([
        "latency/occupancy-bound",  # softmax
        "compute-bound",            # nvjet GEMM
        "latency/occupancy-bound",  # direct copy elementwise
        "latency/occupancy-bound",  # reduce (SM 23.5, DRAM 34.3)
        "compute-bound",            # randn distribution kernel (SM 64.1, DRAM 0.02)
    ])


def test_details_page_time_step_is_memory_bound():
    trace = parse_ncu_csv(DETAILS)
    b = classify(by_prefix(trace, "cuda_time_step"))
    # DRAM 66.24% >= 60 and above SM 5.22%
    assert b.kind == "memory-bound" and b.evidence["dram_throughput_pct"] == pytest.approx(66.24, abs=0.01)
    assert classify(by_prefix(trace, "cuda_compute_flux")).kind == "latency/occupancy-bound"


def test_memory_wins_a_tie_above_threshold():
    k = KernelStat(name="k", calls=1, total_us=1, avg_us=1, share_pct=100,
                   extra={"sm_throughput_pct": 80.0, "dram_throughput_pct": 80.0})
    assert classify(k).kind == "memory-bound"


def test_without_detail_metrics_it_is_unknown():
    k = KernelStat(name="k", calls=1, total_us=1, avg_us=1, share_pct=100, registers_per_thread=32)
    b = classify(k)
    assert b.kind == "unknown" and b.evidence == {}
    assert "detail" in b.reason  # the advice is the product: profile in detail mode


@pytest.mark.parametrize("fixture", [
    "rocprofiler_sdk_docs_kernel_trace.csv", "hpctraining_rocpd2csv_out_kernel_trace.csv",
    "rocprofiler_sdk_docs_counter_collection.csv",
])
def test_rocprof_fixtures_small_kernels_are_unknown_and_say_what_would_decide(fixture):
    for kernel in parse_rocprof_csv(ROC / fixture).kernels:
        b = classify(kernel)
        assert b.kind == "unknown"
        assert b.evidence["scratch_bytes"] == 0
        assert "rocprofv3 --pmc" in b.reason  # the advice is the product: what would decide it
        assert b.evidence["vgpr_total"] <= 32 and b.evidence["est_waves_per_simd_by_vgpr"] == 8


def test_rocprof_legacy_schema_has_no_vgpr_and_says_so():
    b = classify(parse_rocprof_csv(ROC / "rocprofiler_sdk_2024_kernel_trace_legacy_schema.csv").kernels[0])
    assert b.kind == "unknown" and "vgpr_total" not in b.evidence


def test_rocprof_stats_only_is_unknown():
    b = classify(parse_rocprof_csv(ROC / "hpctraining_jacobi_hip_kernel_stats.csv").kernels[0])
    assert b.kind == "unknown" and b.evidence == {}


def _edited_docs_kernel(**changes: float) -> KernelStat:
    """The docs-trace divide_kernel (arch 12, accum 4, sgpr 16) with some resources edited."""
    k = next(k for k in parse_rocprof_csv(ROC / "rocprofiler_sdk_docs_kernel_trace.csv").kernels
             if k.name.startswith("divide_kernel"))
    return k.model_copy(update={"extra": {**k.extra, **changes}})


def test_amd_scratch_means_spills():
    b = classify(_edited_docs_kernel(scratch_bytes=64.0))
    assert b.kind == "latency/occupancy-bound" and b.evidence["scratch_bytes"] == 64.0
    assert "spill" in b.reason  # the advice is the product: registers spill, cut register pressure


def test_amd_high_vgpr_limits_occupancy():
    b = classify(_edited_docs_kernel(arch_vgpr=128.0, accum_vgpr=128.0))
    assert b.kind == "latency/occupancy-bound"
    assert b.evidence["vgpr_total"] == 256 and b.evidence["est_waves_per_simd_by_vgpr"] == 2
    assert "VGPRs limit occupancy" in b.reason  # the advice is the product: the limiter named


def test_amd_large_lds_limits_occupancy():
    b = classify(_edited_docs_kernel(lds_bytes=65536.0))
    assert b.kind == "latency/occupancy-bound" and b.evidence["lds_bytes"] == 65536.0
    assert "LDS limits occupancy" in b.reason  # the advice is the product: the limiter named
