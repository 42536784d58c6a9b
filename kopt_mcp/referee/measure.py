"""One measurement: run the fixed benchmark (or it under the profiler) in a tree, read its metrics,
apply the correctness gate. Uses the runner for every process; never decides a verdict."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

from pydantic import BaseModel

from kopt_mcp.config import TargetConfig
from kopt_mcp.referee.core import Cancelled
from kopt_mcp.metrics import MetricsError, MetricTable, capture_before, collect_results, read_results
from kopt_mcp.profilers.base import KernelTrace, Profiler, ProfilerError
from kopt_mcp.rules.correctness import GateResult, RunFacts, correctness_gate
from kopt_mcp.runner import RunResult, run_command


def raise_if_cancelled(run: RunResult) -> None:
    """Raise Cancelled when the runner killed `run` because the client cancelled the call."""
    if run.cancelled:
        raise Cancelled(f"cancelled by the client: `{run.command[:80]}` and its process tree were killed")


class Measurement(BaseModel):
    """The run, its per-class table (None if unreadable) and the correctness gate's result."""

    tree: str
    run: RunResult
    table: MetricTable | None
    gate: GateResult
    run_dir: str

    def values(self) -> dict[str, float]:
        """Class key -> metric (empty when the table could not be read)."""
        return self.table.values() if self.table else {}


def measure(cfg: TargetConfig, tree: Path, run_dir: Path, env: dict[str, str],
            cancel: threading.Event | None = None) -> Measurement:
    """Run the benchmark in `tree` (a worktree root); logs and a copy of the CSVs go to `run_dir`."""
    b = cfg.benchmark
    cwd = tree / b.workdir
    before = capture_before(cwd, b)  # result files as they were: rows the run leaves unchanged are stale
    run = run_command(b.command, cwd, env, b.timeout_s, run_dir / "benchmark.log", cancel=cancel)
    raise_if_cancelled(run)
    table, err, failing = None, None, []
    check_exit, check_timeout = None, False
    if run.exit_code == 0:
        try:
            files = collect_results(cwd, b, run.started_at, before, run_dir / "benchmark.log")
            for f in files:
                if Path(f.path).parent != run_dir:  # format stdout reads the log already there
                    shutil.copy2(f.path, run_dir / f.name)
            table = read_results(files, b)
            failing = table.failing()
        except MetricsError as e:
            err = str(e)
        if table is not None and cfg.correctness.command:
            chk = run_command(cfg.correctness.command, tree, env, cfg.correctness.timeout_s,
                              run_dir / "correctness.log", cancel=cancel)
            raise_if_cancelled(chk)
            check_exit, check_timeout = chk.exit_code, chk.timed_out
    gate = correctness_gate(RunFacts(exit_code=run.exit_code, timed_out=run.timed_out, timeout_s=b.timeout_s,
                                     metrics_error=err, failing_classes=failing, check_exit=check_exit,
                                     check_timed_out=check_timeout))
    return Measurement(tree=str(tree), run=run, table=table, gate=gate, run_dir=str(run_dir))


class Profiled(BaseModel):
    """A profiled run: the trace, or the error that prevented one."""

    trace: KernelTrace | None
    error: str | None
    log_path: str


def profile(cfg: TargetConfig, profiler: Profiler, tree: Path, run_dir: Path, env: dict[str, str],
            cancel: threading.Event | None = None) -> Profiled:
    """Run the benchmark under `profiler` in `tree` (env gets KOPT_PROFILE=1) and parse the trace."""
    cwd = tree / cfg.benchmark.workdir
    log = run_dir / "profile.log"
    cmd = profiler.wrap(cfg.benchmark.command, run_dir)
    run = run_command(cmd, cwd, {**env, "KOPT_PROFILE": "1"}, cfg.profiler.timeout_s, log, cancel=cancel)
    raise_if_cancelled(run)
    if run.timed_out:
        return Profiled(trace=None, log_path=str(log),
                        error=f"the profiled run passed [profiler] timeout_s = {cfg.profiler.timeout_s:g} s and was killed")
    if run.exit_code != 0:
        return Profiled(trace=None, log_path=str(log), error=(
            f"the profiled run exited with code {run.exit_code}; log tail: {run.log_tail[-600:]}"))
    try:
        return Profiled(trace=profiler.parse(run_dir), error=None, log_path=str(log))
    except ProfilerError as e:
        return Profiled(trace=None, error=str(e), log_path=str(log))
