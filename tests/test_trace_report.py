"""benchmarks/trace_report/run.py without a GPU: it refuses clearly, and its report renders a real
TraceResult (the toy referee's kernel_trace_analysis replaying the recorded ncu raw page) and a
real baseline of the toy benchmark."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kopt_mcp.commands.demo import gpu_example_possible
from tests.profilers.test_trace_analysis_merged import ReplayNcu

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "trace_report" / "run.py"
_spec = importlib.util.spec_from_file_location("trace_report", SCRIPT)
tr = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tr)


@pytest.mark.skipif(gpu_example_possible(), reason="checks the refusal on a machine without a GPU")
def test_without_a_gpu_it_exits_2_and_says_where_to_run_it(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "out")], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2 and "needs an NVIDIA GPU" in done.stderr and "gpu_suite.sh trace" in done.stderr
    assert not (tmp_path / "out").exists()


def test_report_from_a_real_trace_and_baseline(toy_repo, make_referee, monkeypatch, tmp_path):
    ref = make_referee(toy_repo)
    base = ref.run_benchmark()
    monkeypatch.setattr(ref, "profiler", lambda detail=False: ReplayNcu(detail=True))
    trace = ref.kernel_trace_analysis(top=5)
    js, md = tr.write_report(tmp_path / "out", trace, base)
    text = md.read_text()
    # softmax_warp_forward of the raw page: 4 launches, 165.856 us, median 41.392 us, 80 registers,
    # SM 44.9975 %, DRAM 8.715 %, achieved occupancy 21.34 %
    assert "| softmax_warp_forward | 4 | 165.86 | 41.46 | 41.39 | 42.4 | 80 | 0 | 45.0 | 8.7 | 21.3 |" in text
    assert f"Bottleneck: **{trace.bottleneck.kind}**: {trace.bottleneck.reason}" in text
    assert "Target kernel(s): void <unnamed>::softmax_warp_forward" in text
    assert "| n=1 | 100 | yes |" in text and "| n=2 | 200 | yes |" in text  # the toy baseline's us_per_call
    doc = json.loads(js.read_text())
    assert doc["trace"]["kernels"][0]["median_us"] == pytest.approx(41.392)
    assert doc["baseline"]["baseline_recorded"] and len(doc["trace"]["kernels"]) == 5
