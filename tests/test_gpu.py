"""GPU tests (`-m gpu`): real NVML, real Nsight Compute, the referee on the Triton example.

Run with scripts/gpu_suite.sh on a machine with an NVIDIA GPU; skipped elsewhere. Results are
recorded under benchmarks/results/.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from kopt_mcp.bench.runner import run_command
from kopt_mcp.commands.demo import prepare_repo
from kopt_mcp.evidence.trace import target_gpu_time
from kopt_mcp.paths import examples_dir
from kopt_mcp.profilers.ncu import NcuProfiler

pytestmark = pytest.mark.gpu
SMALL = Path(__file__).parent / "fixtures" / "ncu" / "small_torch.py"


@pytest.mark.skipif(shutil.which("ncu") is None, reason="ncu not on PATH")
def test_ncu_traces_a_real_torch_program(tmp_path):
    prof = NcuProfiler()
    cmd = prof.wrap(f"{sys.executable} {SMALL}", tmp_path)
    r = run_command(cmd, tmp_path, {}, 600, tmp_path / "ncu.log")
    assert r.exit_code == 0, r.log_tail
    trace = prof.parse(tmp_path)
    names = " ".join(k.name for k in trace.kernels)
    assert "softmax" in names and trace.total_gpu_us > 0
    us, hits = target_gpu_time(trace, "softmax")
    assert us > 0 and all("softmax" in h for h in hits)
    assert abs(sum(k.share_pct for k in trace.kernels) - 100) < 0.01


@pytest.mark.skipif(shutil.which("ncu") is None, reason="ncu not on PATH")
def test_referee_baseline_on_triton_example_uses_gpu_time(tmp_path, lease_dir):
    pytest.importorskip("triton")
    from kopt_mcp.referee import Referee

    repo = prepare_repo(examples_dir() / "triton_softmax", tmp_path / "triton_softmax")
    r = Referee(repo, tag="gpu", lease_dir=lease_dir)
    try:
        b = r.run_benchmark()
        assert b.ok and b.device.vendor == "nvidia" and b.baseline_recorded
        s = r.status()
        assert s.best_gpu_us and s.best_gpu_us > 0
        assert len(s.best_metrics) >= 3
        t = r.kernel_trace_analysis(top=5)
        assert t.available and t.target_gpu_us > 0 and "softmax" in t.target_kernels[0]
    finally:
        r.close()



ADVERSARIAL = Path(__file__).resolve().parents[1] / "benchmarks" / "decision_quality"


@pytest.mark.parametrize("candidate, codes, named", [
    # the events time nothing; the GPU did the same work
    ("side_stream.py", ("gpu_time_below_floor", "gpu_time_not_improved"), "side stream"),
    ("skip_calls.py", ("skipped_work",), "skipped work"),  # half the calls return early; CUPTI counts the launches
])
def test_gpu_timing_cheats_are_not_kept_and_named(tmp_path, lease_dir, candidate, codes, named):
    pytest.importorskip("cupy")
    from kopt_mcp.profilers.cupti import cupti_importable

    if not cupti_importable():
        pytest.skip("cupti-python not importable")
    sys.path.insert(0, str(ADVERSARIAL))
    from run import make_repo

    from kopt_mcp.referee import Referee

    r = Referee(make_repo("gpu", tmp_path / "repo"), tag="adv", lease_dir=lease_dir)
    try:
        assert r.run_benchmark().baseline_recorded
        shutil.copy(ADVERSARIAL / "adversarial" / candidate, r.where.workspace_path / "kernel.py")
        v = r.save_and_test("global", f"adversarial: {candidate}")
        assert v.verdict != "improved" and v.reverted, v.reason
        assert max(v.target_deltas_pct) > 20, "the cheat must fool the script metric, or the test shows nothing"
        assert v.code in codes and v.metric_used == "profiler GPU time"
        assert named in v.reason  # the text is the product: the reason names the cheat
    finally:
        r.close()


def test_nvml_clock_source_reads_the_sm_clock_of_a_busy_gpu():
    torch = pytest.importorskip("torch")
    from kopt_mcp.gpus.clocks import ClockSampler, clock_source
    from kopt_mcp.gpus.nvml import NvmlProbe

    gpu = NvmlProbe().read()[0]
    src = clock_source("nvidia", gpu.uuid)
    assert src is not None
    a = torch.randn(4096, 4096, device="cuda:0")
    with ClockSampler(src) as sampler:
        for _ in range(200):  # about a second of matmuls keeps the GPU busy
            a = (a @ a).clamp_(-1, 1)
        torch.cuda.synchronize()
    c = sampler.summary()
    assert sampler.error is None and c is not None, sampler.samples[:5]
    assert 300 <= c.min_mhz <= c.sm_mhz <= c.max_mhz <= 3500 and c.busy_samples >= 5
