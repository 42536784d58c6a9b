"""The lease actor's work on its node, run in this process (no Ray): idle gate, shipped snapshots,
measure/profile with the local code, run changes judged against the shipped blobs, cancel."""

from __future__ import annotations

import threading
import time

import pytest

from kopt_mcp.bench.cluster.node import NodeJob
from kopt_mcp.bench.cluster.shipping import pack
from kopt_mcp.errors import ShipError
from kopt_mcp.profilers.none import NoProfiler
from kopt_mcp.rules.protect import FileChange
from tests.bench.cluster.conftest import TAMPER, switch_probe


@pytest.fixture
def job(toy, tmp_path):
    j = NodeJob("t", toy.cfg.gates, lease_dir=str(tmp_path / "leases"), cache_root=str(tmp_path / "cache"))
    yield j
    j.close()
    assert not j.root.exists()


def test_gate_leases_an_idle_gpu_and_refuses_a_busy_one(toy, tmp_path):
    probe = switch_probe(tmp_path / "switch")
    idle = NodeJob("t", toy.cfg.gates, probe, lease_dir=str(tmp_path / "leases"))
    outcome, facts = idle.gate()
    assert outcome.lease is not None and outcome.lease.uuid.startswith("GPU-12d4823c")
    assert idle.binding == {"CUDA_VISIBLE_DEVICES": "0"} and facts["gpu_ids"] == []
    idle.close()  # gives the node's lease file back
    probe.set_busy("", True)
    busy = NodeJob("t", toy.cfg.gates, probe, lease_dir=str(tmp_path / "leases"))
    outcome, _ = busy.gate()
    # the gate's message is the product: it names what keeps each device busy
    assert outcome.lease is None and "utilization 99%" in outcome.reason
    busy.close()


def test_measure_runs_the_shipped_candidate_and_returns_its_files(toy, job):
    assert job.gate()[0].lease.vendor == "cpu"  # the toy config has gpu_probe = "none"
    cand = toy.candidate({"1": 50.0, "2": 200.0})
    job.add(pack(toy.ws, toy.best), toy.best, "repo")
    job.add(pack(toy.ws, cand, toy.best), cand, "repo")
    out = job.measure(toy.cfg, cand, {"TRITON_CACHE_DIR": "/nowhere/cache/triton"})
    m = out["result"]
    assert m.values() == {"n=1": 50.0, "n=2": 200.0} and m.gate.kind == "ok" and m.snapshot == cand and m.changes == []
    assert {"benchmark.log", "results/bench.csv"} <= set(out["files"]) and b"toy benchmark run" in out["files"]["benchmark.log"]
    assert m.run.log_path.startswith(out["run_dir"])
    assert "/kopt-run-" in m.tree and m.tree.endswith("/repo")  # checkouts are named like the user's repo


def test_a_run_that_rewrites_the_harness_is_reported(toy, job):
    cand = toy.candidate({"1": 50.0, "2": 200.0}, extra=TAMPER)
    job.add(pack(toy.ws, cand), cand)
    m = job.measure(toy.cfg, cand, {})["result"]
    assert FileChange("rewrote", "bench.py") in m.changes


def test_each_job_has_a_store_of_its_own(toy, job, tmp_path):
    job.add(pack(toy.ws, toy.best), toy.best, "repo")
    other = NodeJob("t", toy.cfg.gates, lease_dir=str(tmp_path / "leases"), cache_root=str(tmp_path / "cache"))
    assert job.has(toy.best, "repo") and not other.has(toy.best, "repo")  # what one run damages stays there
    other.close()


def test_a_damaged_store_is_refused_and_dropped_then_shipped_anew(toy, job):
    from tests.bench.cluster.test_shipping import tamper_bench

    tamper_bench(job._repo("repo"), toy, b"print('no work')\n")
    with pytest.raises(ShipError, match="no longer hashes to its name.*call again to ship it anew"):
        job.measure(toy.cfg, toy.best, {})
    assert job.store is None and not job.has(toy.best, "repo")
    job.add(pack(toy.ws, toy.best), toy.best, "repo")
    assert job.measure(toy.cfg, toy.best, {})["result"].values() == {"n=1": 100.0, "n=2": 200.0}


def test_profile_and_an_unshipped_tree(toy, job):
    job.add(pack(toy.ws, toy.best), toy.best)
    p = job.profile(toy.cfg, NoProfiler(), toy.best, {})["result"]
    assert p.error is None and p.trace.backend == "none" and p.snapshot == toy.best
    with pytest.raises(ShipError, match="is missing on this node"):
        job.measure(toy.cfg, toy.candidate({"1": 1.0, "2": 1.0}), {})


def test_cancel_kills_the_run(toy, job):
    cand = toy.candidate({"1": 50.0, "2": 200.0}, SLEEP_S=60)
    job.add(pack(toy.ws, cand), cand)
    threading.Timer(1.0, job.cancel).start()
    t0 = time.monotonic()
    out = job.measure(toy.cfg, cand, {})
    assert "cancelled" in out and time.monotonic() - t0 < 30


def test_sweep_ends_the_runs_of_a_dead_job_and_leaves_live_ones(tmp_path):
    import json
    import os
    import subprocess
    import sys

    import psutil

    from kopt_mcp.bench.cluster.node import JOB_ENV, sweep_dead_jobs

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone_created = psutil.Process(gone.pid).create_time()
    gone.wait()
    # a run the dead job's launcher left: a process in the launcher's session, still holding the GPU
    dead = tmp_path / "kopt-node-dead"
    orphan = subprocess.Popen(["sleep", "120"], start_new_session=True, env={**os.environ, JOB_ENV: str(dead)})
    # a process of that session that is not the job's (a recycled pid's session, say) is left alone
    stranger = subprocess.Popen(["sleep", "120"], start_new_session=True)
    (dead / "pids").mkdir(parents=True)
    (dead / "owner.json").write_text(json.dumps({"pid": gone.pid, "create_time": gone_created}))
    for p in (orphan, stranger):  # started: exec'd, its own environment readable
        deadline = time.monotonic() + 10
        while psutil.Process(p.pid).cmdline()[:1] != ["sleep"] and time.monotonic() < deadline:
            time.sleep(0.05)
        (dead / "pids" / f"{p.pid}.json").write_text(json.dumps(
            {"pid": p.pid, "create_time": psutil.Process(p.pid).create_time()}))
    live = tmp_path / "kopt-node-live"
    live.mkdir()
    me = psutil.Process()
    (live / "owner.json").write_text(json.dumps({"pid": me.pid, "create_time": me.create_time()}))

    assert sweep_dead_jobs(tmp_path) == [orphan.pid]
    assert not psutil.pid_exists(orphan.pid)  # killed (and reaped by the sweep: it was our child)
    assert not dead.exists() and live.exists()
    assert stranger.poll() is None
    stranger.kill()
    stranger.wait()


def test_executor_for_is_none_without_ray_address_and_names_the_install_line_without_ray(toy, monkeypatch):
    from kopt_mcp.bench.cluster import ray_executor

    assert ray_executor.executor_for(toy.cfg) is None  # measure on this host
    cfg = toy.cfg.model_copy(update={"cluster": toy.cfg.cluster.model_copy(update={"ray_address": "10.0.0.5:6379"})})
    monkeypatch.setattr(ray_executor, "ray", None)
    with pytest.raises(ImportError, match=r'pip install "kopt-mcp\[ray\]"'):
        ray_executor.executor_for(cfg, "t")


def test_the_node_picks_the_profiler_and_refuses_one_it_lacks(toy, job):
    from kopt_mcp.profilers.ncu import NcuProfiler

    job.gate()
    assert job.make_profiler("auto").name == "none"  # the toy's node leases the CPU: no GPU profiler
    job.add(pack(toy.ws, toy.best), toy.best)
    p = job.profile(toy.cfg, NcuProfiler(binary="no-such-ncu-here"), toy.best, {})["result"]
    assert p.trace is None and "'ncu' is not available on the Ray node" in p.error


def test_a_profiled_run_on_the_node_carries_the_leased_gpus_sm_clock(toy, tmp_path):
    class Steady:  # a fake clock source: the GPU busy at 1980 MHz while the run goes on
        period_s = 0.002

        def read(self):
            return 1980.0, False

    seen = []
    job = NodeJob("t", toy.cfg.gates, switch_probe(tmp_path / "switch"), lease_dir=str(tmp_path / "leases"),
                  cache_root=str(tmp_path / "cache"), clocks=lambda vendor, uuid: seen.append((vendor, uuid)) or Steady())
    try:
        assert job.gate()[0].lease is not None
        job.add(pack(toy.ws, toy.best), toy.best)
        p = job.profile(toy.cfg, NoProfiler(), toy.best, {})["result"]
        assert p.error is None and p.clock is not None and p.clock.sm_mhz == 1980.0
        assert seen and seen[0][0] == "nvidia" and seen[0][1].startswith("GPU-12d4823c")
    finally:
        job.close()
