"""The py-spy backend: replaying a real recorded speedscope profile (tests/fixtures/pyspy, how it was
made is in its .source.txt), real py-spy runs of small Python programs, and kernel_trace_analysis on
a CPU device with the real py-spy."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from kopt_mcp.errors import ProfilerError
from kopt_mcp.events import Trace
from kopt_mcp.evidence.trace import CpuProfile, FunctionStat
from kopt_mcp.profilers import NoProfiler, PySpyProfiler, make_profiler
from kopt_mcp.profilers.bottleneck import classify_cpu
from kopt_mcp.profilers.pyspy import (
    EXIT_FILE,
    MIN_WORK_SAMPLES,
    parse_speedscope,
    pyspy_error,
    pyspy_path,
    too_short_to_sample,
    work_samples,
)
from kopt_mcp.testing.toy import kernel_source

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pyspy"
PROFILE = FIXTURES / "rmsnorm_rows.speedscope.json"
RECORDED_CWD = "/tmp/kopt-pyspy-rec/repo"  # pyspy.cwd of the recorded run (see the .source.txt)
needs_pyspy = pytest.mark.skipif(pyspy_path() is None, reason="py-spy is not installed (pip install py-spy)")


def _leaf_seconds(function: str) -> float:
    """Seconds of the fixture's samples whose innermost Python frame is `function`, counted directly."""
    doc = json.loads(PROFILE.read_text())
    frames = doc["shared"]["frames"]
    total = 0.0
    for prof in doc["profiles"]:
        for stack, w in zip(prof["samples"], prof["weights"]):
            py = [i for i in stack if frames[i]["file"]]
            if py and frames[py[-1]]["name"] == function:
                total += w
    return total


def test_the_recorded_profile_gives_the_row_loop_as_the_hottest_own_function():
    p = parse_speedscope(PROFILE, RECORDED_CWD)
    assert (p.samples, p.rate_hz, p.sampled_ms) == (206, 200.0, 1030.0)
    top = p.functions[0]
    assert (top.function, top.file, top.line, top.own) == ("rms_norm_rows", "rmsnorm_rows.py", 9, True)
    assert top.self_ms == pytest.approx(_leaf_seconds("rms_norm_rows") * 1e3) == 400.0
    assert (top.self_pct, top.total_pct) == (38.83, 78.16)
    by_name = {f.function: f for f in p.functions}
    vec = by_name["rms_norm_vectorized"]
    assert vec.own and vec.total_pct == 11.65  # the same 10 calls, vectorized: about 7x less time
    mean = by_name["_mean"]
    assert (mean.file, mean.own) == ("numpy/_core/_methods.py", False)  # the package path, not site-packages
    assert all(f.self_ms <= f.total_ms for f in p.functions)
    assert sum(f.self_pct for f in p.functions) + p.no_python_pct == pytest.approx(100.0, abs=0.1)
    assert p.own_pct + p.library_pct + p.import_pct + p.no_python_pct == pytest.approx(100.0, abs=0.05)
    assert (p.own_pct, p.library_pct, p.import_pct) == (54.37, 39.32, 6.31)


def test_the_functions_come_hottest_first_and_top_cuts_them():
    p = parse_speedscope(PROFILE, RECORDED_CWD, top=3)
    assert len(p.functions) == 3
    selfs = [f.self_ms for f in parse_speedscope(PROFILE, RECORDED_CWD).functions]
    assert selfs == sorted(selfs, reverse=True)


def test_without_the_benchmark_folder_own_files_keep_their_path():
    p = parse_speedscope(PROFILE, None)
    assert p.functions[0].file == RECORDED_CWD + "/rmsnorm_rows.py" and p.functions[0].own


def test_the_cpu_class_names_the_hottest_own_function():
    b = classify_cpu(parse_speedscope(PROFILE, RECORDED_CWD))
    assert b.kind == "cpu-bound"
    assert b.evidence["hottest_own_self_pct"] == 38.83 and b.evidence["hottest_own_total_pct"] == 78.16
    assert b.evidence["own_pct"] == 54.37 and b.evidence["library_pct"] == 39.32


def test_py_spys_error_line_is_read_from_the_recorded_log():
    assert pyspy_error(FIXTURES / "not_python.profile.log") == (
        "Error: No python processes found in process 13538 or any of its subprocesses")
    assert pyspy_error(FIXTURES / "missing.log") is None


def test_an_unreadable_or_missing_profile_is_a_profiler_error(tmp_path):
    with pytest.raises(ProfilerError):
        parse_speedscope(tmp_path / "none.json")
    (tmp_path / "bad.json").write_text('{"shared": {"frames": []}, "profiles": [{"type": "evented"}]}')
    with pytest.raises(ProfilerError):
        parse_speedscope(tmp_path / "bad.json")


def test_on_a_cpu_the_detail_profiler_is_py_spy_and_the_keep_metric_has_none():
    assert isinstance(make_profiler("auto", "cpu", detail=False), NoProfiler)
    assert isinstance(make_profiler("none", "cpu", detail=False), NoProfiler)
    expected = PySpyProfiler if pyspy_path() else NoProfiler
    assert isinstance(make_profiler("auto", "cpu", detail=True), expected)
    assert isinstance(make_profiler("none", "cpu", detail=True), expected)
    assert isinstance(make_profiler("none", "nvidia", detail=True), NoProfiler)


BUSY = '''
def busy_rows(n):
    s = 0.0
    for i in range(n):
        s += (i % 7) * 0.5
    return s


t_end = __import__("time").monotonic() + {seconds}
while __import__("time").monotonic() < t_end:
    busy_rows(20000)
'''


def _run_wrapped(tmp_path: Path, command: str) -> Path:
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["bash", "-c", PySpyProfiler().wrap(command, out)], cwd=tmp_path, check=False,
                   capture_output=True, timeout=120)
    return out


@needs_pyspy
def test_wrap_runs_the_benchmark_under_py_spy_and_parse_reads_it(tmp_path):
    (tmp_path / "busy.py").write_text(BUSY.format(seconds=1.0))
    out = _run_wrapped(tmp_path, "python busy.py")
    assert (out / EXIT_FILE).read_text() == "0"
    trace = PySpyProfiler().parse(out)
    assert trace.backend == "py-spy" and trace.kernels == [] and trace.cpu is not None
    top = trace.cpu.functions[0]
    assert (top.function, top.file, top.own) == ("busy_rows", "busy.py", True)
    assert top.self_pct > 50


@needs_pyspy
def test_a_benchmark_that_fails_under_py_spy_is_a_profiler_error(tmp_path):
    (tmp_path / "fail.py").write_text(BUSY.format(seconds=0.5) + "\nraise SystemExit(3)\n")
    out = _run_wrapped(tmp_path, "python fail.py")
    assert (out / EXIT_FILE).read_text() == "3"
    with pytest.raises(ProfilerError, match="status 3"):
        PySpyProfiler().parse(out)


@needs_pyspy
def test_kernel_trace_analysis_on_the_cpu_gives_the_hottest_functions(ref):
    (ref.where.workspace_path / "kernel.py").write_text(kernel_source({"1": 100.0, "2": 200.0}) + BUSY.format(seconds=1.5))
    result = ref.kernel_trace_analysis(top=4)
    assert result.available and result.backend == "py-spy" and result.kernels == []
    assert result.device.vendor == "cpu" and len(result.cpu.functions) <= 4
    top = result.cpu.functions[0]
    assert (top.function, top.file, top.own) == ("busy_rows", "kernel.py", True)
    assert result.bottleneck.kind == "cpu-bound" and result.bottleneck.evidence["hottest_own_self_pct"] == top.self_pct
    trace = ref.books.store.last(Trace)
    assert trace.backend == "py-spy" and trace.functions[0].function == "busy_rows"


@needs_pyspy
def test_a_benchmark_too_short_to_sample_says_what_to_do_instead(ref):
    result = ref.kernel_trace_analysis()  # the toy benchmark ends in a few ms
    assert not result.available and result.backend == "py-spy" and result.cpu is None
    assert len(result.notes) == 1


def _cpu(own=0.0, library=0.0, imports=0.0, functions=(), samples=18):
    return CpuProfile(functions=list(functions), samples=samples, rate_hz=200.0, sampled_ms=samples * 5.0,
                      own_pct=own, library_pct=library, import_pct=imports,
                      no_python_pct=round(100 - own - library - imports, 2))


def _fn(name, own, self_pct):
    return FunctionStat(function=name, file="kernel.py" if own else "json/decoder.py", line=1, own=own,
                        self_ms=self_pct, total_ms=self_pct, self_pct=self_pct, total_pct=self_pct)


def test_a_run_sampled_only_while_starting_up_holds_no_work():
    # CI (2 cores, 2026-11-27) sampled the few-ms toy benchmark this way: 18 samples, 90 ms, no own code
    p = _cpu(imports=55.56, functions=[_fn("_find_and_load", False, 55.56)])
    assert (work_samples(p), too_short_to_sample(p)) == (0, True)
    assert too_short_to_sample(_cpu())  # no Python frame at all: a native call or a wait


def test_work_is_own_code_also_under_an_import_and_libraries_outside_one():
    assert work_samples(_cpu(imports=90.0, functions=[_fn("busy_rows", True, 81.0)], samples=300)) == 243
    assert work_samples(_cpu(own=40.0, library=20.0, imports=10.0, samples=300,
                             functions=[_fn("rows", True, 40.0)])) == 180
    few = _cpu(library=20.0, imports=50.0, samples=20)  # 4 samples in a library: below the minimum
    assert (work_samples(few), MIN_WORK_SAMPLES, too_short_to_sample(few)) == (4, 5, True)
    assert not too_short_to_sample(_cpu(library=25.0, imports=50.0, samples=20))
    recorded = parse_speedscope(PROFILE, RECORDED_CWD)
    assert work_samples(recorded) == round(recorded.samples * (recorded.own_pct + recorded.library_pct) / 100)
    assert not too_short_to_sample(recorded)


@needs_pyspy
def test_a_benchmark_that_only_imports_says_its_work_was_too_short_to_sample(ref, tmp_path):
    lib = tmp_path / "site-packages"  # an installed library that is slow to import, like torch
    lib.mkdir()
    (lib / "slowstart.py").write_text("import time\nt_end = time.monotonic() + 1.0\nwhile time.monotonic() < t_end:\n"
                                      "    sum(i % 7 for i in range(20000))\n")
    (ref.where.workspace_path / "kernel.py").write_text(
        f"import sys\nsys.path.insert(0, {str(lib)!r})\nimport slowstart\n" + kernel_source({"1": 100.0}))
    result = ref.kernel_trace_analysis()
    assert not result.available and result.backend == "py-spy" and result.cpu is None
    assert len(result.notes) == 1 and result.notes[0].startswith("py-spy caught ")  # not "could not profile"


@needs_pyspy
def test_a_run_too_short_to_sample_still_says_what_it_changed(ref):
    """Too short for a sample of its work, or for py-spy to attach at all: either way unavailable,
    with the run's change note after the one that says why."""
    (ref.where.workspace_path / "kernel.py").write_text(  # a few ms, and the protected bench.py rewritten
        'open("bench.py", "a").write("# touched\\n")\n' + kernel_source({"1": 100.0, "2": 200.0}))
    result = ref.kernel_trace_analysis()
    assert not result.available and result.cpu is None
    assert len(result.notes) == 2 and "bench.py" in result.notes[1]


def test_without_a_sampling_profiler_the_cpu_trace_is_unavailable(ref, monkeypatch):
    monkeypatch.setattr(ref, "profiler", lambda detail=False: NoProfiler())
    result = ref.kernel_trace_analysis()
    assert not result.available and result.backend == "none" and len(result.notes) == 1

