"""The local executor (kopt_mcp.bench.executor): job leases on this host's GPUs through the GPU gate and
the cross-process lease files; every run in a disposable checkout here (referee.measure).

Each `acquire` builds its own GpuGate over its own LeaseManager, so two measuring calls of one
process (two candidate slots of one HTTP server) hold two leases on two devices, exactly as two
processes would; the lease files keep every process on the host off a device that is leased.
A lease is released at the end of its measuring call (`release`), never kept while the agent thinks.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import git

from kopt_mcp.bench.executor import Progress
from kopt_mcp.bench.measure import Measurement, Profiled, Runner, measure_snapshot, profile_snapshot
from kopt_mcp.bench.runner import run_command
from kopt_mcp.config import TargetConfig
from kopt_mcp.gpus.base import GpuProbe
from kopt_mcp.gpus.clocks import ClockFactory, clock_source
from kopt_mcp.gpus.cpu import CpuLoadProbe
from kopt_mcp.gpus.gate import GateOutcome, GpuGate, IdleThresholds
from kopt_mcp.gpus.lease import Lease, LeaseManager
from kopt_mcp.gpus.load import LoadSources, load_factory
from kopt_mcp.profilers.base import Profiler
from kopt_mcp.results import DeviceInfo


def device_id(lease: Lease) -> str:
    """How the ledger names a device: `<vendor>:<index>:<uuid>` (e.g. "nvidia:0:GPU-8c1f..."), "cpu" for the CPU."""
    return "cpu" if lease.vendor == "cpu" else f"{lease.vendor}:{lease.index}:{lease.uuid}"


class LocalJobLease:
    """One measuring call's hold on one local device (kopt_mcp.bench.executor.JobLease). `device`: the
    device with its binding env; `device_id`: its ledger name; `uuid`: the probe's device id."""

    def __init__(self, gate: GpuGate, lease: Lease, note: str, run: Runner, on_release,
                 clocks: ClockFactory | None = None, loads: LoadSources | None = None) -> None:
        self._gate, self._run, self._on_release = gate, run, on_release
        self._clock_source = clocks(lease.vendor, lease.uuid) if clocks is not None else None
        self._load = loads(lease.vendor, lease.uuid, gate.probe) if loads is not None else None
        self.uuid = lease.uuid
        self.device_id = device_id(lease)
        self.device = DeviceInfo(vendor=lease.vendor, index=lease.index, name=lease.name, env=lease.env, note=note)
        self.released = False

    def _env(self, env: dict[str, str]) -> dict[str, str]:
        return {**env, **self.device.env}  # the lease's binding always wins

    def measure(self, cfg: TargetConfig, ws: git.Repo, tree: str, run_dir: Path, env: dict[str, str], *,
                check: bool = True, base: str | None = None, cancel: threading.Event | None = None,
                pid_dir: Path | None = None) -> Measurement:
        """referee.measure.measure_snapshot on this lease's device (`base` is not needed locally), the
        device's foreign load sampled meanwhile (`Measurement.load`; kopt_mcp.gpus.load)."""
        return measure_snapshot(cfg, ws, tree, run_dir, self._env(env), cancel, pid_dir, check, run=self._run,
                                load=self._load)

    def profile(self, cfg: TargetConfig, profiler: Profiler, ws: git.Repo, tree: str, run_dir: Path,
                env: dict[str, str], *, base: str | None = None, cancel: threading.Event | None = None,
                pid_dir: Path | None = None, check: bool = False) -> Profiled:
        """bench.measure.profile_snapshot on this lease's device, its SM clock sampled meanwhile
        (`Profiled.clock`; kopt_mcp.gpus.clocks) where the device has a clock source."""
        return profile_snapshot(cfg, profiler, ws, tree, run_dir, self._env(env), cancel, pid_dir, run=self._run,
                                clock=self._clock_source, check=check, load=self._load)

    def release(self) -> None:
        """Give the device back (idempotent)."""
        if not self.released:
            self.released = True
            self._gate.release()
            self._on_release(self)


@dataclass
class LocalGrant:
    """What `LocalExecutor.acquire` found (kopt_mcp.bench.executor.Grant)."""

    lease: LocalJobLease | None
    outcome: GateOutcome


@dataclass
class LocalExecutor:
    """Job leases on this host (kopt_mcp.bench.executor.Executor). `probe`, `thresholds`, `wait_s` /
    `poll_s` (s), `cpu_probe` / `cpu_wait_s` (s) and `sleep` / `clock` are the GPU gate's (gpus.gate);
    `lease_dir` the host's lease files; `tag` labels them; `run` runs every command."""

    probe: GpuProbe
    lease_dir: Path
    tag: str = ""
    thresholds: IdleThresholds = field(default_factory=IdleThresholds)
    wait_s: float = 3600.0
    poll_s: float = 600.0
    cpu_probe: CpuLoadProbe | None = None
    cpu_wait_s: float = 60.0
    sleep: object = None
    clock: object = None
    run: Runner = run_command
    #: (vendor, uuid) -> the device's SM clock source or None (kopt_mcp.gpus.clocks.clock_source)
    clocks: ClockFactory | None = clock_source
    #: (vendor, uuid, probe) -> a sampler factory of the device's foreign load per run, or None
    #: (kopt_mcp.gpus.load.load_factory); None: no load figures
    loads: LoadSources | None = load_factory
    _held: list[LocalJobLease] = field(default_factory=list)
    _mutex: threading.Lock = field(default_factory=threading.Lock)

    def _gate(self) -> GpuGate:
        timing = {k: v for k, v in (("sleep", self.sleep), ("clock", self.clock)) if v is not None}
        return GpuGate(self.probe, LeaseManager(self.lease_dir, self.tag), self.thresholds, wait_s=self.wait_s,
                       poll_s=self.poll_s, cpu_probe=self.cpu_probe, cpu_wait_s=self.cpu_wait_s, **timing)

    def acquire(self, progress: Progress | None = None, cancel: threading.Event | None = None,
                prefer: str | None = None) -> LocalGrant:
        """Lease an idle device, waiting up to `wait_s` (the gate's rules); `prefer`: the uuid of the
        device the session used last, taken when it is idle. No device: `lease` None and
        `outcome.reason` says why ("cancelled" when `cancel` was set). Raises ProbeError / OSError
        as GpuGate.acquire."""
        gate = self._gate()
        out = gate.acquire(progress=progress, cancel=cancel, own_pids=frozenset({os.getpid()}), prefer=prefer)
        if out.lease is None:
            return LocalGrant(lease=None, outcome=out)
        job = LocalJobLease(gate, out.lease, out.device_note, self.run, self._forget, self.clocks, self.loads)
        with self._mutex:
            self._held.append(job)
        return LocalGrant(lease=job, outcome=out)

    def _forget(self, job: LocalJobLease) -> None:
        with self._mutex:
            if job in self._held:
                self._held.remove(job)

    @property
    def held(self) -> list[LocalJobLease]:
        """The job leases out now (released ones are gone)."""
        with self._mutex:
            return list(self._held)

    def close(self) -> None:
        """Release every lease this executor handed out (server shutdown)."""
        for job in self.held:
            job.release()
