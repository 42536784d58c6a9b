"""A benchmark that forges its CUPTI trace (issue 11 item 4, GPU part), run for real on CPU: the
injector and the collector are the real ones; `cupti` is tests/replay_cupti.py's replay of the
recorded H100 trace (20 sgemm launches, 6795.604 us in all).

The cheat: benchmark code writes a trace file claiming the sgemm took half its time, into the
folder the trace is read from, then leaves with os._exit (so the injector cannot write the real one
after it) or exits normally.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kopt_mcp.errors import ProfilerError
from kopt_mcp.profilers.cupti import MANIFEST, CuptiProfiler
from tests.replay_cupti import FIXTURE, SGEMM_PREFIX, write_fake_cupti

RECORDED_US = 6795.604
CHEAT = f"""
import json, os
out = os.environ.get("KOPT_CUPTI_OUT") or os.environ["CHEAT_OUT"]  # the strongest cheat knows the folder
doc = json.load(open({str(FIXTURE)!r}))
for name, k in doc["kernels"].items():
    if name.startswith({SGEMM_PREFIX!r}):
        k["total_ns"] //= 2
open(os.path.join(out, f"cupti-{{os.getpid()}}.json"), "w").write(json.dumps(doc))
"""


def _run(tmp_path: Path, script: str, stream: bool = True) -> Path:
    out = tmp_path / "trace"
    out.mkdir()
    (tmp_path / "bench.py").write_text(script)
    fake = write_fake_cupti(tmp_path / "fake")
    prof = CuptiProfiler()
    prof.stream = stream
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KOPT_CUPTI_OUT", "KOPT_CUPTI_SOCK")}
    env |= {"PYTHONPATH": str(fake), "CHEAT_OUT": str(out)}
    done = subprocess.run(["bash", "-c", prof.wrap(f"{sys.executable} bench.py", out)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    return out


def _sgemm_us(trace) -> float:
    return next(k.total_us for k in trace.kernels if "cutlass" in k.name)


def test_cheat_works_against_the_file_mode_trace(tmp_path):
    """Why the stream exists: a process that writes its own trace file can forge it."""
    out = _run(tmp_path, CHEAT + "os._exit(0)\n", stream=False)
    prof = CuptiProfiler()
    prof.stream = False
    assert _sgemm_us(prof.parse(out)) == pytest.approx(RECORDED_US / 2, rel=1e-3)


def test_honest_run_streams_the_recorded_launches(tmp_path):
    trace = CuptiProfiler().parse(_run(tmp_path, "print('benchmark ran')\n"))
    sgemm = next(k for k in trace.kernels if "cutlass" in k.name)
    assert sgemm.calls == 20 and sgemm.total_us == pytest.approx(RECORDED_US, rel=1e-3)
    group = next(g for g in trace.groups if "cutlass" in g.kernel)
    assert group.grid == (128, 1, 1) and group.block == (256, 1, 1) and len(group.durations_us) == 20
    assert not trace.warnings


def test_forged_file_and_os_exit_leave_no_usable_trace(tmp_path):
    out = _run(tmp_path, CHEAT + "os._exit(0)\n")
    with pytest.raises(ProfilerError, match="without closing its CUPTI trace"):
        CuptiProfiler().parse(out)


def test_forged_file_is_ignored_and_the_streamed_trace_counts(tmp_path):
    """Under its own pid the forged file is overwritten by the collector; under another it is ignored."""
    trace = CuptiProfiler().parse(_run(tmp_path, CHEAT + CHEAT.replace("{os.getpid()}", "1")))
    assert _sgemm_us(trace) == pytest.approx(RECORDED_US, rel=1e-3)
    assert any("the collector did not write" in w for w in trace.warnings)


def test_a_trace_file_changed_after_the_run_is_refused(tmp_path):
    out = _run(tmp_path, "pass\n")
    listed = next(iter(json.loads((out / MANIFEST).read_text())["files"]))
    doc = json.loads((out / listed).read_text())
    doc["records"] += 0
    (out / listed).write_text(json.dumps(doc, indent=1))
    with pytest.raises(ProfilerError, match="changed after the CUPTI collector wrote it"):
        CuptiProfiler().parse(out)


def test_stream_mode_requires_the_collector_manifest(tmp_path):
    (tmp_path / "cupti-438.json").write_text(FIXTURE.read_text())
    with pytest.raises(ProfilerError, match="collector manifest"):
        CuptiProfiler().parse(tmp_path)


def test_collector_passes_on_the_benchmarks_exit_status(tmp_path):
    out = tmp_path / "trace"
    done = subprocess.run(["bash", "-c", CuptiProfiler().wrap("exit 7", out)], capture_output=True, check=False, timeout=60)
    assert done.returncode == 7 and (out / MANIFEST).exists()


def test_python_subprocesses_of_the_benchmark_are_collected_too(tmp_path):
    """The socket is named in the environment, so a Python child started with subprocess (which
    closes inherited descriptors) still reaches the collector; each process is its own file."""
    out = _run(tmp_path, "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'pass'], check=True)\n")
    trace = CuptiProfiler().parse(out)
    manifest = json.loads((out / MANIFEST).read_text())
    assert manifest["connections"] == 2 and len(manifest["files"]) == 2
    assert next(k for k in trace.kernels if "cutlass" in k.name).calls == 40


def test_a_process_that_outlives_the_command_is_not_waited_for_and_not_counted(tmp_path, monkeypatch):
    """A detached Python child still connected when the command ends: the collector waits
    KOPT_CUPTI_GRACE_S, then writes; the child's unclosed trace is an error beside the good one."""
    import signal

    monkeypatch.setenv("KOPT_CUPTI_GRACE_S", "1")
    child = "import time; open('started', 'w').close(); time.sleep(60)"  # connected before its code runs
    script = ("import os, subprocess, sys, time\n"
              f"subprocess.Popen([sys.executable, '-c', {child!r}], start_new_session=True,\n"
              "                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
              "for _ in range(400):\n"
              "    if os.path.exists('started'):\n"
              "        break\n"
              "    time.sleep(0.05)\n")
    out = _run(tmp_path, script)
    docs = [json.loads(p.read_text()) for p in out.glob("cupti-*.json")]
    try:
        trace = CuptiProfiler().parse(out)
        assert len(docs) == 2 and sum(d["closed"] for d in docs) == 1
        assert any("without closing" in w for w in trace.warnings)
        assert next(k for k in trace.kernels if "cutlass" in k.name).calls == 20  # the closed one only
    finally:
        for d in docs:
            if not d["closed"]:
                os.kill(d["pid"], signal.SIGKILL)
