"""The machines a session talks to, injected as one value (`Services`) with real defaults.

The referee never builds a probe, a profiler, a runner or a clock itself: it asks its `Services`.
Tests replace a field (`dataclasses.replace(Services(), probe=...)`, or the fakes in
`kopt_mcp.testing`), never the referee's methods.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kopt_mcp.bench.executor import Executor
from kopt_mcp.bench.runner import RunResult, run_command
from kopt_mcp.gpus.base import GpuProbe
from kopt_mcp.gpus.clocks import ClockFactory, clock_source
from kopt_mcp.gpus.load import LoadSources, load_factory
from kopt_mcp.profilers import make_profiler
from kopt_mcp.profilers.base import Profiler

#: (backend, vendor, detail) -> Profiler, as kopt_mcp.profilers.make_profiler
ProfilerFactory = Callable[[str, str, bool], Profiler]
#: as kopt_mcp.bench.runner.run_command (command, cwd, env, timeout_s, log_path, cancel=, pid_dir=)
Runner = Callable[..., RunResult]


@dataclass(frozen=True)
class Services:
    """What a session runs things with.

    - `probe`: the GPU probe (None: the one `[gates] gpu_probe` names, kopt_mcp.gpus.make_probe);
    - `profiler`: builds the profiler for a backend, a vendor and detail mode;
    - `run`: runs one command (the format command, the warm-up runs, every benchmark run);
    - `clock` (s, monotonic) and `sleep(s)` (None: real waiting, cut short by a cancel) for the
      GPU gate's waiting;
    - `lease_dir`: where GPU lease files live (None: $KOPT_LEASE_DIR, else /tmp/kopt-mcp-leases);
    - `executor`: where measuring jobs run (None: this host; a Ray executor beyond it);
    - `clocks`: (vendor, uuid) -> the leased device's SM clock source, sampled during profiled runs
      (kopt_mcp.gpus.clocks; None: no clock figures);
    - `loads`: (vendor, uuid, probe) -> the leased device's foreign-load sampler factory, sampled
      during every measured run (kopt_mcp.gpus.load; None: no load figures).
    """

    probe: GpuProbe | None = None
    profiler: ProfilerFactory = make_profiler
    run: Runner = run_command
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] | None = None
    lease_dir: Path | None = None
    #: builds the session's executor (kopt_mcp.bench.executor.Executor) from its parts `(where, what,
    #: services)` (referee/parts); None: the local one (kopt_mcp.bench.local.LocalExecutor over this
    #: host's GPU gate; referee.opening.local_executor)
    executor: Callable[[Any, Any, Any], Executor] | None = None
    clocks: ClockFactory | None = clock_source
    loads: LoadSources | None = load_factory
