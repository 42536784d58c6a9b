"""`kopt-mcp init`, running the benchmark: `run_twice` runs the command in the repository within
init's budget (kopt_mcp/commands/init/progress.py) and puts every result file back as it was; a
failed run through an installed copy of the repository's package gets a hint (`installed_copy_hint`).
Reading what the runs wrote is kopt_mcp/commands/init/read.py."""

from __future__ import annotations

import os
import re
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

from kopt_mcp import init_runs
from kopt_mcp.bench.kernel_sources import TOOL_DIRS
from kopt_mcp.bench.preflight import resolved_interpreter
from kopt_mcp.bench.runner import RunResult, run_command
from kopt_mcp.commands.init.correctness import Checked
from kopt_mcp.commands.init.progress import Budget, Progress
from kopt_mcp.errors import InitError
from kopt_mcp.profilers.base import Profiler, profile_env

RESULT_SUFFIXES = (".csv", ".json")
#: what a skipped second benchmark run leaves unchecked (Budget.not_checked)
SECOND_RUN = "a second run of the benchmark (config columns that change between two runs of the same code)"
#: folders never read for tests or result files (tool, cache and environment folders)
SKIP_DIRS = TOOL_DIRS


class Run(BaseModel):
    """What one benchmark run left: result file -> (content before, content after), and its log;
    for a run under a profiler (`profiler`: its name, '' for a plain run) the trace's kernel names,
    hottest first (`kernels`; None where the trace could not be read: `profile_error` says why) and
    the profiler's output files (`trace`: file name -> content, where the trace was read)."""

    files: dict[str, tuple[bytes | None, bytes]]
    log: bytes = b""
    seconds: float = 0.0  # the run's wall time (s); 0 for results read without a run
    profiler: str = ""
    kernels: list[str] | None = None
    profile_error: str = ""
    trace: dict[str, bytes] = {}


def _result_files(repo: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for root, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        for f in files:
            if f.endswith(RESULT_SUFFIXES):
                p = Path(root) / f
                st = p.stat()
                out[str(p.relative_to(repo))] = (st.st_mtime_ns, st.st_size)
    return out


_TRACEBACK_FILE = re.compile(r'File "([^"]+)"')


def installed_copy_hint(repo: Path, log: str) -> str:
    """A hint when a failed run's traceback passes through a copy of the repository's own package
    installed elsewhere (site-packages, a wheel, another checkout) while the repository holds it
    under `src/<pkg>` or `<pkg>`: then the benchmark ran that copy, not the repository's sources
    (Liger-Kernel's benchmark imported an installed liger_kernel); or when the run could not import
    that package at all ("No module named '<pkg>'": nothing installed). '' when there is none."""
    repo = repo.resolve()
    for path in _TRACEBACK_FILE.findall(log):
        p = Path(path)
        if not p.is_absolute() or p.resolve().is_relative_to(repo):
            continue
        for i, part in enumerate(p.parts[:-1]):
            for root in ("src", "."):
                if part.isidentifier() and (repo / root / part / "__init__.py").is_file():
                    where = str(Path(*p.parts[:i])) if i else "/"
                    return (f"\nThe run imported {part} from {where}, not from this repository's {root}/{part}: "
                            f"put the sources first: `PYTHONPATH={root}${{PYTHONPATH:+:$PYTHONPATH}} <command>`")
    for name in re.findall(r"No module named '(\w+)", log):
        for root in ("src", "."):
            if (repo / root / name / "__init__.py").is_file():
                return (f"\nThe run could not import this repository's {root}/{name} (it is not installed): put the "
                        f"sources on the path: `PYTHONPATH={root}${{PYTHONPATH:+:$PYTHONPATH}} <command>`")
    return ""


def run_twice(repo: Path, command: str, timeout_s: float = 600.0, runs: int = 2, budget: Budget | None = None,
              progress: Progress | None = None, profiler: Profiler | None = None) -> list[Run]:
    """Run `command` `runs` times in `repo`; per run, the .csv/.json files it wrote or changed (with
    their content before that run) and its log. Every file is put back as it was before the first
    run (created ones are removed). With `budget` (kopt_mcp/commands/init/progress.py) each run's
    limit is what is left of it; a later run that would leave less than half the rest for the tests,
    or that the budget cuts, is dropped and recorded as not checked. With `profiler` (one whose runs
    are script-metric runs, `measures_script`: CUPTI) the last run (not the first) runs under it and
    its trace names the kernels (Run.kernels): init then needs no separate profiled run; where that
    run fails, it runs again plain. Raises InitError when a run fails, or when the budget ends the
    first one."""
    budget = budget or Budget(max(timeout_s * runs, 1.0))
    progress = progress or Progress(budget, quiet=True)
    first = {p: (repo / p).read_bytes() for p in _result_files(repo)}
    out: list[Run] = []
    try:
        with tempfile.TemporaryDirectory(prefix="kopt-init-") as tmp:
            for i in range(runs):
                last = _last_duration(out)
                if i and not budget.can_start(2 * last * 1.1):
                    later = (f"; it runs after the tests under {profiler.name} where the budget holds it"
                             if profiler else "")
                    progress.say(f"benchmark run {i + 1}/{runs} skipped: one run took {last:.0f} s and "
                                 f"{budget.left():.0f} s of the budget are left (the tests need time too){later}")
                    budget.not_checked(SECOND_RUN, command)
                    break
                limit = budget.limit(timeout_s)
                traced = profiler if (i and i + 1 == runs) else None
                r, run = _measure(repo, command, limit, Path(tmp), i, runs, traced, progress)
                cut = r.timed_out and limit < timeout_s
                if cut and i:
                    progress.say(f"benchmark run {i + 1}/{runs} cut by the budget after {r.duration_s:.0f} s")
                    budget.not_checked(SECOND_RUN, command)
                    break
                if r.timed_out or r.exit_code != 0:
                    what = (f"did not finish within init's budget ({budget.total_s:g} s, {limit:.0f} s left for it): "
                            "raise --budget, or run it by hand to see how long it takes" if cut else
                            "timed out" if r.timed_out else f"exited {r.exit_code}")
                    raise InitError(f"`{command}` {what} in {repo}; log tail: {r.log_tail[-800:]}"
                                    f"{installed_copy_hint(repo, r.log_tail)}")
                out.append(run)
                if i + 1 < runs:
                    progress.say(f"one benchmark run: {r.duration_s:.1f} s; expected for the rest: "
                                 f"~{r.duration_s * (runs - i - 1):.0f} s ({runs - i - 1} run(s))")
    finally:
        _put_back(repo, first)
    return out


def traced_late_run(repo: Path, command: str, timeout_s: float, budget: Budget, progress: Progress,
                    profiler: Profiler) -> Run | None:
    """Benchmark run 2 of 2, made after the tests under `profiler` (one whose runs are script-metric
    runs, `measures_script`: CUPTI) where run_twice skipped it for the budget: its results count as
    the second run, its trace names the target kernels (Run.kernels) and is kept for the baseline,
    which then makes one profiled run less. Before, init's separate profiled run did the same work and
    its results and trace were thrown away (Liger FusedLinearCrossEntropy on an H200: 215 s). Its
    limit is what is left of `budget`; the result files are put back. None, and said, where it fails
    or is cut."""
    first = {p: (repo / p).read_bytes() for p in _result_files(repo)}
    try:
        with tempfile.TemporaryDirectory(prefix="kopt-init-") as tmp:
            r, run = _measure(repo, command, budget.limit(timeout_s), Path(tmp), 1, 2, profiler, progress)
    finally:
        _put_back(repo, first)
    if r.timed_out or r.exit_code != 0:
        progress.say(f"benchmark run 2/2 {'was cut by the budget' if r.timed_out else f'exited {r.exit_code}'} "
                     f"after {r.duration_s:.0f} s: the first run stands alone")
        return None
    return run


def _measure(repo: Path, command: str, limit: float, tmp: Path, i: int, runs: int, profiler: Profiler | None,
             progress: Progress) -> tuple[RunResult, Run]:
    """Benchmark run `i` of `runs` (`_run`) and what it wrote: (the run, its Run record: the result
    files it created or changed with their content before it, its log, seconds, trace)."""
    before = {p: (repo / p).read_bytes() for p in _result_files(repo)}
    stamp = _result_files(repo)
    r, kernels, why, trace = _run(repo, command, limit, tmp, i, runs, profiler, before, progress)
    changed = {p: (before.get(p), (repo / p).read_bytes()) for p, s in _result_files(repo).items()
               if stamp.get(p) != s}
    log = tmp / f"run{i}.log"
    return r, Run(files=changed, log=log.read_bytes() if log.is_file() else b"", seconds=round(r.duration_s, 2),
                  profiler=profiler.name if why is not None else "", kernels=kernels,
                  profile_error=why or "", trace=trace)


def _run(repo: Path, command: str, limit: float, tmp: Path, i: int, runs: int, profiler: Profiler | None,
         before: dict[str, bytes], progress: Progress
         ) -> tuple[RunResult, list[str] | None, str | None, dict[str, bytes]]:
    """Benchmark run `i` (its log: tmp/run<i>.log), under `profiler` where one is given: (the run,
    the trace's kernel names hottest first or None, why there are none: '' where read, None where
    the run was plain, and the trace's files, name -> content, where it was read; else {}). A profiled
    run that exits non-zero is put back (`before`: the result files' content before it) and run again
    plain: the profiler must not fail init's run of the benchmark."""
    log = tmp / f"run{i}.log"
    if profiler is not None:
        trace_dir = tmp / f"trace{i}"
        trace_dir.mkdir()
        with progress.step(f"benchmark run {i + 1}/{runs} under {profiler.name} (its results count as a run; its "
                           f"trace names the target kernels): `{command}`"):
            r = run_command(profiler.wrap(command, trace_dir), repo, profile_env(profiler), limit, log)
        if r.exit_code == 0 and not r.timed_out:
            try:
                kernels = [k.name for k in profiler.parse(trace_dir).kernels]
            except Exception as e:  # the run's results stand; only the kernels are not named
                return r, None, f"its trace could not be read: {e}", {}
            return r, kernels, "", {f.name: f.read_bytes() for f in trace_dir.iterdir() if f.is_file()}
        if r.timed_out:
            return r, None, None, {}
        progress.say(f"benchmark run {i + 1}/{runs} under {profiler.name} exited {r.exit_code}: it runs again "
                     f"without the profiler (log tail: {r.log_tail[-300:].strip()})")
        _put_back(repo, before)
        limit = max(1.0, limit - r.duration_s)  # what is left of this run's share of the budget
    with progress.step(f"benchmark run {i + 1}/{runs}: `{command}`"):
        return run_command(command, repo, {}, limit, log), None, None, {}


def _put_back(repo: Path, content: dict[str, bytes]) -> None:
    """The result files of `repo` as `content` has them: the others removed, changed ones rewritten."""
    for p in set(_result_files(repo)) - set(content):
        (repo / p).unlink(missing_ok=True)
    for p, data in content.items():
        if (repo / p).read_bytes() != data:
            (repo / p).write_bytes(data)


def keep_for_baseline(repo: Path, command: str, tree: str | None, runs: list[Run], checked: Checked | None,
                      toml: str, probe_s: float = 30.0, gpus: list[tuple[str, str]] = ()) -> Path | None:
    """Record init's `runs` (plain, or under CUPTI: Run.profiler) and its correctness run (`checked`)
    for the baseline to adopt (kopt_mcp/init_runs.py): `tree` is `init_runs.worktree_identity` taken before the runs, `toml`
    the proposal's text (its sha256 must match the session's kopt.toml), `gpus` the (name, UUID) of
    each GPU this host shows (the runs used the default one). The record's path, or None
    where nothing was recorded (no tree identity, no run, a record too large)."""
    if tree is None or not runs:
        return None
    found = resolved_interpreter(command, repo, None, probe_s)
    rec = init_runs.InitRecord(
        written_at=time.time(), tree=tree, command=command, config_sha256=init_runs.config_sha256(toml),
        interpreter=(found[0], found[1]) if found else None, host=init_runs.host(), gpus=[n for n, _ in gpus],
        gpu_uuids=[u for _, u in gpus],
        runs=[init_runs.InitRun(files=r.files, log=r.log, seconds=r.seconds, profiler=r.profiler, trace=r.trace)
              for r in runs],
        tests=init_runs.InitTests(command=checked.command, passed=checked.ran and not checked.not_checked,
                                  seconds=checked.seconds, summary=checked.summary, runs=checked.runs,
                                  within=checked.within) if checked else None)
    return init_runs.save(repo, rec)


def _last_duration(runs: list[Run]) -> float:
    return runs[-1].seconds if runs else 0.0
