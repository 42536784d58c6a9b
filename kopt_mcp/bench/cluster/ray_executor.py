"""The Ray executor (`[cluster] ray_address`): job leases on the GPUs of a Ray cluster's nodes.

`RayExecutor.acquire` tries the cluster's alive nodes that have `[cluster] gpu_resource` (the
preferred node first): on each it starts a `NodeJob` actor pinned there (NodeAffinity, not soft)
holding one unit of the resource (`num_gpus=1` for "GPU", so Ray binds the GPU), which runs the
idle gate on the node. A busy GPU refuses: the actor is killed and the next node is tried; with no
idle GPU anywhere it waits `[gates] gpu_poll_s` and tries again, up to `gpu_wait_s` (cancellable).
An actor that does not start within `[cluster] start_timeout_s` means every unit there is held
by other Ray jobs.

`RayLease.measure` / `profile` ship the snapshot (shipping.pack: BEST's tree once per executor
through the object store, a candidate as a thin pack against `base`), run it on the actor, write
the run folder's files into the local `run_dir` and rewrite the result's paths to point there.
A lost actor or node (ActorDiedError, NodeDiedError, a lost object, no answer in time) raises
`DeviceLost` (a run it cut off is ended by the next lease on that host: node.sweep_dead_jobs);
`release` lets the node give its lease file back, then kills the actor.

Ray's worker output is not forwarded to this process (`log_to_driver=False`): under stdio MCP,
stdout is the protocol.

The lease itself (shipping, running, fetching, release) is bench/cluster/ray_lease.py.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import git

from kopt_mcp.bench.cluster.node import NodeJob
from kopt_mcp.bench.cluster.ray_lease import ANSWER_SLACK_S, CLOSE_WAIT_S, RayLease, repo_name
from kopt_mcp.bench.cluster.shipping import pack
from kopt_mcp.bench.executor import Progress
from kopt_mcp.config import ClusterSection, GatesSection, TargetConfig
from kopt_mcp.gpus.base import GpuProbe
from kopt_mcp.gpus.gate import GateOutcome, GpuCheck
from kopt_mcp.results import DeviceInfo

try:
    import ray
    import ray.exceptions as rex
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
except ImportError:  # pragma: no cover - exercised where ray is missing
    ray = None

__all__ = ["ANSWER_SLACK_S", "CLOSE_WAIT_S", "PACK_CACHE", "RayExecutor", "RayGrant", "RayLease", "executor_for",
           "need_ray", "repo_name"]

#: packs kept in the object store (BEST's full tree and recent candidates' diffs)
PACK_CACHE = 16


def need_ray() -> None:
    """Raise ImportError with the install line when Ray is missing."""
    if ray is None:
        raise ImportError('[cluster] ray_address needs Ray: pip install "kopt-mcp[ray]"')

def executor_for(cfg: TargetConfig, tag: str = "", **kw: Any) -> RayExecutor | None:
    """The session's Ray executor when `cfg`'s [cluster] ray_address is set, else None (measure on
    this host). `kw`: RayExecutor's other arguments (probe_factory, lease_dir, sleep, clock).
    Raises ImportError with the install line when ray_address is set and Ray is missing."""
    if not cfg.cluster.ray_address:
        return None
    return RayExecutor(cfg.cluster, cfg.gates, tag=tag, **kw)

@dataclass
class RayGrant:
    """What `RayExecutor.acquire` found: `lease` (None: no device; `outcome.reason` says why)."""

    lease: RayLease | None
    outcome: GateOutcome


@dataclass
class _Node:
    node_id: str
    label: str
    units: int

@dataclass
class RayExecutor:
    """Hands out `RayLease`s on a Ray cluster (kopt_mcp.bench.executor.Executor); module docstring.

    `cluster`: the [cluster] section (ray_address, gpu_resource, start_timeout_s, namespace);
    `gates`: [gates] (idle thresholds, gpu_probe, gpu_wait_s, gpu_poll_s); `tag`: the session's tag
    (written into the nodes' lease files); `probe_factory()`: builds the probe on each node instead
    of make_probe(gates.gpu_probe) (tests: kopt_mcp.bench.cluster.testing.NodeSwitchProbe); `lease_dir`:
    the nodes' lease folder (None: each node's default). `sleep(s)` / `clock() -> s`: injectable.
    Connects to Ray (ray.init(address=ray_address)) on first use unless already connected. Safe to
    share between threads (several candidate slots each holding their own lease).
    Raises ImportError naming the install line when Ray is missing."""

    cluster: ClusterSection
    gates: GatesSection
    tag: str = ""
    probe_factory: Callable[[], GpuProbe] | None = None
    lease_dir: str | None = None
    sleep: Callable[[float], None] | None = None
    clock: Callable[[], float] = time.monotonic
    leases: list[RayLease] = field(default_factory=list)
    lost_nodes: set[str] = field(default_factory=set)
    _packs: OrderedDict = field(default_factory=OrderedDict)
    _mutex: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        need_ray()
        self._actor = ray.remote(NodeJob)

    def connect(self) -> None:
        """Join the cluster at `ray_address` (no-op when this process is connected already)."""
        if not ray.is_initialized():
            ray.init(address=self.cluster.ray_address or "auto", namespace=self.cluster.namespace,
                     log_to_driver=False, logging_level="WARNING", configure_logging=False)

    def packed(self, ws: git.Repo, tree: str, base: str | None) -> Any:
        """The object-store reference of the pack carrying `tree` (against `base`), made once and
        reused (the last PACK_CACHE packs are kept)."""
        key = (tree, base)
        with self._mutex:
            if key in self._packs:
                self._packs.move_to_end(key)
                return self._packs[key]
        ref = ray.put(pack(ws, tree, base))
        with self._mutex:
            self._packs[key] = ref
            while len(self._packs) > PACK_CACHE:
                self._packs.popitem(last=False)
        return ref

    def nodes(self, prefer: str | None = None) -> list[_Node]:
        """The alive nodes that have `gpu_resource`: the one `prefer` names ("<node id>[:...]") first,
        nodes where a lease was lost last (a retry goes elsewhere when it can)."""
        res = self.cluster.gpu_resource
        out = []
        for n in ray.nodes():
            units = int(n.get("Resources", {}).get(res, 0))
            if n.get("Alive") and units > 0:
                label = f"{n.get('NodeManagerAddress', '?')} ({n['NodeID'][:8]})"
                out.append(_Node(n["NodeID"], label, units))
        want = prefer.split(":", 1)[0] if prefer else None
        out.sort(key=lambda x: (x.node_id in self.lost_nodes, x.node_id != want))
        return out

    def _start(self, node: _Node, cancel: threading.Event | None) -> tuple[Any, Any]:
        """Start a NodeJob actor on `node` and ask for its gate; (actor, gate ref) or (actor, None)
        when it did not start within start_timeout_s or `cancel` was set."""
        res = self.cluster.gpu_resource
        kw: dict[str, Any] = {"num_gpus": 1} if res == "GPU" else {"resources": {res: 1}}
        actor = self._actor.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
            num_cpus=0, max_concurrency=4, max_restarts=0, **kw,
        ).remote(self.tag, self.gates, self.probe_factory, self.lease_dir)
        ref = actor.gate.remote()
        end = time.monotonic() + self.cluster.start_timeout_s
        while time.monotonic() < end:
            if cancel is not None and cancel.is_set():
                return actor, None
            ready, _ = ray.wait([ref], timeout=min(0.5, max(0.01, end - time.monotonic())))
            if ready:
                return actor, ref
        return actor, None

    def _try(self, node: _Node, cancel: threading.Event | None) -> tuple[RayLease | None, GateOutcome | None, str, Any]:
        """One gate on `node`: (lease, its outcome, "", None), or (None, outcome or None, why not,
        the refused actor still holding its GPU, or None when there is none: the caller kills it)."""
        actor, ref = self._start(node, cancel)
        if ref is None:
            ray.kill(actor)
            return None, None, (f"every {self.cluster.gpu_resource} there is held by other Ray jobs (the lease's "
                                f"actor did not start in {self.cluster.start_timeout_s:g} s)"), None
        try:
            outcome, facts = ray.get(ref)
        except rex.RayTaskError as e:
            ray.kill(actor)
            return None, None, f"the idle gate failed there: {getattr(e, 'cause', e)}", None
        except rex.RayError as e:  # died, unschedulable (the node went away since it was listed), ...
            ray.kill(actor)
            return None, None, f"the lease's actor could not run there ({type(e).__name__}: {str(e)[:200]})", None
        lease = outcome.lease
        if lease is None:
            return None, outcome, outcome.reason or "busy", actor
        host = facts.get("host") or node.label
        label = f"{facts.get('ip') or '?'} ({node.node_id[:8]}, {host})"
        note = f"Ray node {label}, GPU {lease.index} {lease.uuid}" + (
            f"; {outcome.device_note}" if outcome.device_note else "")
        device = DeviceInfo(vendor=lease.vendor, index=lease.index, name=f"{lease.name} on Ray node {label}",
                            env=dict(lease.env), note=note)
        rl = RayLease(self, actor, device, node.node_id, lease.index, label, lease.uuid)
        with self._mutex:
            self.leases.append(rl)
        return rl, outcome, "", None

    def _on_node(self, node: _Node, cancel: threading.Event | None) -> tuple[RayLease | None, GateOutcome | None, str]:
        """Up to one try per unit of the resource on `node`: a refused actor keeps its busy GPU until
        the node is done, so Ray assigns the next try another one. (lease, outcome, why not)."""
        refused: list[Any] = []
        outcome, reason = None, ""
        try:
            for _ in range(node.units):
                lease, outcome, reason, actor = self._try(node, cancel)
                if lease is not None or actor is None:
                    return lease, outcome, reason
                refused.append(actor)
            return None, outcome, reason
        finally:
            for a in refused:
                ray.kill(a)

    def acquire(self, progress: Progress | None = None, cancel: threading.Event | None = None,
                prefer: str | None = None) -> RayGrant:
        """A lease on an idle GPU of the cluster (module docstring), waiting up to [gates] gpu_wait_s s.

        `progress(waited_s, wait_s, message)` between rounds; `prefer`: a RayLease.device_id (its node is
        tried first). Returns RayGrant(lease None) with the reason after the wait ("no idle GPU on
        the Ray cluster after N s: node ...: why; ..."), on `cancel` ("cancelled"), never raises
        for a busy or lost node."""
        self.connect()
        start, polls = self.clock(), 0
        wait_s, poll_s = self.gates.gpu_wait_s, self.gates.gpu_poll_s
        while True:
            if cancel is not None and cancel.is_set():
                return RayGrant(None, GateOutcome(lease=None, waited_s=self.clock() - start, polls=polls,
                                                  reason="cancelled"))
            polls += 1
            why: list[str] = []
            checks: list[GpuCheck] = []
            nodes = self.nodes(prefer)
            for node in nodes:
                lease, outcome, reason = self._on_node(node, cancel)
                if lease is not None and outcome is not None:
                    return RayGrant(lease, outcome.model_copy(update={"waited_s": self.clock() - start,
                                                                      "polls": polls}))
                if outcome is not None:
                    checks += outcome.checks
                why.append(f"node {node.label}: {reason}")
            if not nodes:
                why.append(f"no alive node of the Ray cluster has the resource {self.cluster.gpu_resource!r} "
                           "(check [cluster] gpu_resource and `ray status`)")
            waited = self.clock() - start
            if waited >= wait_s:
                return RayGrant(None, GateOutcome(lease=None, checks=checks, waited_s=waited, polls=polls,
                                                  reason=f"no idle GPU on the Ray cluster after {wait_s:g} s: "
                                                  + "; ".join(why)))
            pause = min(poll_s, wait_s - waited)
            if progress is not None:
                progress(waited, wait_s, f"no idle GPU on the Ray cluster yet ({'; '.join(why)}); "
                         f"next check in {pause:g} s")
            if self.sleep is not None:
                self.sleep(pause)
            elif cancel is not None:
                cancel.wait(pause)
            else:
                time.sleep(pause)

    def _forget(self, lease: RayLease) -> None:
        with self._mutex:
            if lease in self.leases:
                self.leases.remove(lease)

    def close(self) -> None:
        """Release every lease this executor holds and drop its packs (server shutdown)."""
        with self._mutex:
            held = list(self.leases)
        for lease in held:
            lease.release()
        with self._mutex:
            self._packs.clear()
