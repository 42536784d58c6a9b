"""The CPU profile's own code against the harness (issue 36, item 1): samples in the protected files (the
benchmark, the reference provider) and the libraries they call are the harness's, shown apart and never
the hottest own function; a short run is sampled again, and every figure says how many samples back it.
Replays a real recorded two-run profile (tests/fixtures/pyspy/protected_ref, how it was made is in its
source.txt) and runs the real py-spy."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from kopt_mcp.errors import ProfilerError
from kopt_mcp.profilers import PySpyProfiler
from kopt_mcp.profilers.bottleneck import classify_cpu
from kopt_mcp.profilers.pyspy import (
    EXIT_FILE,
    LINES_PER_FUNCTION,
    MAX_RUNS,
    REPEAT_S,
    RUNS_FILE,
    is_protected,
    parse_speedscope,
    protect_paths,
    pyspy_path,
    too_short_to_sample,
)
from kopt_mcp.testing.toy import kernel_source, make_toy_repo

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "pyspy"
RECORDED = FIXTURES / "protected_ref"
RMSNORM = FIXTURES / "rmsnorm_rows.speedscope.json"
needs_pyspy = pytest.mark.skipif(pyspy_path() is None, reason="py-spy is not installed (pip install py-spy)")


def _recorded(protect=("benchmark",)):
    return PySpyProfiler(protect).parse(RECORDED).cpu


def test_the_protected_reference_is_the_harness_and_not_the_hottest_own_function():
    p = _recorded()
    assert (p.runs, p.samples) == (2, 438 + 228)  # py-spy's "Samples:" lines of the two runs
    assert (p.own_samples, p.library_samples, p.harness_samples, p.import_samples, p.no_python_samples) == (
        28, 42, 130, 439, 27)
    assert p.own_samples + p.library_samples + p.harness_samples + p.import_samples + p.no_python_samples == p.samples
    assert (p.own_pct, p.harness_pct, p.import_pct) == (4.2, 19.52, 65.92)
    ref = p.harness_functions[0]
    assert (ref.function, ref.file, ref.harness, ref.own, ref.self_samples) == (
        "reference_row_sums", "benchmark/scripts/reference.py", True, False, 114)
    assert not any(f.file.startswith("benchmark/") for f in p.functions)
    b = classify_cpu(p)
    top_own = next(f for f in p.functions if f.own)
    assert (top_own.function, top_own.file, top_own.line, top_own.self_samples) == ("row_sums", "kernel.py", 8, 28)
    assert b.evidence["hottest_own_self_samples"] == 28 and b.evidence["harness_pct"] == 19.52
    assert ref.self_samples > top_own.self_samples  # hotter, and still not named


def test_without_protect_paths_the_reference_would_be_named_the_hottest_own_function():
    p = _recorded(protect=())
    assert p.harness_samples == 0 and p.harness_functions == []
    assert classify_cpu(p).evidence["hottest_own_self_samples"] == 114  # reference_row_sums: the bug fixed above


def test_the_sample_counts_behind_functions_and_lines_add_up():
    p = _recorded()
    for f in p.functions + p.harness_functions:
        assert f.self_samples <= f.total_samples
        assert len(f.lines) <= LINES_PER_FUNCTION
        assert [ln.samples for ln in f.lines] == sorted((ln.samples for ln in f.lines), reverse=True)
        if len(f.lines) < LINES_PER_FUNCTION:
            assert sum(ln.samples for ln in f.lines) == f.self_samples
    assert [(ln.file, ln.line, ln.samples) for ln in p.lines] == [("kernel.py", 8, 28)]  # own lines only
    assert sum(f.self_samples for f in p.functions + p.harness_functions) + p.no_python_samples == p.samples


def test_library_time_under_a_protected_file_is_the_harness():
    # the recorded RMSNorm run with its kernel file as if it were the reference: its numpy calls go with it
    own = parse_speedscope(RMSNORM, "/tmp/kopt-pyspy-rec/repo")
    guarded = parse_speedscope(RMSNORM, "/tmp/kopt-pyspy-rec/repo", protect=("rmsnorm_rows.py",))
    assert (own.own_samples, own.harness_samples) == (112, 0)
    assert guarded.own_samples == 0 and guarded.harness_samples == own.own_samples + own.library_samples
    assert guarded.import_samples == own.import_samples and guarded.library_samples == 0
    assert [f.function for f in guarded.functions if f.own] == [] and too_short_to_sample(guarded)
    assert "hottest_own_self_pct" not in classify_cpu(guarded).evidence


def test_protect_paths_are_taken_relative_to_the_benchmark_folder():
    assert protect_paths(["benchmark/scripts", "/kopt.toml", ""], "benchmark") == ("../kopt.toml", "scripts")
    assert protect_paths(["bench.py", "ref/"], ".") == ("bench.py", "ref")
    assert is_protected("scripts/reference.py", ("scripts",)) and is_protected("./bench.py", ("bench.py",))
    assert not is_protected("scripts_own.py", ("scripts",)) and not is_protected("kernel.py", ())


@needs_pyspy
def test_a_short_run_is_sampled_again_and_a_failing_one_is_not(tmp_path):
    (tmp_path / "short.py").write_text("t = __import__('time').monotonic() + 0.3\n"
                                       "while __import__('time').monotonic() < t:\n    sum(range(1000))\n")
    (tmp_path / "fail.py").write_text("raise SystemExit(4)\n")
    took = {}
    for name in ("short", "fail"):
        out = tmp_path / name
        out.mkdir()
        t0 = time.monotonic()
        subprocess.run(["bash", "-c", PySpyProfiler().wrap(f"python {name}.py", out)], cwd=tmp_path, check=False,
                       capture_output=True, timeout=120)
        took[name] = time.monotonic() - t0
    runs = int((tmp_path / "short" / RUNS_FILE).read_text())
    assert 2 <= runs <= MAX_RUNS or took["short"] >= REPEAT_S  # one run only where it took REPEAT_S (a loaded machine)
    p = PySpyProfiler().parse(tmp_path / "short").cpu
    per_file = [parse_speedscope(f).samples for f in (tmp_path / "short").glob("pyspy.*.speedscope.json")]
    assert p.runs == runs and p.samples == sum(per_file) > 0 and len(per_file) <= runs
    # py-spy may end the shell before it records a run's status (then the run counts as passed): repeating
    # stops at the first run whose status 4 was recorded, and that status is the benchmark's
    fail = tmp_path / "fail"
    recorded = {k: (fail / f"pyspy.exit.{k}").read_text() for k in range(1, MAX_RUNS + 1)
                if (fail / f"pyspy.exit.{k}").exists()}
    assert set(recorded.values()) == {"4"} and int((fail / RUNS_FILE).read_text()) == min(recorded)
    assert (fail / EXIT_FILE).read_text() == "4"
    with pytest.raises(ProfilerError, match="status 4"):
        PySpyProfiler().parse(fail)


HOT_REFERENCE = '''

def reference_rows(seconds):
    """The reference provider: protected, and hotter than the kernel."""
    t_end = time.monotonic() + seconds
    s = 0.0
    while time.monotonic() < t_end:
        for i in range(20000):
            s += (i % 7) * 0.5
    return s


reference_rows(1.0)
'''

OWN_KERNEL = '''

def own_rows(seconds):
    t_end = __import__("time").monotonic() + seconds
    s = 0.0
    while __import__("time").monotonic() < t_end:
        for i in range(20000):
            s += (i % 5) * 0.5
    return s


own_rows(0.4)
'''


@needs_pyspy
def test_kernel_trace_analysis_never_names_the_hot_protected_reference(tmp_path, make_referee):
    repo = make_toy_repo(tmp_path / "repo", {"1": 100.0})
    with open(repo / "bench.py", "a") as f:  # bench.py is protected ([protect] paths of the toy)
        f.write(HOT_REFERENCE)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qam", "hot reference"],
                   cwd=repo, check=True)
    ref = make_referee(repo)
    ref.run_benchmark()
    (ref.where.workspace_path / "kernel.py").write_text(kernel_source({"1": 100.0}) + OWN_KERNEL)
    result = ref.kernel_trace_analysis(top=5)
    assert result.available and result.cpu is not None
    c = result.cpu
    assert c.harness_functions[0].function == "reference_rows" and c.harness_functions[0].file == "bench.py"
    assert all(f.file != "bench.py" for f in c.functions)
    own = next(f for f in c.functions if f.own)
    assert (own.function, own.file) == ("own_rows", "kernel.py")
    assert c.harness_functions[0].self_samples > own.self_samples  # 1.0 s against 0.4 s a run
    assert result.bottleneck.evidence["hottest_own_self_samples"] == own.self_samples
    assert c.harness_pct > c.own_pct
