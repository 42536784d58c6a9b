"""The CUPTI kernel-trace backend: parsing the recorded H100 trace, the injector run for real in a
Python process (here without cupti-python, so it records the error it must), merging processes,
and every way a trace can be missing or unreadable."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.trace import target_gpu_time
from kopt_mcp.profilers import CuptiProfiler, make_profiler
from kopt_mcp.profilers.cupti import INJECT_DIR, cupti_importable, parse_cupti_dir

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "cupti" / "h100_torch_matmul"


def _copy_fixture(dest: Path, pid: str = "438") -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy(FIXTURE / "cupti-438.json", dest / f"cupti-{pid}.json")
    return dest


def test_recorded_h100_trace_names_the_hottest_kernel_demangled_with_its_launch_facts(tmp_path):
    trace = parse_cupti_dir(_copy_fixture(tmp_path / "run"))
    assert trace.backend == "cupti"
    hot = trace.kernels[0]
    assert hot.calls == 20 and "sgemm" in hot.name
    if shutil.which("c++filt"):
        assert hot.name.startswith("void cutlass::Kernel2<")  # demangled like ncu shows it
    assert 300 < hot.avg_us < 400
    assert hot.registers_per_thread == 202 and hot.block_size == 256 and hot.grid_size == 128
    assert sum(k.share_pct for k in trace.kernels) == pytest.approx(100.0)
    assert trace.total_gpu_us == pytest.approx(sum(k.total_us for k in trace.kernels))
    us, names = target_gpu_time(trace, "sgemm")
    assert names == [hot.name] and us == pytest.approx(hot.total_us)


def test_two_processes_of_one_run_are_summed_per_kernel(tmp_path):
    run = _copy_fixture(tmp_path / "run")
    _copy_fixture(run, pid="999")
    one = parse_cupti_dir(_copy_fixture(tmp_path / "single"))
    both = parse_cupti_dir(run)
    assert both.kernels[0].calls == 2 * one.kernels[0].calls
    assert both.total_gpu_us == pytest.approx(2 * one.total_gpu_us)


def _run_injected(tmp_path: Path, script: str, extra_env: dict[str, str] | None = None) -> Path:
    out = tmp_path / "trace"
    out.mkdir()
    (tmp_path / "bench.py").write_text(script)
    cmd = CuptiProfiler().wrap(f"{sys.executable} bench.py", out)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | (extra_env or {})
    done = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.skipif(cupti_importable(), reason="checks the error path of a Python without cupti-python")
def test_injected_process_without_cupti_python_records_why_and_parse_says_what_to_do(tmp_path):
    out = _run_injected(tmp_path, "print('benchmark ran')\n")
    files = list(out.glob("cupti-*.json"))
    assert len(files) == 1
    doc = json.loads(files[0].read_text())
    assert doc["status"] == "error" and "cupti-python is not importable" in doc["error"]
    with pytest.raises(ProfilerError, match="pip install cupti-python"):
        parse_cupti_dir(out)


def test_injector_still_runs_the_sitecustomize_it_shadows(tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import os\nos.environ['THEIRS_RAN'] = '1'\n")
    out = _run_injected(tmp_path, "import os\nopen('seen.txt', 'w').write(os.environ.get('THEIRS_RAN', '0'))\n",
                        {"PYTHONPATH": str(theirs)})
    assert (tmp_path / "seen.txt").read_text() == "1"
    assert list(out.glob("cupti-*.json"))  # and ours ran too


def test_wrap_keeps_the_callers_pythonpath_after_the_injector(tmp_path):
    cmd = CuptiProfiler().wrap("python -c 'import sys; print(sys.path)'", tmp_path)
    assert str(INJECT_DIR) in cmd and "${PYTHONPATH:+:$PYTHONPATH}" in cmd and "cupti_collect.py" in cmd
    file_mode = CuptiProfiler()
    file_mode.stream = False
    assert "KOPT_CUPTI_OUT=" in file_mode.wrap("python b.py", tmp_path)


def test_no_trace_file_means_not_a_python_benchmark_and_names_the_fallback(tmp_path):
    with pytest.raises(ProfilerError, match='backend = "ncu"'):
        parse_cupti_dir(tmp_path)


def test_trace_without_kernels_is_an_error_not_an_empty_keep_metric(tmp_path):
    doc = json.loads((FIXTURE / "cupti-438.json").read_text()) | {"kernels": {}}
    (tmp_path / "cupti-1.json").write_text(json.dumps(doc))
    with pytest.raises(ProfilerError, match="recorded no GPU kernel"):
        parse_cupti_dir(tmp_path)


def test_a_file_that_is_not_the_injectors_json_is_named(tmp_path):
    (tmp_path / "cupti-7.json").write_text("{not json")
    with pytest.raises(ProfilerError, match="cupti-7.json"):
        parse_cupti_dir(tmp_path)


def test_one_failed_process_beside_a_good_one_is_a_warning(tmp_path):
    run = _copy_fixture(tmp_path / "run")
    (run / "cupti-5.json").write_text(json.dumps({"pid": 5, "status": "error", "error": "boom", "kernels": {}}))
    trace = parse_cupti_dir(run)
    assert trace.kernels and any("boom" in w for w in trace.warnings)


def test_thousands_of_kernel_names_parse_and_sort_hottest_first(tmp_path):
    kernels = {f"triton_kernel_{i}": {"calls": 1, "total_ns": 1000 + i, "min_ns": 1, "max_ns": 1}
               for i in range(5000)}
    (tmp_path / "cupti-1.json").write_text(json.dumps({"pid": 1, "status": "ok", "kernels": kernels}))
    trace = parse_cupti_dir(tmp_path)
    assert len(trace.kernels) == 5000 and trace.kernels[0].name == "triton_kernel_4999"


def test_factory_picks_cupti_for_the_nvidia_keep_metric_only_where_it_is_importable(monkeypatch):
    import kopt_mcp.profilers.cupti as mod
    from kopt_mcp.profilers import ncu

    monkeypatch.setattr(mod, "cupti_importable", lambda: True)
    monkeypatch.setattr(ncu.shutil, "which", lambda _: "/usr/local/cuda/bin/ncu")
    assert make_profiler("auto", "nvidia").name == "cupti"
    assert make_profiler("auto", "nvidia", detail=True).name == "cupti+ncu"  # CUPTI times, ncu counters
    assert make_profiler("cupti", "nvidia").name == "cupti"
    monkeypatch.setattr(mod, "cupti_importable", lambda: False)
    assert make_profiler("auto", "nvidia").name == "ncu"
    with pytest.raises(ProfilerError, match="pip install cupti-python"):
        make_profiler("cupti", "nvidia")


def test_injector_keeps_the_largest_launch_shape_of_a_kernel_name(monkeypatch):
    """Triton compiles one `softmax_kernel` per block size: 18 registers for the short-row variant,
    255 for the long-row one (H100 trace report, 2026-11-22). The name's row must show the largest,
    the variant that limits occupancy, whichever launched first."""
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("kopt_trace_under_test", Path(INJECT_DIR) / "kopt_cupti_trace.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)

    def rec(start, regs, smem, block, grid):
        return SimpleNamespace(start=start, end=start + 100, name="softmax_kernel", registers_per_thread=regs,
                               static_shared_memory=smem, dynamic_shared_memory=0, block_x=block, block_y=1,
                               block_z=1, grid_x=grid, grid_y=1, grid_z=1)

    t = mod.Trace()
    t.add(rec(0, 18, 16, 128, 302592))
    t.add(rec(1000, 255, 16, 1024, 2048))
    t.add(rec(2000, 40, 0, 256, 4096))
    k = t.kernels["softmax_kernel"]
    assert (k["calls"], k["registers_per_thread"], k["shared_mem_per_block_bytes"]) == (3, 255, 16)
    assert (k["block_size"], k["grid_size"]) == (1024, 302592)
