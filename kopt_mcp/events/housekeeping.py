"""Diagnostic events of housekeeping (Store.log: no state change goes with them): the GPU gate and
job leases, BEST moved by another slot, a lost device, benchmark outputs, a cancelled call, leftovers
and stale git locks cleaned at start, the state folder restored, a failed Stop Summary commit."""

from __future__ import annotations

from typing import Literal

from kopt_mcp.events.base import _Event, _OnSlot
from kopt_mcp.events.payloads import FileChangeRecord


class GpuGate(_OnSlot):
    """find_idle_gpu: leased or not, why not, time waited (s)."""

    event: Literal["gpu_gate"]
    leased: bool | None = None
    reason: str | None = None
    waited_s: float | None = None


class LeaseHeld(_OnSlot):
    """One measuring call's job lease, written when it ends: the device (`device`, e.g.
    "nvidia:0:GPU-<uuid>"), how long the gate waited for it (`waited_s`, s) and when it was held
    (`held_from`, `held_until`: epoch s). Two records of one device whose spans overlap are a double
    booking; the waits per slot show whether slots shared the GPUs fairly
    (benchmarks/slots_gpu/many.py reads both)."""

    event: Literal["job_lease"]
    waited_s: float | None = None
    held_from: float | None = None
    held_until: float | None = None


class BestMoved(_Event):
    """Another candidate slot moved BEST (the serialized commit step): this slot follows it from
    `previous` to `best_commit`; `by` names the slot that committed, `action` what happened to this
    slot's workspace (edits re-applied, or archived as `conflict`)."""

    required = ("best_commit",)
    event: Literal["best_moved"]
    previous: str = ""
    best_commit: str = ""
    by: str | None = None
    action: str = ""


class DeviceLost(_Event):
    """A job lease's device or node was lost mid-call (kopt_mcp.errors.DeviceLost): `retrying` on a new
    lease, or not (the call then ends `failed`)."""

    event: Literal["device_lost"]
    device: str | None = None
    error: str = ""
    retrying: bool | None = None


class BenchmarkOutputs(_Event):
    """Tracked files a run of unchanged BEST_COMMIT writes: `added` now, all `outputs` so far."""

    event: Literal["benchmark_outputs"]
    added: list[str] = []
    outputs: list[str] = []


class CancelledOp(_Event):
    """The client cancelled `operation` (the process tree was killed, the lease released)."""

    event: Literal["cancelled"]
    operation: str = ""


class LeftoversEnded(_Event):
    """Runs a killed server left running (their pids) were ended at start."""

    event: Literal["leftovers_ended"]
    pids: list[int] = []
    note: str = ""


class StaleGitLocksRemoved(_Event):
    """Git lock files a killed git process left were removed at start."""

    event: Literal["stale_git_locks_removed"]
    paths: list[str] = []


class StateRestored(_Event):
    """A run changed the session's state folder and the referee put it back (referee/state_guard.py):
    `changes` (kind, path relative to the state folder, or a ref name) and what was not restored
    exactly (`lost`)."""

    event: Literal["state_restored"]
    changes: list[FileChangeRecord] = []
    lost: list[str] = []


class StopSummaryCommitFailed(_Event):
    """The Stop Summary could not be committed (the git error)."""

    event: Literal["stop_summary_commit_failed"]
    error: str = ""
