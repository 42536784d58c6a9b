"""One measurement: run the fixed benchmark (or it under the profiler) in a tree, read its metrics,
apply the correctness gate. Uses the runner for every process; never decides a verdict.

Every run of the session happens in a disposable checkout of a frozen snapshot (`checkout`,
`measure_snapshot`, `profile_snapshot`): the snapshot's files are exported (vcs.export: a plain
copy, no `.git`) into a fresh folder `kopt-run-XXXX/<repo name>` under `$KOPT_RUN_ROOT` (default:
the system temp dir), outside the workspace the agent edits and outside the repository; after the
run the checkout is compared with its snapshot (vcs.run_changes) and removed; one that a killed
server left behind is removed by the next checkout (an owner file names the server's pid). Logs, CSV copies and
traces go to the run folder of the session's store, as before. Cost on the toy repository (4 files):
about 15 ms to export and 15 ms to verify per run.

Where bubblewrap works, every run and its [correctness] command see the repository's git directory
(the session's state) as an empty folder and no other process, their own run folder excepted
(kopt_mcp/bench/sandbox.py; about 15 ms more per run).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import git
import psutil
from pydantic import BaseModel

from kopt_mcp import vcs
from kopt_mcp.bench.runner import RunResult, run_command
from kopt_mcp.bench.sandbox import Sandbox, run_sandbox
from kopt_mcp.config import TargetConfig
from kopt_mcp.errors import Cancelled, MetricsError, MissingResults, ProfilerError, StaleResults
from kopt_mcp.evidence.clock import RunClock
from kopt_mcp.evidence.load import RunLoad
from kopt_mcp.evidence.trace import KernelTrace
from kopt_mcp.gpus.clocks import ClockSampler, ClockSource
from kopt_mcp.gpus.load import LoadFactory
from kopt_mcp.paths import common_git_dir
from kopt_mcp.profilers.base import Profiler, profile_env
from kopt_mcp.readers.metrics import MetricTable, capture_before, collect_results, read_results
from kopt_mcp.readers.test_summary import CorrectnessRun, correctness_run
from kopt_mcp.rules.correctness import GateResult, RunFacts, correctness_gate, failed_tests
from kopt_mcp.rules.protect import FileChange

Runner = Callable[..., RunResult]

RUN_ROOT_ENV = "KOPT_RUN_ROOT"


def run_root() -> Path | None:
    """Where disposable checkouts are made: $KOPT_RUN_ROOT (created if missing), else None (the
    system temp dir)."""
    root = os.environ.get(RUN_ROOT_ENV)
    if not root:
        return None
    Path(root).mkdir(parents=True, exist_ok=True)
    return Path(root)


def _remove(root: Path) -> None:
    """Remove a checkout, also where the run made folders read-only."""

    def fix(func, path, _exc):
        try:
            os.chmod(os.path.dirname(path), stat.S_IRWXU)
            os.chmod(path, stat.S_IRWXU)
            func(path)
        except OSError:
            pass

    shutil.rmtree(root, onerror=fix)


#: exported files are dated this many seconds before the export, so a metrics file shipped inside
#: the snapshot can never pass for one the run wrote (metrics.fresh_csvs)
PREDATE_S = 60.0


def _predate(root: Path) -> None:
    """Set the modification time of everything under `root` to PREDATE_S seconds ago (links
    themselves, not their targets)."""
    t = time.time() - PREDATE_S
    for d, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            os.utime(os.path.join(d, name), (t, t), follow_symlinks=False)


OWNER_FILE = "owner.json"


def sweep_stale_checkouts(root: Path | None = None) -> list[Path]:
    """Remove the disposable checkouts (`kopt-run-*` under `root`, default the run root) whose
    server process is gone (a server killed mid-run leaves its checkout behind); checkouts of live
    servers and folders without an owner file are left alone. Returns the removed folders."""
    base = root or run_root() or Path(tempfile.gettempdir())
    gone = []
    for d in base.glob("kopt-run-*"):
        try:
            pid = int(json.loads((d / OWNER_FILE).read_text(encoding="utf-8"))["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not psutil.pid_exists(pid):
            _remove(d)
            gone.append(d)
    return gone


def _repo_name(ws: git.Repo) -> str:
    """The user's repository folder name (the checkout is named like it), else "tree"."""
    common = Path(ws.common_dir).resolve()
    return (common.parent.name if common.name == ".git" else "") or "tree"


@contextmanager
def checkout(ws: git.Repo, tree: str, name: str = "tree") -> Iterator[Path]:
    """A disposable checkout of tree object `tree` (see the module docstring): yields its folder
    (`<run root>/kopt-run-XXXX/<name>`), removed afterwards whatever happens. Raises OSError or
    git.GitCommandError when the export fails (disk full, a tree gc'd). Checkouts a killed server
    left behind are swept first (`sweep_stale_checkouts`)."""
    sweep_stale_checkouts()
    root = Path(tempfile.mkdtemp(prefix="kopt-run-", dir=run_root()))
    try:
        (root / OWNER_FILE).write_text(json.dumps({"pid": os.getpid()}) + "\n", encoding="utf-8")
        path = root / name
        vcs.export(ws, tree, path)
        _predate(path)
        yield path
    finally:
        _remove(root)


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
    #: the snapshot (tree object id) that ran, and what the run changed in its checkout
    snapshot: str = ""
    changes: list[FileChange] = []
    #: the foreign load on the device while the benchmark command ran, sampled by the referee's process
    #: (kopt_mcp.gpus.load; None: not sampled); also in the run folder as LOAD_FILE
    load: RunLoad | None = None
    #: the [correctness] command's run after this one (None: not configured, or not run for this run)
    check: CorrectnessRun | None = None

    def values(self) -> dict[str, float]:
        """Class key -> metric (empty when the table could not be read)."""
        return self.table.values() if self.table else {}


#: the file of a run folder that holds the run's foreign load (Measurement.load as JSON)
LOAD_FILE = "load.json"


def _sampled(load: LoadFactory | None, run_dir: Path, call: Callable[[], RunResult]) -> tuple[RunResult, RunLoad | None]:
    """`call()` (one benchmark command) with the device's foreign load sampled meanwhile by a fresh
    sampler of `load` (None: not sampled); the figures are written to `run_dir/LOAD_FILE` too."""
    if load is None:
        return call(), None
    with load() as sampler:
        result = call()
    figures = sampler.summary()
    if figures is not None:
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / LOAD_FILE).write_text(figures.model_dump_json(indent=1) + "\n", encoding="utf-8")
    return result, figures


def measure(cfg: TargetConfig, tree: Path, run_dir: Path, env: dict[str, str],
            cancel: threading.Event | None = None, pid_dir: Path | None = None, check: bool = True,
            run: Runner = run_command, sandbox: Sandbox | None = None,
            load: LoadFactory | None = None) -> Measurement:
    """Run the benchmark in `tree` (a checkout root); logs and a copy of the CSVs go to `run_dir`.
    `pid_dir`: where each run is recorded while it lasts (runner.end_leftovers); `check`: also run
    the [correctness] command (the referee asks once per candidate tree, not after every run);
    `run`: the runner (Services.run); `sandbox`: the runs' view (None: the server's); `load`: samples
    the device's foreign load while the benchmark command runs (`Measurement.load`; kopt_mcp.gpus.load)."""
    b = cfg.benchmark
    cwd = tree / b.workdir
    # result files as they were (a fresh checkout holds only the snapshot's tracked files): rows the run
    # leaves unchanged are stale
    before = capture_before(cwd, b, all_tracked=True)
    result, figures = _sampled(load, run_dir, lambda: run(b.command, cwd, env, b.timeout_s, run_dir / "benchmark.log",
                                                          cancel=cancel, pid_dir=pid_dir, sandbox=sandbox))
    raise_if_cancelled(result)
    m = read_run(cfg, tree, run_dir, result, before, env, run_dir / "benchmark.log", cancel, pid_dir, check, run,
                 sandbox)
    return m.model_copy(update={"load": figures})


def read_run(cfg: TargetConfig, tree: Path, run_dir: Path, result: RunResult, before, env: dict[str, str],
             log: Path, cancel: threading.Event | None = None, pid_dir: Path | None = None, check: bool = True,
             runner: Runner = run_command, sandbox: Sandbox | None = None) -> Measurement:
    """What a finished benchmark run left: its fresh result files read into the per-class table
    (copies kept in `run_dir`), the [correctness] command run after it when `check`, and the
    correctness gate's result. `before`: the result files captured before the run (metrics.capture_before);
    `log`: the run's log (stdout results are read from it)."""
    b = cfg.benchmark
    cwd = tree / b.workdir
    table, err, problem, failing, tests = None, None, "unusable", [], []
    check_exit, check_timeout, check_run = None, False, None
    if result.exit_code == 0:
        try:
            files = collect_results(cwd, b, result.started_at, before, log)
            for f in files:
                if Path(f.path).parent != run_dir:  # format stdout reads the log already there
                    # by its path under the workdir: two result files of one name (results/fwd/x.csv,
                    # results/bwd/x.csv) are both kept
                    src = Path(f.path)
                    rel = src.relative_to(cwd) if src.is_relative_to(cwd) else Path(f.name)
                    (run_dir / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, run_dir / rel)
            table = read_results(files, b)
            failing = table.failing()
        except MetricsError as e:
            err = str(e)
            if isinstance(e, (MissingResults, StaleResults)):
                problem = "missing" if isinstance(e, MissingResults) else "stale"
        if table is not None and cfg.correctness.command and check:
            chk = runner(cfg.correctness.command, tree, env, cfg.correctness.timeout_s,
                         run_dir / "correctness.log", cancel=cancel, pid_dir=pid_dir, sandbox=sandbox)
            raise_if_cancelled(chk)
            check_exit, check_timeout = chk.exit_code, chk.timed_out
            check_run = correctness_run(cfg.correctness.command, chk.exit_code, chk.timed_out, chk.duration_s,
                                        chk.log_path, tree)
            if chk.exit_code not in (None, 0):
                tests = failed_tests(Path(chk.log_path).read_text(encoding="utf-8", errors="replace"))
    gate = correctness_gate(RunFacts(exit_code=result.exit_code, timed_out=result.timed_out, timeout_s=b.timeout_s,
                                     metrics_error=err, metrics_problem=problem, failing_classes=failing,
                                     check_exit=check_exit, check_timed_out=check_timeout, failed_tests=tests))
    return Measurement(tree=str(tree), run=result, table=table, gate=gate, run_dir=str(run_dir), check=check_run)


class Profiled(BaseModel):
    """A profiled run: the trace, or the error that prevented one."""

    trace: KernelTrace | None
    error: str | None
    log_path: str
    snapshot: str = ""
    changes: list[FileChange] = []
    #: the SM clock while the run kept the GPU busy, sampled by the referee's process (None: no
    #: clock source for the device, e.g. AMD, the CPU, NVML missing; kopt_mcp.gpus.clocks)
    clock: RunClock | None = None
    #: the same run read as a measurement (results table, correctness gate: `read_run`), where the
    #: profiled command exited; every profiled run of a verdict is also a script-metric run
    measurement: Measurement | None = None
    #: the foreign load on the device while the profiled command ran (as Measurement.load)
    load: RunLoad | None = None


def profile(cfg: TargetConfig, profiler: Profiler, tree: Path, run_dir: Path, env: dict[str, str],
            cancel: threading.Event | None = None, pid_dir: Path | None = None, run: Runner = run_command,
            check: bool = False, sandbox: Sandbox | None = None, load: LoadFactory | None = None) -> Profiled:
    """Run the benchmark under `profiler` in `tree` (env gets `profile_env(profiler)`), read its results
    like a plain run (`Profiled.measurement`; `check`: the [correctness] command after it) and
    parse the trace; `run`: the runner (Services.run); `sandbox`: the run's view (None: the
    server's); `load`: as in `measure` (`Profiled.load`)."""
    cwd = tree / cfg.benchmark.workdir
    log = run_dir / "profile.log"
    cmd = profiler.wrap(cfg.benchmark.command, run_dir)
    before = capture_before(cwd, cfg.benchmark, all_tracked=True)
    result, figures = _sampled(load, run_dir, lambda: run(cmd, cwd, {**env, **profile_env(profiler)}, cfg.profiler.timeout_s,
                                                          log, cancel=cancel, pid_dir=pid_dir, sandbox=sandbox))
    raise_if_cancelled(result)
    m = read_run(cfg, tree, run_dir, result, before, env, log, cancel, pid_dir, check, run, sandbox).model_copy(
        update={"load": figures})
    p = _parsed(cfg, profiler, run_dir, result, log, m)
    return p.model_copy(update={"load": figures})


def _parsed(cfg: TargetConfig, profiler: Profiler, run_dir: Path, result: RunResult, log: Path,
            m: Measurement) -> Profiled:
    """The Profiled of a finished profiled run: its trace parsed, or why there is none."""
    if result.timed_out:
        return Profiled(trace=None, log_path=str(log), measurement=m,
                        error=f"the profiled run passed [profiler] timeout_s = {cfg.profiler.timeout_s:g} s and was killed")
    if result.exit_code != 0:
        return Profiled(trace=None, log_path=str(log), measurement=m, error=(
            f"the profiled run exited with code {result.exit_code}; log tail: {result.log_tail[-600:]}"))
    try:
        return Profiled(trace=profiler.parse(run_dir), error=None, log_path=str(log), measurement=m)
    except ProfilerError as e:
        return Profiled(trace=None, error=str(e), log_path=str(log), measurement=m)


def measure_snapshot(cfg: TargetConfig, ws: git.Repo, tree: str, run_dir: Path, env: dict[str, str],
                     cancel: threading.Event | None = None, pid_dir: Path | None = None,
                     check: bool = True, run: Runner = run_command, load: LoadFactory | None = None) -> Measurement:
    """`measure` in a disposable checkout of tree object `tree`; `changes` lists what the run changed
    there (vcs.run_changes). The `[commit] include` files the run rewrote are kept in the run folder
    (`keep_included`). `load`: samples the device's foreign load during the run (`Measurement.load`)."""
    with checkout(ws, tree, _repo_name(ws)) as co:
        m = measure(cfg, co, run_dir, env, cancel, pid_dir, check, run, run_sandbox(common_git_dir(ws), run_dir),
                    load)
        changes = vcs.run_changes(ws, tree, co)
        keep_included(cfg.commit.include, co, changes, run_dir)
    return m.model_copy(update={"snapshot": tree, "changes": changes})


#: the folder of a run's run folder that holds its copies of the `[commit] include` files
INCLUDE_DIR = "commit-include"
#: the largest `[commit] include` file a run's copy is kept of (bytes)
INCLUDE_MAX_BYTES = 64 << 20


def keep_included(include: list[str], checkout: Path, changes: list[FileChange], run_dir: Path) -> list[str]:
    """Copy the `include` files (repo-relative, `[commit] include`) that this run rewrote (tracked
    files, `changes` of kind "rewrote") from the run's `checkout` into `run_dir/INCLUDE_DIR/<path>`:
    what a keep's commit takes from its re-measure (`included_outputs`). A symlink, a path leading
    out of the checkout, or a file over INCLUDE_MAX_BYTES is not kept. Returns the paths kept."""
    rewrote = {c.path for c in changes if c.kind == "rewrote"}
    root, kept = checkout.resolve(), []
    for rel in include:
        src = checkout / rel
        if rel not in rewrote or src.is_symlink() or not src.is_file() or not src.resolve().is_relative_to(root):
            continue
        if src.stat().st_size > INCLUDE_MAX_BYTES:
            continue
        dst = run_dir / INCLUDE_DIR / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        kept.append(rel)
    return kept


def included_outputs(run_dir: Path, include: list[str]) -> dict[str, bytes]:
    """The `include` files a run kept (`keep_included`): repo path -> content; a file the run did not
    rewrite is absent."""
    out = {}
    for rel in include:
        f = Path(run_dir) / INCLUDE_DIR / rel
        if f.is_file() and not f.is_symlink():
            out[rel] = f.read_bytes()
    return out


def profile_snapshot(cfg: TargetConfig, profiler: Profiler, ws: git.Repo, tree: str, run_dir: Path,
                     env: dict[str, str], cancel: threading.Event | None = None,
                     pid_dir: Path | None = None, run: Runner = run_command,
                     clock: ClockSource | None = None, check: bool = False,
                     load: LoadFactory | None = None) -> Profiled:
    """`profile` in a disposable checkout of tree object `tree`, with the run's `changes`; with a
    `clock` source (the leased device's, kopt_mcp.gpus.clocks) the SM clock is sampled meanwhile
    from this process and summarised in `Profiled.clock` (None without a source); with `load` the
    device's foreign load (`Profiled.load`)."""
    with checkout(ws, tree, _repo_name(ws)) as co:
        with ClockSampler(clock) if clock is not None else nullcontext() as sampler:
            p = profile(cfg, profiler, co, run_dir, env, cancel, pid_dir, run, check,
                        run_sandbox(common_git_dir(ws), run_dir), load)
        changes = vcs.run_changes(ws, tree, co)
    return p.model_copy(update={"snapshot": tree, "changes": changes,
                                "clock": sampler.summary() if sampler is not None else None})
