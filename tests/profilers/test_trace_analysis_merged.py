"""kernel_trace_analysis with the merged "cupti+ncu" report and with ncu, replaying recorded outputs:
the report and the ledger's trace event carry the CUPTI times, the ncu metrics and median_us."""

from __future__ import annotations

import shlex
import shutil
import statistics
from pathlib import Path

import pytest

from kopt_mcp.profilers import CuptiProfiler, NcuProfiler, TraceWithMetrics
from tests.profilers.conftest import RAW
from tests.profilers.test_ncu_parse import RAW_NS
from tests.profilers.test_rocprof_trace_analysis import with_regex

CUPTI = Path(__file__).resolve().parents[1] / "fixtures" / "cupti" / "h100_torch_matmul" / "cupti-438.json"


def _copy(src: Path, dest: Path) -> str:
    return f"mkdir -p {shlex.quote(str(dest.parent))} && cp {shlex.quote(str(src))} {shlex.quote(str(dest))}"


def _file_mode_cupti() -> CuptiProfiler:
    """The CUPTI backend reading trace files left in its folder (no collector): the replay copies one there."""
    prof = CuptiProfiler()
    prof.stream = False
    return prof


class ReplayMerged(TraceWithMetrics):
    """Runs the benchmark as is, then leaves the recorded CUPTI and ncu files where the two runs would."""

    def wrap(self, command: str, out_dir: Path) -> str:
        out = Path(out_dir)
        return f"{command} && {_copy(CUPTI, out / 'timing' / CUPTI.name)} && {_copy(RAW, out / 'metrics' / 'ncu.csv')}"


class ReplayNcu(NcuProfiler):
    def wrap(self, command: str, out_dir: Path) -> str:
        return f"{command} && {_copy(RAW, Path(out_dir) / 'ncu.csv')}"


@pytest.mark.skipif(shutil.which("c++filt") is None, reason="CUPTI names need c++filt to demangle")
def test_merged_report_has_cupti_times_ncu_metrics_and_a_note_for_unmatched_kernels(ref, monkeypatch):
    monkeypatch.setattr(ref, "profiler", lambda detail=False: ReplayMerged(_file_mode_cupti(), NcuProfiler(detail=True)))
    with_regex(ref, monkeypatch, "distribution_elementwise")
    result = ref.kernel_trace_analysis()
    assert result.backend == "cupti+ncu" and result.available
    gemm, randn = result.kernels
    assert gemm.calls == 20 and gemm.extra == {} and randn.calls == 1  # CUPTI's counts
    assert randn.extra["dram_throughput_pct"] == pytest.approx(0.02)  # ncu's metrics
    assert result.bottleneck.kind == "compute-bound"
    assert any(n.startswith("1 of 2 kernel(s) got no ncu metrics") for n in result.notes)
    (event,) = [e for e in ref.books.store.ledger() if e["event"] == "trace"]
    assert event["backend"] == "cupti+ncu"
    assert event["kernels"][1]["sm_throughput_pct"] == pytest.approx(64.07)
    assert event["kernels"][0]["median_us"] is None  # this CUPTI recording kept no per-launch times


def test_trace_event_and_report_carry_the_median_per_launch(ref, monkeypatch):
    monkeypatch.setattr(ref, "profiler", lambda detail=False: ReplayNcu(detail=True))
    result = ref.kernel_trace_analysis()
    (event,) = [e for e in ref.books.store.ledger() if e["event"] == "trace"]
    softmax_median = statistics.median(RAW_NS["softmax_warp_forward"]) / 1000
    assert result.kernels[0].median_us == pytest.approx(softmax_median)
    assert event["kernels"][0]["name"] == "softmax_warp_forward"
    assert event["kernels"][0]["median_us"] == pytest.approx(softmax_median)
