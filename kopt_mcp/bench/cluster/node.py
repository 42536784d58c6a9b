"""The node side of a Ray lease: what the lease's actor does on the node (plain Python, no Ray needed).

`RayExecutor` wraps `NodeJob` with `ray.remote` and starts one per lease, pinned to a node and
holding one unit of the GPU resource there. The job first runs the idle gate on its node (the
configured probe, only the GPU(s) Ray assigned to it; the node's lease files, so a local kopt-mcp
there never shares the GPU), then takes shipped snapshots (`add`) and runs the benchmark or the
profiler in disposable checkouts of them with `referee.measure.measure_snapshot` /
`profile_snapshot` (the same code as a local run: containment, correctness gate, run changes
against the snapshot's blob hashes), and sends back the result with the run folder's files.

Each job keeps the snapshots shipped to it in a store of its own. Before every run the snapshot's
objects there are re-hashed (`NodeRepo.verify`): git trusts object files by name, so an object
that a run rewrote in the store would otherwise pass unnoticed into the next checkout (BEST's, in
the A/B pairs); a damaged store is dropped and the lease ships the snapshots anew.

A job whose worker dies without `close` (the node's raylet killed, the worker crashed) cannot end
its run: Ray SIGKILLs a dying worker's children, the run's launcher among them, so the benchmark
would be orphaned with the GPU. The next job started on that host ends such leftovers first
(`sweep_dead_jobs`: every process still in a dead job's recorded run sessions) and removes the
dead job's folder.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from kopt_mcp.bench.cluster.shipping import NodeRepo, collect, node_env
from kopt_mcp.bench.measure import Profiled, measure_snapshot, profile_snapshot
from kopt_mcp.bench.runner import kill_all, same_process
from kopt_mcp.config import GatesSection, TargetConfig
from kopt_mcp.errors import Cancelled, ShipError, SnapshotMissing
from kopt_mcp.gpus import make_probe
from kopt_mcp.gpus.base import GpuProbe, GpuReading
from kopt_mcp.gpus.clocks import ClockFactory, clock_source
from kopt_mcp.gpus.cpu import CpuLoadProbe
from kopt_mcp.gpus.gate import GateOutcome, GpuGate, IdleThresholds
from kopt_mcp.gpus.lease import LeaseManager
from kopt_mcp.gpus.load import load_factory
from kopt_mcp.profilers import make_profiler

#: where a node host keeps the JIT caches across leases: $KOPT_NODE_CACHE, else this folder of the
#: temp dir
CACHE_DIR = "kopt-mcp-node-cache"
CACHE_ENV = "KOPT_NODE_CACHE"
JOB_PREFIX = "kopt-node-"
#: set in every run's environment to the job's folder: what `sweep_dead_jobs` recognises a run by
JOB_ENV = "KOPT_NODE_JOB"
OWNER_FILE = "owner.json"


def _end_session(sid: int, since: float, job: str) -> list[int]:
    """SIGKILL every process of session `sid` started at or after `since` (epoch s) whose environment
    names `job` (JOB_ENV: a recycled pid's unrelated session is never touched); their pids."""
    procs = []
    for q in psutil.process_iter():
        try:
            if (q.pid != os.getpid() and os.getsid(q.pid) == sid and q.create_time() >= since - 0.5
                    and q.environ().get(JOB_ENV) == job):
                procs.append(q)
        except (psutil.Error, OSError):
            pass
    return kill_all(procs)


def sweep_dead_jobs(base: Path | None = None) -> list[int]:
    """End what jobs that died without `close` left on this host (module docstring): for each
    `kopt-node-*` folder under `base` (default: the temp dir) whose owner process is gone, kill the
    processes of every run it recorded (the runs' sessions: the launcher was their leader; only
    processes whose environment names that job) and remove the folder. Jobs of live workers and folders without an owner file are left alone.
    Returns the pids killed. Never raises for unreadable records."""
    killed: list[int] = []
    for d in (base or Path(tempfile.gettempdir())).glob(JOB_PREFIX + "*"):
        try:
            owner = json.loads((d / OWNER_FILE).read_text(encoding="utf-8"))
            if same_process(int(owner["pid"]), float(owner["create_time"])) is not None:
                continue
        except (OSError, ValueError, KeyError, TypeError):
            continue
        for rec in sorted((d / "pids").glob("*.json")):
            try:
                r = json.loads(rec.read_text(encoding="utf-8"))
                killed += _end_session(int(r["pid"]), float(r["create_time"]), str(d))
            except (OSError, ValueError, KeyError, TypeError):
                pass
        shutil.rmtree(d, ignore_errors=True)
    return killed


class _Only:
    """A probe that shows only the GPUs with the given indices (those Ray assigned to the lease)."""

    def __init__(self, probe: GpuProbe, indices: set[int]) -> None:
        self.probe, self.indices, self.name = probe, indices, probe.name

    def read(self) -> list[GpuReading]:
        return [r for r in self.probe.read() if r.index in self.indices]


def _ray_context() -> tuple[str, str, list[int]]:
    """(node id, node ip, GPU indices Ray assigned to this worker), or ("", "", []) outside Ray."""
    try:
        import ray
    except ImportError:
        return "", "", []
    if not ray.is_initialized():
        return "", "", []
    ids = []
    for g in ray.get_gpu_ids():
        try:
            ids.append(int(g))
        except (TypeError, ValueError):
            pass
    return ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address(), ids


class NodeJob:
    """One lease's work on its node. `tag`: the session's tag (written into the node's lease
    file); `gates`: the [gates] section (thresholds, gpu_probe, gpu_poll_s); `probe_factory()`: the
    probe to use instead of `make_probe(gates.gpu_probe)` (tests: recorded outputs); `lease_dir`:
    the node's lease folder (None: its default, $KOPT_LEASE_DIR or /tmp/kopt-mcp-leases); `cache_root`:
    the host's lasting folder for JIT caches (None: $KOPT_NODE_CACHE, else CACHE_DIR in the temp
    dir); `clocks`: (vendor, uuid) -> the leased GPU's SM clock source, sampled during profiled
    runs (kopt_mcp.gpus.clocks.clock_source; None: no clock figures). Everything else, shipped
    snapshots included, lives in one temporary folder of the job, removed by `close`. Starting, it ends what dead jobs left on this host (`sweep_dead_jobs`; the pids killed are in `swept`)."""

    def __init__(self, tag: str, gates: GatesSection, probe_factory: Callable[[], GpuProbe] | None = None,
                 lease_dir: str | None = None, cache_root: str | None = None,
                 clocks: ClockFactory | None = clock_source) -> None:
        self.tag, self.gates, self.probe_factory, self.lease_dir = tag, gates, probe_factory, lease_dir
        self.clocks = clocks
        self.swept = sweep_dead_jobs()
        self.root = Path(tempfile.mkdtemp(prefix=JOB_PREFIX))
        me = psutil.Process()
        (self.root / OWNER_FILE).write_text(json.dumps({"pid": me.pid, "create_time": me.create_time()}),
                                            encoding="utf-8")
        self.pid_dir = self.root / "pids"
        self.cache_root = Path(cache_root or os.environ.get(CACHE_ENV) or Path(tempfile.gettempdir()) / CACHE_DIR)
        self.store: NodeRepo | None = None
        self.gpu_gate: GpuGate | None = None
        self.binding: dict[str, str] = {}
        self._cancel = threading.Event()
        self._lock = threading.Lock()

    def gate(self) -> tuple[GateOutcome, dict[str, Any]]:
        """Run the idle gate once on this node (no waiting: the executor waits and tries other nodes).

        Returns (outcome, node facts: node_id, ip, host, gpu_ids). With a lease the job keeps it
        until `close`. Raises ProbeError when the probe cannot read the GPUs."""
        node_id, ip, gpu_ids = _ray_context()
        probe = self.probe_factory() if self.probe_factory is not None else make_probe(self.gates.gpu_probe)
        if gpu_ids and probe.name != "none":
            probe = _Only(probe, set(gpu_ids))
        g = self.gates
        self.gpu_gate = GpuGate(probe, LeaseManager(Path(self.lease_dir) if self.lease_dir else None, self.tag),
                                IdleThresholds(util_pct=g.idle_util_pct, mem_mib=g.idle_mem_mib, cpu_pct=g.idle_cpu_pct,
                                               cpu_exclusive=g.exclusive_cpu),
                                wait_s=0.0, poll_s=g.gpu_poll_s,
                                cpu_probe=CpuLoadProbe() if g.idle_cpu_pct < 100 or g.exclusive_cpu else None,
                                cpu_wait_s=0.0)
        outcome = self.gpu_gate.acquire()
        if outcome.lease is not None:
            self.binding = dict(outcome.lease.env)
        return outcome, {"node_id": node_id, "ip": ip, "host": socket.gethostname(), "gpu_ids": gpu_ids}

    def _repo(self, name: str) -> NodeRepo:
        """This job's snapshot store (in its own folder: what a run damages there harms no other job)."""
        if self.store is None:
            self.store = NodeRepo(self.root / "repo" / (name or "tree"))
        return self.store

    def _drop_store(self) -> None:
        if self.store is not None:
            self.store.repo.close()  # its persistent `git cat-file` processes
            shutil.rmtree(self.store.path, ignore_errors=True)
            self.store = None

    def has(self, tree: str, name: str = "tree") -> bool:
        """True when snapshot `tree` is complete here."""
        return self._repo(name).has(tree)

    def add(self, data: bytes, tree: str, name: str = "tree") -> int:
        """Add a shipped pack (shipping.pack) that completes `tree`; `name`: the user's repository
        folder name. Returns the pack's size in bytes. Raises ShipError."""
        self._repo(name).add(data, tree)
        return len(data)

    def _run(self, work: Callable[[NodeRepo, Path, threading.Event], Any], tree: str) -> dict[str, Any]:
        """Run `work(store, run_dir, cancel)` for snapshot `tree`; the result with the run folder's files."""
        if self.store is None:
            raise SnapshotMissing(f"snapshot {tree[:12]} was not shipped to this node: `add` its pack first")
        try:
            if not self.store.has(tree):  # shipped trees are complete: incomplete means damaged
                raise ShipError(f"snapshot {tree[:12]} is missing on this node or its objects cannot be read")
            self.store.verify(tree)
        except ShipError as e:  # drop the damaged store: the next call ships the snapshots anew
            self._drop_store()
            raise SnapshotMissing(f"{e}; the job's snapshot store was removed: call again to ship it anew") from e
        with self._lock:  # one run at a time on the lease's device
            self._cancel.clear()
            run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=self.root))
            try:
                try:
                    result = work(self.store, run_dir, self._cancel)
                except Cancelled as e:
                    return {"cancelled": str(e)}
                return {"result": result, "run_dir": str(run_dir), "files": collect(run_dir)}
            finally:
                shutil.rmtree(run_dir, ignore_errors=True)

    def _env(self, env: dict[str, str]) -> dict[str, str]:
        """A run's environment here: shipping.node_env, and JOB_ENV naming this job."""
        return {**node_env(env, self.binding, self.cache_root), JOB_ENV: str(self.root)}

    def measure(self, cfg: TargetConfig, tree: str, env: dict[str, str], check: bool = True) -> dict[str, Any]:
        """referee.measure.measure_snapshot of `tree` here, bound to this lease's device.
        Returns {"result": Measurement, "run_dir": node path, "files": {relative path: bytes}} or
        {"cancelled": message}. Raises ShipError when `tree` was not shipped."""
        return self._run(lambda store, run_dir, cancel: measure_snapshot(
            cfg, store.repo, tree, run_dir, self._env(env), cancel, self.pid_dir, check, load=self._load()), tree)

    def _load(self):
        """The held device's foreign-load sampler factory (kopt_mcp.gpus.load), or None."""
        held = self.gpu_gate.held if self.gpu_gate is not None else None
        return load_factory(held.vendor, held.uuid, self.gpu_gate.probe) if held is not None else None

    def make_profiler(self, backend: str, detail: bool = False) -> Any:
        """profilers.make_profiler for [profiler] `backend` as this node sees its tools and its
        lease's vendor (the server may have neither). Raises ProfilerError as make_profiler."""
        vendor = "cpu"
        if self.gpu_gate is not None and self.gpu_gate.held is not None:
            vendor = self.gpu_gate.held.vendor
        return make_profiler(backend, vendor, detail=detail)

    def profile(self, cfg: TargetConfig, profiler: Any, tree: str, env: dict[str, str],
                check: bool = False) -> dict[str, Any]:
        """referee.measure.profile_snapshot of `tree` here; returns as `measure` (result: Profiled).
        A profiler this node lacks gives a Profiled with the error (nothing runs)."""
        if not profiler.available():
            host = socket.gethostname()
            return {"result": Profiled(trace=None, log_path="", snapshot=tree, error=(
                f"the profiler {profiler.name!r} is not available on the Ray node {host}: install it there "
                "(cupti-python, ncu or rocprofv3, as on the server) or set [profiler] backend")),
                "run_dir": "", "files": {}}

        held = self.gpu_gate.held if self.gpu_gate is not None else None
        source = self.clocks(held.vendor, held.uuid) if (self.clocks is not None and held is not None) else None
        return self._run(lambda store, run_dir, cancel: profile_snapshot(
            cfg, profiler, store.repo, tree, run_dir, self._env(env), cancel, self.pid_dir, clock=source, check=check,
            load=self._load()),
            tree)

    def cancel(self) -> None:
        """Cancel the run in progress (its process tree is killed; it returns {"cancelled": ...})."""
        self._cancel.set()

    def close(self) -> None:
        """Give back the node's lease file and remove this job's folder (idempotent)."""
        self._cancel.set()
        self._drop_store()
        if self.gpu_gate is not None:
            self.gpu_gate.release()
        shutil.rmtree(self.root, ignore_errors=True)
