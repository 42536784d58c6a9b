"""One measuring call's hold on one GPU of one Ray node (`RayLease`, handed out by
bench/cluster/ray_executor.py's RayExecutor): ship the snapshot to the node's job, run it there, fetch
the run folder's files into the local run folder. A lost actor or node (ActorDiedError,
NodeDiedError, a lost object, no answer in time) raises `DeviceLost`; `release` lets the node give
its lease file back, then kills the actor."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import git

from kopt_mcp.bench.cluster.shipping import relocate, restore
from kopt_mcp.config import TargetConfig
from kopt_mcp.errors import Cancelled, DeviceLost, SnapshotMissing
from kopt_mcp.results import DeviceInfo

if TYPE_CHECKING:
    from kopt_mcp.bench.cluster.ray_executor import RayExecutor
    from kopt_mcp.bench.measure import Measurement, Profiled
    from kopt_mcp.profilers.base import Profiler

try:
    import ray
    import ray.exceptions as rex
except ImportError:  # pragma: no cover - exercised where ray is missing
    ray = None

#: slack (s) over the configured timeouts before a silent node counts as lost (export, shipping, Ray)
ANSWER_SLACK_S = 300.0
#: how long (s) `release` waits for the node to give its lease file back before killing the actor
CLOSE_WAIT_S = 10.0


def _lost_errors() -> tuple[type[BaseException], ...]:
    """Ray's exceptions that mean the lease's actor, worker or node is gone."""
    names = ("RayActorError", "ActorDiedError", "ActorUnavailableError", "NodeDiedError", "WorkerCrashedError",
             "ObjectLostError", "OwnerDiedError", "LocalRayletDiedError", "RaySystemError",
             "ObjectFetchTimedOutError", "ReferenceCountingAssertionError")
    return tuple(getattr(rex, n) for n in names if isinstance(getattr(rex, n, None), type))

def repo_name(ws: git.Repo) -> str:
    """The user's repository folder name (checkouts on the node are named like it), else "tree"."""
    common = Path(ws.common_dir).resolve()
    return (common.parent.name if common.name == ".git" else "") or "tree"

class RayLease:
    """One measuring call's hold on one GPU of one Ray node (kopt_mcp.bench.executor.JobLease).

    `device.name` says GPU and node; `device_id` ("<node id>:<vendor>:<index>:<uuid>") is how the
    ledger names it and what `RayExecutor.acquire(prefer=...)` takes back.
    Every method raises DeviceLost when the node or its actor is gone."""

    def __init__(self, executor: RayExecutor, actor: Any, device: DeviceInfo, node_id: str, index: int,
                 label: str, uuid: str = "") -> None:
        self.executor, self.actor, self.device = executor, actor, device
        self.node_id, self.index, self.label = node_id, index, label
        self.device_id = f"{node_id}:{device.vendor}:{index}:{uuid}"
        self.trees: set[str] = set()
        #: (tree, pack bytes) of every pack this lease sent (a tree its host already had is not sent)
        self.sent: list[tuple[str, int]] = []
        self.released = False
        self.lost = False

    # -- calls -------------------------------------------------------------------------------

    def _get(self, ref: Any, limit_s: float, cancel: threading.Event | None = None) -> Any:
        """The value of actor call `ref`; on `cancel` the node's run is cancelled (its tree killed).
        Raises DeviceLost when the node is gone or silent for `limit_s` s; a remote exception is
        re-raised as itself."""
        deadline = time.monotonic() + limit_s
        asked = False
        while True:
            ready, _ = ray.wait([ref], timeout=0.2)
            if ready:
                break
            if cancel is not None and cancel.is_set() and not asked:
                self.actor.cancel.remote()
                asked = True
            if time.monotonic() > deadline:
                self.lost = True
                self.executor.lost_nodes.add(self.node_id)
                ray.kill(self.actor)
                raise DeviceLost(f"the Ray node {self.label} did not answer in {limit_s:g} s: its actor was "
                                 "killed; the measuring call is retried once on a new lease")
        try:
            return ray.get(ref)
        except rex.RayTaskError as e:  # our code raised on the node: raise the same error here
            cause = getattr(e, "cause", None)
            if isinstance(cause, BaseException) and not isinstance(cause, _lost_errors()):
                raise cause from e
            raise
        except _lost_errors() as e:
            self.lost = True
            self.executor.lost_nodes.add(self.node_id)
            raise DeviceLost(f"the Ray node {self.label} (GPU {self.index}) was lost during the run "
                             f"({type(e).__name__}): the measuring call is retried once on a new lease, "
                             "then ruled failed") from e

    def _ship(self, ws: git.Repo, tree: str, base: str | None) -> None:
        """Make snapshot `tree` complete on the node's job: nothing when it has it already, else BEST
        (`base`) as a full pack first if needed, then `tree` as a thin pack against it (or full
        without a base). The packs' object-store references are the executor's, reused by every lease."""
        if tree in self.trees:
            return
        name = repo_name(ws)
        if self._get(self.actor.has.remote(tree, name), ANSWER_SLACK_S):
            self.trees.add(tree)
            return
        if base and base != tree and base not in self.trees:
            self._ship(ws, base, None)
        ref = self.executor.packed(ws, tree, base if base and base != tree else None)
        self.sent.append((tree, self._get(self.actor.add.remote(ref, tree, name), ANSWER_SLACK_S)))
        self.trees.add(tree)

    def _fetch(self, out: dict[str, Any], run_dir: Path) -> Any:
        """Write the returned files into `run_dir`; the result with its paths moved there."""
        if "cancelled" in out:
            raise Cancelled(out["cancelled"])
        run_dir.mkdir(parents=True, exist_ok=True)
        restore(out["files"], run_dir)
        return relocate(out["result"], out["run_dir"], str(run_dir)) if out["run_dir"] else out["result"]

    def _run(self, ws: git.Repo, tree: str, base: str | None, run_dir: Path, limit: float,
             cancel: threading.Event | None, call: Callable[[], Any]) -> Any:
        """Ship `tree`, run `call()` on the node, fetch its files into `run_dir`. A snapshot the node
        found damaged in its store (rewritten there, e.g. by an earlier run) is shipped anew once."""
        self._live()
        for again in (False, True):
            self._ship(ws, tree, base)
            try:
                return self._fetch(self._get(call(), limit, cancel), run_dir)
            except SnapshotMissing:
                if again:
                    raise
                self.trees.clear()  # the node dropped its store: everything goes again
        raise AssertionError("unreachable")

    def measure(self, cfg: TargetConfig, ws: git.Repo, tree: str, run_dir: Path, env: dict[str, str], *,
                check: bool = True, base: str | None = None, cancel: threading.Event | None = None,
                pid_dir: Path | None = None) -> Measurement:
        """Run the benchmark on the node in a disposable checkout of tree `tree` (shipped as a diff
        against `base` where given); as referee.measure.measure_snapshot, with `run_dir` filled from
        the node. `pid_dir` is the node's own (the run is recorded there). Raises DeviceLost,
        Cancelled (`cancel` set), ShipError, or what measure_snapshot raises on the node."""
        limit = cfg.benchmark.timeout_s + cfg.correctness.timeout_s + ANSWER_SLACK_S
        return self._run(ws, tree, base, run_dir, limit, cancel, lambda: self.actor.measure.remote(cfg, tree, env, check))

    def profile(self, cfg: TargetConfig, profiler: Profiler, ws: git.Repo, tree: str, run_dir: Path,
                env: dict[str, str], *, base: str | None = None, cancel: threading.Event | None = None,
                pid_dir: Path | None = None, check: bool = False) -> Profiled:
        """Run the benchmark under `profiler` on the node; as bench.measure.profile_snapshot. The
        profiler object is sent as it is: build it there with `make_profiler`; one the node lacks
        comes back as a Profiled with the error. Raises as `measure`."""
        limit = cfg.profiler.timeout_s + ANSWER_SLACK_S
        return self._run(ws, tree, base, run_dir, limit, cancel, lambda: self.actor.profile.remote(cfg, profiler, tree, env, check))

    def make_profiler(self, backend: str, detail: bool = False) -> Profiler:
        """The profiler for [profiler] `backend` chosen on the node (its tools, its GPU's vendor),
        for `profile`: "auto" on a server without GPU tools would pick none. Raises ProfilerError
        (as profilers.make_profiler, on the node) or DeviceLost."""
        self._live()
        return self._get(self.actor.make_profiler.remote(backend, detail), ANSWER_SLACK_S)

    def _live(self) -> None:
        if self.released:
            raise DeviceLost(f"the lease on {self.label} was already released: acquire a new one")
        if self.lost:
            raise DeviceLost(f"the Ray node {self.label} was lost: acquire a new lease")

    def release(self) -> None:
        """Give the GPU back: the node releases its lease file, then the actor is killed (idempotent)."""
        if self.released:
            return
        self.released = True
        self.executor._forget(self)
        if not self.lost:
            with contextlib.suppress(Exception):  # the actor is killed below whatever happened
                ray.wait([self.actor.close.remote()], timeout=CLOSE_WAIT_S)
        ray.kill(self.actor)
