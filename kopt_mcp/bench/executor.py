"""Where measuring runs execute: the seam between the referee and the machines (protocols only).

A measuring call (the baseline, save_and_test, the commit's re-measure, trace, warm-up) takes ONE
job lease from the session's `Executor` at its start, runs every benchmark and profiler run of the
call through that lease, and releases it at the end of the call (per-job leases: no device is held
while the agent thinks). All runs of one lease use one device, so the A/B pairs of one verdict always
run on one GPU; `JobLease.device` names it and the ledger records it for every run.

Implementations:
- local (kopt_mcp.bench.local.LocalExecutor: this host's GPU gate and cross-process lease files;
  runs in disposable checkouts here; every acquire its own gate, so one process can hold several);
- Ray (`[cluster] ray_address`): the lease is a Ray actor holding `num_gpus=1` on a node whose GPU
  passed the idle gate there; snapshots are shipped through Ray's object store (BEST's tree once,
  a candidate as its diff against `base`) and logs, metrics and traces come back into `run_dir`.

A lease whose device or node is lost mid-job raises `DeviceLost`: the referee retries the whole
measuring call once on a new lease (so A/B pairs stay on one device), then rules it `failed`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the protocols only name these types
    import git

    from kopt_mcp.bench.measure import Measurement, Profiled
    from kopt_mcp.config import TargetConfig
    from kopt_mcp.gpus.gate import GateOutcome
    from kopt_mcp.profilers.base import Profiler
    from kopt_mcp.results import DeviceInfo

Progress = Callable[[float, float, str], None]


class JobLease(Protocol):
    """One measuring call's hold on one device. Every method may raise `DeviceLost`; a cancelled
    run returns with `run.cancelled` set (the caller raises Cancelled)."""

    device: DeviceInfo
    #: how the ledger names the device: "<vendor>:<index>:<uuid>" locally ("cpu" for the CPU),
    #: e.g. "<node>:nvidia:<index>:<uuid>" on Ray; also what `Executor.acquire(prefer=...)` takes
    #: when the lease has no `uuid` attribute (the local lease's `uuid` is the probe's GPU uuid)
    device_id: str

    def measure(self, cfg: TargetConfig, ws: git.Repo, tree: str, run_dir: Path, env: dict[str, str], *,
                check: bool = True, base: str | None = None, cancel: threading.Event | None = None,
                pid_dir: Path | None = None) -> Measurement:
        """Run the benchmark in a disposable checkout of tree object `tree` (`base`: the BEST tree
        it differs from, for shipping a diff) on this lease's device; as referee.measure.measure_snapshot."""
        ...

    def profile(self, cfg: TargetConfig, profiler: Profiler, ws: git.Repo, tree: str, run_dir: Path,
                env: dict[str, str], *, base: str | None = None, cancel: threading.Event | None = None,
                pid_dir: Path | None = None, check: bool = False) -> Profiled:
        """Run the benchmark under `profiler` on this lease's device, read its results too (`check`:
        the [correctness] command after it); as bench.measure.profile_snapshot."""
        ...

    def release(self) -> None:
        """Give the device back (idempotent)."""
        ...


class Grant(Protocol):
    """What `Executor.acquire` found: `lease` (None: no device, `outcome.reason` says why)."""

    lease: JobLease | None
    outcome: GateOutcome


class Executor(Protocol):
    """Hands out job leases. `prefer`: the device (uuid or "node:index") the session used last,
    taken when it is idle."""

    def acquire(self, progress: Progress | None = None, cancel: threading.Event | None = None,
                prefer: str | None = None) -> Grant:
        ...

    def close(self) -> None:
        """Release everything this executor holds (server shutdown)."""
        ...
