"""The GPU availability gate (DESIGN.md): find an idle GPU, lease it, bind it; else wait and retry.

Idle means: no compute process (other than our own), utilization below `util_pct` and memory
used below `mem_mib`, and no other kopt-mcp process holds its lease.

Without a GPU (probe "none") the CPU is the device. With a `cpu_probe`, the gate waits while other
processes use `cpu_pct` % of all cores or more (polling every min(poll_s, CPU_POLL_S) s, up to
`cpu_wait_s`), then hands out the CPU lease in any case: the note says how busy the cores were.
A benchmark seen using more than one core lowers it (rules.load.cpu_limit_pct, gpus.load.recent_bench_cores).

A GPU held by a kopt-mcp job lease (another slot or session measuring: one call, minutes at most) is
checked again every min(poll_s, JOB_POLL_S) s, not every poll_s: with two slots sharing one GPU, the
waiting slot measures as soon as the other's call ends, instead of sleeping the 600 s meant for a
foreign job (seen on an H100, 2026-11-24: slot a waited out a whole 590 s device call).

First come, first served among kopt-mcp waiters (kopt_mcp.gpus.waitqueue): polling alone let a slot
that ended its call and started the next at once take the GPU back before the waiting slot's next
poll, again and again. So a waiter takes a ticket on each GPU it waits for while a kopt-mcp job holds
it, and a free GPU with an earlier live ticket of another waiter on it is not taken ("promised to an
earlier waiter": checked again after JOB_POLL_S s) until that waiter has taken it or is gone. A ticket
is kept while the GPU is leased by a kopt-mcp job, and for JOB_GRACE_S s after it was last seen so
(a finished benchmark's utilization lingers for a moment after its lease ends), then given up: a
GPU taken over by a foreign job is waited for every poll_s again. Tickets go on acquire, time-out,
cancel and error; a dead or frozen waiter's ticket counts for nothing. Foreign jobs, and waits for
them, are unaffected. While it waits on kopt-mcp job leases, a waiter tries their lock files every
LEASE_WATCH_S s (no probe read) and polls at once when one is given back or taken, so a handover
between two slots leaves the GPU idle for about LEASE_WATCH_S s instead of up to JOB_POLL_S.

kopt-mcp's own job that just ended is never waited for as a foreign one (`_own_job_ending`): NVML's
utilization is sampled over the last period, so right after a measuring call gives its lease back the
GPU still reads e.g. "utilization 11%" with no process left (seen on an H100 after warm_up_harness:
the next call, kernel_trace_analysis, slept the 600 s meant for a foreign job). A GPU busy only with
utilization or memory, no foreign compute process, whose kopt-mcp lease was given back less than
JOB_GRACE_S s ago (LeaseManager.released_at), or whose only compute processes are this server's own
runs still being torn down, is checked again after JOB_POLL_S s, not poll_s.

What idle means (thresholds, busy reasons, the check of one GPU, the outcome) is in gpus/idle.py; the
CPU device's gate in gpus/cpu_gate.py. Their names are importable from here too.
"""

from __future__ import annotations

import os
import platform
import threading
import time
from collections.abc import Callable

import psutil

from kopt_mcp.gpus.base import GpuProbe, GpuReading
from kopt_mcp.gpus.cpu import CpuLoadProbe
from kopt_mcp.gpus.cpu_gate import CPU_NOTE, CPU_POLL_S, acquire_cpu
from kopt_mcp.gpus.idle import GateOutcome, GpuCheck, IdleThresholds, busy_reasons, num_shown
from kopt_mcp.gpus.lease import Lease, LeaseManager, binding_env
from kopt_mcp.gpus.waitqueue import WaitQueue

__all__ = [
    "CPU_NOTE",
    "CPU_POLL_S",
    "JOB_GRACE_S",
    "JOB_POLL_S",
    "LEASE_WATCH_S",
    "GateOutcome",
    "GpuCheck",
    "GpuGate",
    "IdleThresholds",
    "Lease",
    "binding_env",
    "busy_reasons",
]

JOB_POLL_S = 2.0  # the most time between two checks while a kopt-mcp job lease holds a GPU we could use
LEASE_WATCH_S = 0.2  # while waiting on a kopt-mcp job lease, how often (s) its lock file is tried (no probe read)
JOB_GRACE_S = 30.0  # a waiter keeps its place on a GPU this long (s) after it last saw a kopt-mcp job lease there


def _leased_reason(h: dict) -> str:
    who = f"pid {h.get('pid')}" if h.get("pid") is not None else "an unknown process"
    host = f" on {h['host']}" if h.get("host") and h.get("host") != platform.node() else ""
    return f"leased by kopt-mcp {who}{host} (tag {h.get('tag') or '-'}) since {h.get('since') or '?'}"


def _queued_reason(ahead: list[dict]) -> str:
    first = ahead[0]
    more = f" ({len(ahead)} earlier waiters)" if len(ahead) > 1 else ""
    return (f"promised to an earlier waiter{more}: kopt-mcp pid {first.get('pid')} (tag {first.get('tag') or '-'}) "
            f"waiting since {first.get('since') or '?'}")


def _summary(checks: list[GpuCheck]) -> str:
    return "; ".join(f"GPU {c.index}: {', '.join(c.busy)}" for c in checks if c.busy)

class GpuGate:
    """The availability gate over one probe and one LeaseManager.

    `wait_s`: how long to keep trying (s); `poll_s`: pause between polls (s). `sleep(s)` and
    `clock() -> s` are injectable; `sleep` None means time.sleep, cut short by `cancel`.
    `cpu_probe` (kopt_mcp.gpus.cpu.CpuLoadProbe, or None: no CPU gate) and `cpu_wait_s` (s): the
    CPU device's gate when the probe is "none" (module docstring).
    Raises ValueError when `poll_s` <= 0, `wait_s` < 0 or `cpu_wait_s` < 0.
    """

    def __init__(self, probe: GpuProbe, leases: LeaseManager, thresholds: IdleThresholds | None = None,
                 wait_s: float = 3600.0, poll_s: float = 600.0,
                 sleep: Callable[[float], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 cpu_probe: CpuLoadProbe | None = None, cpu_wait_s: float = 60.0) -> None:
        if poll_s <= 0 or wait_s < 0 or cpu_wait_s < 0:
            raise ValueError(f"need poll_s > 0, wait_s >= 0 and cpu_wait_s >= 0 (got poll_s={poll_s}, "
                             f"wait_s={wait_s}, cpu_wait_s={cpu_wait_s})")
        self.cpu_probe = cpu_probe
        self.cpu_wait_s = cpu_wait_s
        self.probe = probe
        self.leases = leases
        self.thresholds = thresholds or IdleThresholds()
        self.wait_s = wait_s
        self.poll_s = poll_s
        self._sleep = sleep
        self._clock = clock
        self._held: Lease | None = None

    @property
    def held(self) -> Lease | None:
        """The lease this gate holds now, or None."""
        return self._held

    def release(self) -> None:
        """Give back the held lease (no-op when none)."""
        if self._held is not None and self._held.vendor != "cpu":
            self.leases.release(self._held.uuid)
        self._held = None

    def _check(self, r: GpuReading, own: frozenset[int]) -> GpuCheck:
        busy = busy_reasons(r, self.thresholds, own)
        if not busy:
            h = self.leases.holder(r.uuid)
            if h is not None:
                busy.append(_leased_reason(h))
        return GpuCheck(index=r.index, uuid=r.uuid, name=r.name, vendor=r.vendor, util_pct=r.util_pct,
                        mem_used_mib=r.mem_used_mib, mem_total_mib=r.mem_total_mib, busy=busy)

    def _wait(self, seconds: float, cancel: threading.Event | None, watch: dict[str, bool] | None = None) -> None:
        """Pause `seconds` s (the injected sleep, else cut short by `cancel`). With real sleep and
        `watch` ({GPU uuid: leased by a kopt-mcp job at the last poll}), also ends as soon as one of
        those leases is given back or taken (its lock tried every LEASE_WATCH_S s, no probe read): a
        handover between slots leaves the GPU idle for about LEASE_WATCH_S s, not JOB_POLL_S."""
        if self._sleep is not None:
            self._sleep(seconds)
            return
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            step = min(left, LEASE_WATCH_S) if watch else left
            if cancel is not None:
                if cancel.wait(step):
                    return
            else:
                time.sleep(step)
            if watch and any((self.leases.holder(u) is not None) != held for u, held in watch.items()):
                return

    def acquire(self, progress: Callable[[float, float, str], None] | None = None,
                cancel: threading.Event | None = None,
                own_pids: frozenset[int] = frozenset(), prefer: str | None = None) -> GateOutcome:
        """Find an idle GPU and lease it, waiting up to `wait_s` s; see the module docstring.

        `prefer`: the uuid of the GPU to try first (the one the session used last); another idle
        GPU is taken when it is busy or gone.

        Probe "none": a cpu Lease, at once or after the CPU gate's wait (never None but for
        `cancel`); `cpu_load` then holds the last CPU-load sample. A held lease whose GPU shows no foreign compute
        process is returned as is; one that got a foreign process (or vanished) is released and
        the search runs again. A free GPU that an earlier live kopt-mcp waiter queues for is left
        to it (busy reason "promised to an earlier waiter: ..."; module docstring). Between polls
        calls `progress(waited_s, wait_s, message)`.
        `own_pids` (and this process) are never counted as foreign.
        Returns lease None with the reason on timeout ("no idle GPU after N s: ..."), on
        `cancel` ("cancelled") or when the probe sees no GPU. Raises ProbeError from the probe and
        OSError when the lease directory cannot be written.
        """
        own = frozenset(own_pids) | {os.getpid()}
        if self.probe.name == "none":
            return self._acquire_cpu(progress, cancel, own)
        queue = WaitQueue(self.leases.lease_dir, self.leases.tag)
        try:
            return self._acquire_gpu(progress, cancel, own, prefer, queue)
        finally:
            queue.leave()  # got a GPU, gave up, was cancelled or failed: no place kept

    def _acquire_gpu(self, progress, cancel: threading.Event | None, own: frozenset[int], prefer: str | None,
                     queue: WaitQueue) -> GateOutcome:
        start, polls = self._clock(), 0
        kopt_seen: dict[str, float] = {}  # GPU uuid -> when a kopt-mcp job (or waiter) last held it
        while True:
            if cancel is not None and cancel.is_set():
                return GateOutcome(lease=None, waited_s=self._clock() - start, polls=polls,
                                   reason="cancelled")
            readings = self.probe.read()
            polls += 1
            if prefer is not None:  # stable: the preferred GPU first, the others in probe order
                readings = sorted(readings, key=lambda r: r.uuid != prefer)
            if not readings:
                return GateOutcome(lease=None, waited_s=self._clock() - start, polls=polls,
                                   reason=f"the probe '{self.probe.name}' sees no GPU")
            if self._held is not None:
                mine = next((r for r in readings if r.uuid == self._held.uuid), None)
                if mine is not None and not [p for p in mine.processes if p.pid not in own]:
                    checks = [self._check_held(r) if r is mine else self._check(r, own) for r in readings]
                    return GateOutcome(lease=self._held, checks=checks,
                                       waited_s=self._clock() - start, polls=polls)
                self.release()
            checks, now = [], self._clock()
            watch: dict[str, bool] = {}  # GPU uuid -> whether a kopt-mcp job lease held it at this poll
            for r in readings:
                c = self._check(r, own)
                if not c.busy:
                    ahead = queue.ahead(r.uuid)
                    if ahead:  # free, but an earlier waiter takes it at its next poll
                        c.busy.append(_queued_reason(ahead))
                        kopt_seen[r.uuid] = now
                        watch[r.uuid] = False
                        checks.append(c)
                        continue
                    lease = self.leases.try_acquire(r)
                    if lease is not None:
                        self._held = lease
                        checks.append(c)
                        checks += [self._check(x, own) for x in readings[len(checks):]]
                        return GateOutcome(lease=lease, checks=checks,
                                           waited_s=self._clock() - start, polls=polls)
                    c.busy.append(_leased_reason(self.leases.holder(r.uuid) or {}))
                    kopt_seen[r.uuid] = now
                    watch[r.uuid] = True
                elif self.leases.holder(r.uuid) is not None:  # busy with a kopt-mcp job: it ends soon
                    kopt_seen[r.uuid] = now
                    watch[r.uuid] = True
                elif why := self._own_job_ending(r, own):  # kopt-mcp's own job just ended there: soon idle
                    c.busy.append(why)
                    kopt_seen[r.uuid] = now
                elif queue.ahead(r.uuid):  # just released (lingering load) with waiters: no renewal
                    kopt_seen.setdefault(r.uuid, now)
                checks.append(c)
            job_held = False
            for r in readings:  # keep a place where a kopt-mcp job holds (or just held) the GPU
                if r.uuid in kopt_seen and now - kopt_seen[r.uuid] < JOB_GRACE_S:
                    queue.join(r.uuid)  # False when the queue cannot be written: no place, same polling
                    job_held = True
                else:
                    queue.leave(r.uuid)
            for u in set(queue.joined) - {r.uuid for r in readings}:
                queue.leave(u)  # gone from the probe
            queue.touch()
            waited = self._clock() - start
            if waited >= self.wait_s:
                return GateOutcome(lease=None, checks=checks, waited_s=waited, polls=polls,
                                   reason=f"no idle GPU after {num_shown(self.wait_s)} s: {_summary(checks)}")
            pause = min(min(self.poll_s, JOB_POLL_S) if job_held else self.poll_s, self.wait_s - waited)
            if progress is not None:
                progress(waited, self.wait_s,
                         f"no idle GPU yet ({_summary(checks)}); next check in {num_shown(pause)} s")
            self._wait(pause, cancel, watch if job_held else {})
    def _acquire_cpu(self, progress, cancel: threading.Event | None, own: frozenset[int]) -> GateOutcome:
        """The CPU device (gpus/cpu_gate.py): the lease, held by this gate once given."""
        out = acquire_cpu(self.cpu_probe, self.thresholds, self.cpu_wait_s, self.poll_s, self._clock, self._wait,
                          progress, cancel, own)
        if out.lease is not None:
            self._held = out.lease
        return out

    def _own_job_ending(self, r: GpuReading, own: frozenset[int]) -> str:
        """Why busy GPU `r` is busy only with kopt-mcp's own job that just ended, as a busy reason ('' when
        it is not): its compute processes (besides `own`) are all this process's descendants (runs being
        torn down after their kill), or it has none and a kopt-mcp lease on it was given back less than
        JOB_GRACE_S s ago (the finished job's sampled utilization lingers). See the module docstring."""
        procs = [p.pid for p in r.processes if p.pid not in own]
        if procs:
            try:
                mine = {q.pid for q in psutil.Process().children(recursive=True)}
            except psutil.Error:
                return ""
            if not set(procs) <= mine:
                return ""
            return f"pid {', '.join(map(str, procs))} is this server's own run, still ending"
        at = self.leases.released_at(r.uuid)
        ago = time.time() - at if at is not None else None
        if ago is None or not 0 <= ago < JOB_GRACE_S:
            return ""
        return f"kopt-mcp's own job here ended {num_shown(round(ago, 1))} s ago (its utilization lingers)"

    def _check_held(self, r: GpuReading) -> GpuCheck:
        """The held GPU's check: its numbers, no busy reasons (it is ours)."""
        return GpuCheck(index=r.index, uuid=r.uuid, name=r.name, vendor=r.vendor, util_pct=r.util_pct,
                        mem_used_mib=r.mem_used_mib, mem_total_mib=r.mem_total_mib)
