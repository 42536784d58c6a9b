"""The CPU device's gate (probe "none"; kopt_mcp/gpus/gate.py's module docstring): without a CPU-load
probe the CPU lease at once; with one, wait while other processes use the cores at or above the
limit (rules.load.cpu_limit_pct, lowered for a benchmark seen using more than one core), polling every
min(poll_s, CPU_POLL_S) s up to `cpu_wait_s`, then lease the CPU in any case: the note says how busy
the cores were."""

from __future__ import annotations

import platform
import threading
from collections.abc import Callable

from kopt_mcp.gpus.cpu import CpuLoadProbe
from kopt_mcp.gpus.idle import GateOutcome, IdleThresholds, num_shown
from kopt_mcp.gpus.lease import Lease, binding_env
from kopt_mcp.gpus.load import recent_bench_cores

CPU_NOTE = "no GPU probe: the CPU is the device; the gate passes at once"
CPU_POLL_S = 10.0  # the most time between two CPU-load checks (load changes in seconds, not minutes)


def cpu_lease() -> Lease:
    """The CPU as a device lease (vendor "cpu", index -1)."""
    return Lease(vendor="cpu", index=-1, uuid="cpu", name=platform.processor() or "cpu", env=binding_env("cpu", -1))


def acquire_cpu(cpu_probe: CpuLoadProbe | None, thresholds: IdleThresholds, cpu_wait_s: float, poll_s: float,
                clock: Callable[[], float], wait: Callable[[float, threading.Event | None], None],
                progress: Callable[[float, float, str], None] | None, cancel: threading.Event | None,
                own: frozenset[int]) -> GateOutcome:
    """The CPU device's outcome: without `cpu_probe` the CPU lease at once; else wait (`wait(s, cancel)`,
    times from `clock()` in s) while other processes' load (besides `own`) is at or above the limit,
    then lease the CPU anyway. Lease None only when `cancel` is set ("cancelled")."""
    if cpu_probe is None:
        return GateOutcome(lease=cpu_lease(), device_note=CPU_NOTE)
    what = thresholds.cpu_limit_shown()
    start, polls = clock(), 0
    while True:
        if cancel is not None and cancel.is_set():
            return GateOutcome(lease=None, waited_s=clock() - start, polls=polls, reason="cancelled")
        load = cpu_probe.read(own)
        polls += 1
        waited = clock() - start
        bench = recent_bench_cores()  # a multi-core benchmark leaves a neighbour fewer cores
        if (limit := thresholds.cpu_limit_pct(load.cores, bench)) < thresholds.cpu_limit_pct(load.cores):
            what = f"{thresholds.cpu_limit_shown()}, {limit:g}% for a benchmark using up to {bench:.1f} cores"
        if load.other_pct < limit:
            note = (f"the CPU is the device: {load.shown()}, under {what}"
                    + (f" after waiting {num_shown(round(waited))} s" if polls > 1 else ""))
            return GateOutcome(lease=cpu_lease(), waited_s=waited, polls=polls, device_note=note, cpu_load=load)
        if waited >= cpu_wait_s:
            note = (f"the CPU is the device and stayed busy for {num_shown(round(waited))} s ({load.shown()}, "
                    f"at or above {what}): measuring anyway; each paired round records its own load, and "
                    "rounds under load are measured again or left out of the decision")
            return GateOutcome(lease=cpu_lease(), waited_s=waited, polls=polls, device_note=note, cpu_load=load)
        pause = min(poll_s, CPU_POLL_S, cpu_wait_s - waited)
        if progress is not None:
            progress(waited, cpu_wait_s, f"CPU busy ({load.shown()}, at or above {what}); next check in "
                     f"{num_shown(round(pause, 1))} s")
        wait(pause, cancel)
