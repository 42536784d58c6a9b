"""The foreign load on the CPU device, read by the referee's process with real psutil readings
(gpus/cpu.py, gpus/load.py): processes outside kopt-mcp's own tree count, its own never do, and the
named shares add up to the figure. Loaded-2-core-machine safe: only what a planted loop cannot fail
to show is asserted."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from kopt_mcp.gpus.cpu import CpuLoadProbe, read_cpu
from kopt_mcp.gpus.load import CpuLoadSampler, GpuLoadSampler, load_factory
from kopt_mcp.testing.toy import SPIN_LOOP, ForeignLoad, spinning_thread


def _adds_up(load) -> None:
    """The named processes, the rest and the unattributed part add up to the figure (each share
    rounded to 0.1%)."""
    parts = sum(p.pct for p in load.processes) + load.rest_pct + load.unattributed_pct
    assert parts == pytest.approx(load.other_pct, abs=0.06 * (len(load.processes) + 2) + 0.1)


def test_a_run_of_kopts_own_tree_is_never_foreign_load():
    """The run (a child spinning for 1.5 s, started and reaped inside the sample) and a busy thread of
    this process are kopt-mcp's own: neither is named, whatever else the machine runs."""
    with CpuLoadSampler(top=10_000) as s, spinning_thread():
        child = subprocess.Popen([sys.executable, "-c", SPIN_LOOP.format(s=1.5)])
        child.wait()
    load = s.summary()
    assert load is not None and load.device == "cpu" and load.samples >= 2
    assert {os.getpid(), child.pid}.isdisjoint(p.pid for p in load.processes)
    _adds_up(load)


def test_planted_loops_on_both_cores_are_named_and_counted():
    with ForeignLoad(2) as hog, CpuLoadSampler(top=10_000) as s:
        time.sleep(2.5)
    load = s.summary()
    seen = {p.pid: p.pct for p in load.processes if p.pid in hog.pids}
    assert set(seen) == set(hog.pids) and all(v > 0 for v in seen.values())
    assert load.other_pct >= sum(seen.values()) - 0.1 and load.cores >= 1
    _adds_up(load)


def test_the_gates_figure_lists_processes_that_add_up():
    with ForeignLoad(2) as hog:
        load = CpuLoadProbe(interval_s=1.0, top=10_000).read()
    assert set(hog.pids) <= {p.pid for p in load.top}
    named = sum(p.share_pct for p in load.top) + load.rest_pct + load.unattributed_pct
    assert named == pytest.approx(load.other_pct, abs=0.06 * (len(load.top) + 2) + 0.1)
    assert os.getpid() not in {p.pid for p in load.top}


def test_a_kopt_mcp_launcher_above_the_server_is_its_own_and_no_other_ancestor_is():
    """A process whose command line runs kopt-mcp (e.g. `uv run kopt-mcp`) started the server: it is
    the server's own, never another process; a plain parent is not."""
    child = ("import json, os\nfrom kopt_mcp.gpus.cpu import read_cpu\n"
             "r = read_cpu()\nprint(json.dumps(os.getppid() in r.own))")
    parent = "import subprocess, sys\nsubprocess.run([sys.executable, '-c', sys.argv[1]])"
    for word, own in (("kopt-mcp", True), ("plain", False)):
        out = subprocess.run([sys.executable, "-c", parent, child, word], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == ("true" if own else "false"), out.stderr
    assert os.getpid() in read_cpu().own


def test_no_gpu_sampler_without_a_probe_and_a_cpu_one_for_the_cpu():
    assert load_factory("cpu", "cpu", None) is CpuLoadSampler
    assert load_factory("nvidia", "GPU-1", None) is None


def test_the_gpu_sampler_names_other_compute_processes_not_its_own():
    from kopt_mcp.gpus.base import GpuProcess, GpuReading

    class Probe:
        name = "fake"

        def read(self):
            return [GpuReading(index=0, uuid="GPU-1", name="H100", vendor="nvidia", util_pct=97.0, processes=[
                GpuProcess(pid=os.getpid(), name="python", used_mib=500.0),  # the server's own
                GpuProcess(pid=4_000_000, name="other-job", used_mib=874.0)]),
                GpuReading(index=1, uuid="GPU-2", name="H100", vendor="nvidia", util_pct=0.0)]

    with GpuLoadSampler(Probe(), "GPU-1", period_s=0.05) as s:
        time.sleep(0.2)
    load = s.summary()
    assert load.device == "gpu" and load.util_pct == 97.0 and load.samples >= 2
    assert [(p.pid, p.mem_mib) for p in load.processes] == [(4_000_000, 874.0)]


def test_short_lived_children_of_another_job_are_named_apart_from_their_parent():
    """Another job that runs many short processes (a build, a test suite): each ends between two
    readings, yet its time is named, as the ended children of the shell that ran them, and the shell
    itself (forking and waiting, about 1% of one core) is not blamed for them."""
    import psutil

    loop = f'(for i in $(seq 400); do {sys.executable} -c "sum(range(1000000))"; done) >/dev/null 2>&1 & echo $!'
    spawner = int(subprocess.run(["bash", "-c", loop], capture_output=True, text=True, check=True).stdout.split()[0])
    try:
        time.sleep(0.5)
        load = CpuLoadProbe(interval_s=2.0, top=10_000).read()
        mine = [p for p in load.top if p.pid == spawner]
        ended = [p for p in mine if p.name == "(ended children of bash)"]
        # alone the children ran near one core in turn (3.4% of 2 cores seen at load average 6)
        assert len(ended) == 1 and ended[0].share_pct >= 1.0
        assert all(p.share_pct < ended[0].share_pct for p in mine if p.name == "bash")
    finally:
        try:
            parent = psutil.Process(spawner)
            kids = parent.children(recursive=True)
            for q in (parent, *kids):
                q.kill()
        except psutil.NoSuchProcess:
            pass
