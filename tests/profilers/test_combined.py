"""TraceWithMetrics ("cupti+ncu"): CUPTI times merged with Nsight Compute metrics, on the recorded
outputs laid out the way its wrap leaves them (run/timing/, run/metrics/).

The CUPTI fixture (H100, 20 fp32 torch matmuls after one fp32 randn) and the ncu raw-page fixture
(H200, bf16 randn + matmul + softmax) come from different programs: only the randn kernel exists in
both, as different instantiations, and each tool spells its name differently. The tests use exactly
that: the matmul kernels cannot match, the randn kernels match by their unqualified name.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.names import short_kernel_name
from kopt_mcp.profilers import CuptiProfiler, NcuProfiler, TraceWithMetrics, make_profiler
from kopt_mcp.profilers import cupti_parse as cupti_mod
from kopt_mcp.profilers.bottleneck import classify
from kopt_mcp.profilers.combined import match_kernel_names
from kopt_mcp.profilers.cupti import parse_cupti_dir
from kopt_mcp.profilers.ncu import parse_ncu_csv
from tests.profilers.conftest import RAW

CUPTI = Path(__file__).resolve().parents[1] / "fixtures" / "cupti" / "h100_torch_matmul" / "cupti-438.json"
needs_cxxfilt = pytest.mark.skipif(shutil.which("c++filt") is None, reason="CUPTI names need c++filt to demangle")


def layout(run: Path, timing: str | None = "cupti", metrics: bool = True) -> Path:
    """`run/timing/` (the CUPTI file, or ncu.csv for timing="ncu") and `run/metrics/ncu.csv` (raw page)."""
    (run / "timing").mkdir(parents=True)
    (run / "metrics").mkdir()
    if timing == "cupti":
        shutil.copy(CUPTI, run / "timing" / CUPTI.name)
    elif timing == "ncu":
        shutil.copy(RAW, run / "timing" / "ncu.csv")
    if metrics:
        shutil.copy(RAW, run / "metrics" / "ncu.csv")
    return run


def merged_profiler(stream: bool = False) -> TraceWithMetrics:
    """CUPTI + ncu; `stream` False: the CUPTI side reads the trace files left in its folder (the
    recorded fixture copied there by `layout`), True: the real collector-based wrap."""
    cupti = CuptiProfiler()
    cupti.stream = stream
    return TraceWithMetrics(cupti, NcuProfiler(detail=True))


def _one(trace, fragment):
    (hit,) = [k for k in trace.kernels if fragment in k.name]
    return hit


@needs_cxxfilt
def test_times_are_cuptis_and_metrics_come_from_the_ncu_kernel_of_the_same_name(tmp_path):
    run = layout(tmp_path / "run")
    merged = merged_profiler().parse(run)
    timing, metrics = parse_cupti_dir(run / "timing"), parse_ncu_csv(run / "metrics" / "ncu.csv")
    assert merged.backend == "cupti+ncu" and merged.total_gpu_us == timing.total_gpu_us
    assert [k.name for k in merged.kernels] == [k.name for k in timing.kernels]
    for m, t in zip(merged.kernels, timing.kernels, strict=True):
        assert (m.calls, m.total_us, m.avg_us, m.median_us, m.share_pct, m.registers_per_thread, m.block_size,
                m.grid_size) == (t.calls, t.total_us, t.avg_us, t.median_us, t.share_pct, t.registers_per_thread,
                                 t.block_size, t.grid_size)
    randn, ncu_randn = _one(merged, "distribution_elementwise"), _one(metrics, "distribution_elementwise")
    # c++filt: "at::native::(anonymous namespace)::..."; ncu: "at::<unnamed>::..." -> short names differ,
    # the unqualified function name is the same
    assert short_kernel_name(randn.name) == "at::native::distribution_elementwise_grid_stride_kernel"
    assert short_kernel_name(ncu_randn.name) == "at::distribution_elementwise_grid_stride_kernel"
    assert randn.extra == ncu_randn.extra and randn.extra["sm_throughput_pct"] == pytest.approx(64.07)
    assert (randn.calls, ncu_randn.calls) == (1, 2)  # CUPTI's count, not ncu's
    assert classify(randn).kind == "compute-bound"  # the metrics make the bottleneck class possible
    assert classify(_one(timing, "distribution_elementwise")).kind == "unknown"


@needs_cxxfilt
def test_a_kernel_without_metrics_keeps_its_times_and_one_warning_counts_it(tmp_path):
    merged = merged_profiler().parse(layout(tmp_path / "run"))
    gemm = merged.kernels[0]
    assert "sgemm" in gemm.name and gemm.extra == {} and gemm.calls == 20
    assert len(merged.warnings) == 1
    assert merged.warnings[0].startswith("1 of 2 kernel(s) got no ncu metrics") and "cutlass::Kernel2" in \
        merged.warnings[0]


def test_undemangled_names_match_nothing_and_the_warning_says_why(tmp_path, monkeypatch):
    monkeypatch.setattr(cupti_mod.shutil, "which", lambda _name: None)  # no c++filt: names stay mangled
    merged = merged_profiler().parse(layout(tmp_path / "run"))
    assert all(k.name.startswith("_Z") and k.extra == {} for k in merged.kernels)
    (warning,) = merged.warnings
    assert warning.startswith("2 of 2 kernel(s) got no ncu metrics") and "c++filt" in warning


def test_the_same_program_twice_pairs_every_kernel_by_its_exact_name(tmp_path):
    run = layout(tmp_path / "run", timing="ncu")
    merged = TraceWithMetrics(NcuProfiler(), NcuProfiler(detail=True)).parse(run)
    metrics = {k.name: k for k in parse_ncu_csv(run / "metrics" / "ncu.csv").kernels}
    assert merged.backend == "ncu+ncu" and merged.warnings == []
    assert match_kernel_names(list(metrics), list(metrics)) == {n: n for n in metrics}
    assert len({k.extra["sm_throughput_pct"] for k in merged.kernels}) == 5  # a mix-up would show
    for k in merged.kernels:
        assert k.extra == metrics[k.name].extra


@needs_cxxfilt
def test_a_metrics_kernel_is_never_given_to_two_timing_kernels(tmp_path):
    cupti_randn = _one(parse_cupti_dir(layout(tmp_path / "run", metrics=False) / "timing"), "distribution").name
    ncu_names = [k.name for k in parse_ncu_csv(RAW).kernels]
    (ncu_randn,) = [n for n in ncu_names if "distribution" in n]
    assert match_kernel_names([cupti_randn], ncu_names) == {cupti_randn: ncu_randn}  # alone: paired
    # both instantiations in the timing run: the exact name takes ncu's kernel, the other one gets nothing
    assert match_kernel_names([cupti_randn, ncu_randn], ncu_names) == {ncu_randn: ncu_randn}


def test_an_unreadable_metrics_run_is_an_error_naming_it_never_a_shorter_report(tmp_path):
    with pytest.raises(ProfilerError, match=r"the metrics run \(ncu, .*metrics\): .*ncu.csv does not exist"):
        merged_profiler().parse(layout(tmp_path / "run", metrics=False))


def test_an_unreadable_timing_run_is_an_error_naming_it(tmp_path):
    with pytest.raises(ProfilerError, match=r"the timing run \(cupti, .*timing\): no CUPTI trace file"):
        merged_profiler().parse(layout(tmp_path / "run", timing=None))


def _run_wrapped(prof: TraceWithMetrics, command: str, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", prof.wrap(command, out)], capture_output=True, text=True, timeout=60)


def _fake_steps(monkeypatch, prof: TraceWithMetrics) -> None:
    """Each step leaves a marker file in its own folder, then runs the command as is."""
    for step in (prof.timing, prof.metrics):
        monkeypatch.setattr(step, "wrap", lambda command, out_dir: f"touch {out_dir}/ran; {command}")


def test_wrap_runs_the_metrics_step_only_after_the_timing_step_succeeded(tmp_path, monkeypatch):
    prof = merged_profiler()
    _fake_steps(monkeypatch, prof)
    ok = _run_wrapped(prof, "true", tmp_path / "ok")
    assert ok.returncode == 0 and (tmp_path / "ok/timing/ran").exists() and (tmp_path / "ok/metrics/ran").exists()
    bad = _run_wrapped(prof, "exit 3", tmp_path / "bad")
    assert bad.returncode == 3
    assert (tmp_path / "bad/timing/ran").exists() and not (tmp_path / "bad/metrics/ran").exists()
    assert bad.stderr.strip().endswith(
        "the timing run (cupti) exited with code 3; the metrics run (ncu) was not started")


def test_a_failing_metrics_step_fails_the_whole_and_is_named(tmp_path, monkeypatch):
    prof = merged_profiler()
    monkeypatch.setattr(prof.timing, "wrap", lambda command, out_dir: command)
    monkeypatch.setattr(prof.metrics, "wrap", lambda command, out_dir: f"{command}; exit 5")
    done = _run_wrapped(prof, "true", tmp_path / "run")
    assert done.returncode == 5
    assert "the metrics run (ncu) exited with code 5, after the timing run (cupti) succeeded" in done.stderr


def test_the_cupti_injection_does_not_reach_the_metrics_run(tmp_path, monkeypatch):
    prof = merged_profiler(stream=True)  # the real CUPTI wrap: the collector, KOPT_CUPTI_SOCK and PYTHONPATH
    monkeypatch.setattr(prof.metrics, "wrap", lambda command, out_dir: (
        f"echo \"${{KOPT_CUPTI_OUT:-unset}}${{KOPT_CUPTI_SOCK:-unset}}\" > {out_dir}/seen; {command}"))
    done = _run_wrapped(prof, f"{sys.executable} -c pass", tmp_path / "run")
    assert done.returncode == 0, done.stderr
    assert list((tmp_path / "run/timing").glob("cupti-*.json"))  # the injector ran in the timing step
    assert (tmp_path / "run/metrics/seen").read_text().strip() == "unsetunset"


def test_factory_merges_cupti_and_ncu_for_the_nvidia_detail_report(monkeypatch):
    monkeypatch.setattr(CuptiProfiler, "available", lambda self: True)
    monkeypatch.setattr(NcuProfiler, "available", lambda self: True)
    for backend in ("auto", "cupti"):
        prof = make_profiler(backend, "nvidia", detail=True)
        assert isinstance(prof, TraceWithMetrics) and prof.name == "cupti+ncu" and prof.per_launch
        assert isinstance(prof.timing, CuptiProfiler) and prof.metrics.detail and prof.available()
        assert make_profiler(backend, "nvidia").name == "cupti"  # the keep metric stays the trace alone
    assert make_profiler("ncu", "nvidia", detail=True).name == "ncu"
    monkeypatch.setattr(NcuProfiler, "available", lambda self: False)
    assert make_profiler("auto", "nvidia", detail=True).name == "cupti"
    monkeypatch.setattr(NcuProfiler, "available", lambda self: True)
    monkeypatch.setattr(CuptiProfiler, "available", lambda self: False)
    assert make_profiler("auto", "nvidia", detail=True).name == "ncu"
