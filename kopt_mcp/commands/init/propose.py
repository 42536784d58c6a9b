"""`kopt-mcp init`: look at a repository's own benchmark and propose a commented kopt.toml.

With `--command`, the benchmark runs twice in the repository (the result files it writes are put
back as they were afterwards); without, `--results GLOB` names output that is already there. From
what the runs wrote it proposes: the result file and format (CSV wide or long, JSON,
pytest-benchmark, or the run log), the metric and its unit, error columns, config columns (dropping
columns that differ between two identical runs), a `rows` filter where several kernels, providers
or metric names are present (the repository's own provider and the kernel the command benchmarks:
kopt_mcp/commands/init/own.py; flags pick others; modes become config classes), protected paths
(kopt_mcp/commands/init/protect.py: the benchmark's and the tests' folders), the correctness command
(kopt_mcp/commands/init/correctness.py: the benchmark's topic, its environment assignments and
interpreter, RUN once on the unmodified tree and narrowed to what passes there, each dropped test
named with why), and the target kernels from one profiled run where a profiler is available
(kopt_mcp/bench/kernel_sources.py: the trace's kernels the repository defines): under CUPTI, whose
runs are script-metric runs, that is the benchmark's second run (`script_profiler`, `traced_targets`);
under ncu or rocprof a separate run (`kernel_regex`): kopt_mcp/commands/init/profiled.py.

Running the benchmark (`run_twice`) is kopt_mcp/commands/init/runs.py and reading it (`analyse`:
format, metric, config columns) kopt_mcp/commands/init/read.py, both re-exported here; the budget
and the progress lines are kopt_mcp/commands/init/progress.py; the runs and the tests' outcome are
kept for the baseline to adopt (`keep_for_baseline`, kopt_mcp/init_runs.py); this module writes the proposal: correctness tests and
protected paths from the repository's files, the target kernel from one profiled run, and the
commented kopt.toml text. Pure parts (`analyse`, `render`) take contents; `run_init` does the I/O.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import tempfile
from pathlib import Path

from kopt_mcp.bench.kernel_sources import TEST_FILE
from kopt_mcp.bench.preflight import interpreter_line, interpreter_word, resolved_interpreter, runner_problems
from kopt_mcp.bench.runner import run_command
from kopt_mcp.commands.init import saved
from kopt_mcp.commands.init.correctness import Checked, check_correctness, command_text, drop_lines
from kopt_mcp.commands.init.own import ownership
from kopt_mcp.commands.init.profiled import (PROFILED_RUN_FACTOR, gpu_count, gpu_ids, kernel_regex, profiled_targets,
                                             script_profiler, traced_targets)
from kopt_mcp.commands.init.progress import DEFAULT_BUDGET_S, DEFAULT_TESTS_TIMEOUT_S, Budget, Progress
from kopt_mcp.commands.init.protect import protected_paths
from kopt_mcp.commands.init.pytest_report import summary_line
from kopt_mcp.commands.init.read import HIGHER_IS_BETTER, TIME_NAME, analyse, result_unit
from kopt_mcp.commands.init.render import Proposal, render
from kopt_mcp.commands.init.runs import (SECOND_RUN, SKIP_DIRS, Run, installed_copy_hint, keep_for_baseline, run_twice,
                                         traced_late_run)
from kopt_mcp.commands.init.test_files import PERF_FILE, correctness_tests, selection
from kopt_mcp.errors import InitError
from kopt_mcp.init_runs import worktree_identity

__all__ = ["HIGHER_IS_BETTER", "PERF_FILE", "TIME_NAME", "InitError", "Proposal", "Run", "analyse", "benchmark_files",
           "correctness_tests", "env_prefix", "find_test_files", "installed_copy_hint", "kernel_regex", "propose", "render",
           "result_unit", "run_init", "run_twice"]


ORACLE_FILE = re.compile(r"^(reference|ref|oracle|golden)(_.*)?\.py$|^.*_(reference|ref|oracle)\.py$")


def find_test_files(repo: Path, pattern: re.Pattern = TEST_FILE) -> list[str]:
    """Repository-relative files whose name matches `pattern` (default: pytest files test_*.py,
    *_test.py; ORACLE_FILE: reference/oracle implementations) outside hidden and vendored folders."""
    hits = []
    for root, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        hits += [str((Path(root) / f).relative_to(repo)) for f in files if pattern.match(f)]
    return sorted(hits)


def benchmark_files(repo: Path, command: str) -> list[str]:
    """Files of `repo` that `command` names (the benchmark script and its arguments that exist, the
    file of a module `python -m` runs)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    out: list[str] = []
    root = repo.resolve()
    # `python -m benchmarks.ops.run`: the module's file (benchmarks/ops/run.py or its __main__.py)
    for prev, w in zip(words, words[1:]):
        if prev == "-m" and re.fullmatch(r"[A-Za-z_][\w.]*", w):
            base = Path(*w.split("."))
            words += [str(base.with_suffix(".py")), str(base / "__main__.py")]
    for w in words:
        # the word itself, a value after "=", and path-like pieces inside it: a script that
        # `python -c "...runpy.run_path('benchmarks/rms_norm.py')"` runs is a benchmark file too
        for piece in dict.fromkeys([w.split("=", 1)[-1], *_PATH_PIECE.findall(w)]):
            p = repo / piece
            if piece and not piece.startswith("-") and p.is_file() and p.resolve().is_relative_to(root):
                rel = str(p.resolve().relative_to(root))
                if rel not in out:
                    out.append(rel)
    return out


#: a path-like piece of a command word (letters, digits, _ . / -)
_PATH_PIECE = re.compile(r"[\w./-]+")
#: the environment assignments a shell command starts with (`PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} `)
_ENV_PREFIX = re.compile(r"""^\s*((?:[A-Za-z_]\w*=(?:"[^"]*"|'[^']*'|[^\s"'])*\s+)+)""")


def env_prefix(command: str) -> str:
    """The variable assignments `command` starts with, as written, with one trailing space
    ("PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} python b.py" -> "PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} "),
    or ''. The correctness command gets them too: a benchmark that puts the worktree's sources first
    needs its tests to import the same sources. Pure."""
    m = _ENV_PREFIX.match(command)
    return m.group(1).strip() + " " if m else ""


def _run_given(repo: Path, cmd: str, timeout_s: float, budget: Budget, progress: Progress) -> Checked:
    """The user's own correctness command (--correctness), run once as is: it must exit 0 (or the
    budget ends it: then it comes back marked as not checked)."""
    if not budget.can_start():
        budget.not_checked("the correctness command (it must pass on the unmodified tree)", cmd)
        return Checked(command=cmd, ran=False, not_checked=f"init's budget ({budget.total_s:g} s) ran out before it")
    with tempfile.TemporaryDirectory(prefix="kopt-init-tests-") as tmp:
        limit = budget.limit(timeout_s)
        with progress.step(f"the correctness command `{cmd}`"):
            r = run_command(cmd, repo, {}, limit, Path(tmp) / "tests.log")
        if r.timed_out and limit < timeout_s:
            budget.not_checked("the correctness command (it must pass on the unmodified tree)", cmd)
            return Checked(command=cmd, ran=False, not_checked=f"init's budget ({budget.total_s:g} s) ran out "
                           f"after {r.duration_s:.0f} s inside its run")
        if r.timed_out or r.exit_code != 0:
            raise InitError(f"--correctness `{cmd}` {'timed out' if r.timed_out else f'exited {r.exit_code}'} on the "
                            f"unmodified tree in {repo}: it must pass there. Log tail: {r.log_tail[-1200:]}")
    return Checked(command=cmd, ran=True, summary=summary_line(r.log_tail), seconds=round(r.duration_s, 1), runs=1)


def propose_correctness(repo: Path, command: str | None, bench: list[str], found: list[str], kernel: str | None,
                        given: str | None = None, run: bool = True, timeout_s: float = 600.0,
                        own_packages: set[str] = frozenset(), budget: Budget | None = None,
                        progress: Progress | None = None, test_timeout_s: float | None = 60.0) -> Checked | None:
    """The correctness command (kopt_mcp/commands/init/correctness.py), run once on the unmodified
    tree unless `run` is False; `given` (--correctness) is run as is. Each run's limit is `timeout_s`
    cut to what is left of `budget`; `test_timeout_s`: pytest-timeout's limit per test, where the
    plugin imports in the tests' interpreter (else only the run's limit). None where no test file is
    found. Raises InitError when the test runner is missing or nothing passes."""
    budget = budget or Budget(max(timeout_s * 3, 1.0))
    progress = progress or Progress(budget, quiet=True)
    sources = {}
    for t in found:
        try:
            sources[t] = (repo / t).read_text(errors="replace")
        except OSError:
            continue
    tests = correctness_tests(found, bench, kernel, command or "", sources)
    if given is None and not tests:
        progress.say("no pytest file of the benchmark's topic found: no correctness command to run")
        return None
    prefix, python = env_prefix(command or ""), interpreter_word(command or "")
    select = selection(repo, tests, bench, command or "", kernel)
    cmd = given or command_text(prefix, python, tests[:8], select, [])
    if not given:
        progress.say(f"correctness tests: {len(tests)} file(s) of the kernel's topic ({', '.join(tests[:8])}"
                     f"{' and more' if len(tests) > 8 else ''})" + (f", selected with {' '.join(select)}" if select else ""))
    if not run:
        return Checked(command=cmd, ran=False)
    if not budget.can_start():
        budget.not_checked("the correctness command (it must pass on the unmodified tree)", cmd)
        return Checked(command=cmd, ran=False, not_checked=f"init's budget ({budget.total_s:g} s) ran out before it")
    problems = runner_problems(cmd, repo, _probe_s(budget))
    if problems:
        raise InitError(f"{'; '.join(problems)} (the correctness command init proposes is `{cmd}`)")
    if given:
        return _run_given(repo, given, timeout_s, budget, progress)
    plugin = resolved_interpreter(cmd, repo, "pytest_timeout", _probe_s(budget)) if test_timeout_s else None
    per_test = test_timeout_s if plugin and plugin[2] else None
    if test_timeout_s:
        progress.say(f"per-test limit: {test_timeout_s:g} s (pytest-timeout)" if per_test else
                     "pytest-timeout is not installed for the tests' interpreter: only the run's limit applies")
    return check_correctness(repo, prefix, python, tests, select, timeout_s, gpu_count(), own_packages, budget,
                             progress, per_test)


def _probe_s(budget: Budget) -> float:
    """The time limit (s) of a short probe of the interpreter: 30 s, or what is left of `budget` (5 s at least)."""
    return max(5.0, min(30.0, budget.left()))


def _second_run_late(repo: Path, command: str, timeout_s: float, budget: Budget, progress: Progress, prof,
                     runs: list[Run], reading: dict, read: list[str]) -> tuple[dict, list[str]] | None:
    """Benchmark run 2, after the tests, under `prof` (runs.traced_late_run) where the budget skipped it
    before them: appended to `runs` (its second-run check no longer NOT CHECKED) and the results read
    again from both runs (`reading`: analyse's arguments; `read`: what the first run's reading found,
    so that only new findings are said): (keys, findings) of both runs; None where it failed (the
    first run's reading stands)."""
    late = traced_late_run(repo, command, timeout_s, budget, progress, prof)
    if late is None:
        return None
    runs.append(late)
    budget.unchecked[:] = [u for u in budget.unchecked if u[0] != SECOND_RUN]
    keys, again = analyse(runs, **reading)
    for f in again:
        if f not in read:
            progress.say(f"found (two runs): {f}")
    return keys, again


def _read_runs(repo: Path, command: str | None, results: str | None, timeout_s: float, budget: Budget,
               progress: Progress, profiler=None) -> list[Run]:
    if command:
        return run_twice(repo, command, timeout_s, budget=budget, progress=progress, profiler=profiler)
    if not results:
        raise InitError("pass --command CMD (the benchmark, run twice) or --results GLOB (output already there)")
    hits = sorted(p for p in repo.glob(results) if p.is_file())
    if not hits:
        raise InitError(f"no file matches --results {results!r} under {repo}")
    return [Run(files={str(h.relative_to(repo)): (None, h.read_bytes()) for h in hits})]


def propose(repo: Path, command: str | None, results: str | None = None, kernel: str | None = None,
            provider: str | None = None, mode: str | None = None, metric_name: str | None = None,
            timeout_s: float = 600.0, profile: bool = True, correctness: str | None = None,
            run_tests: bool = True, tests_timeout_s: float = DEFAULT_TESTS_TIMEOUT_S,
            budget_s: float = DEFAULT_BUDGET_S,
            test_timeout_s: float | None = 60.0, progress: Progress | None = None) -> Proposal:
    """Run (or read) the benchmark and build the proposal: the benchmark run twice (`timeout_s`
    each), the correctness command run on the unmodified tree (`tests_timeout_s` per run, pytest-
    timeout's `test_timeout_s` per test; not with `run_tests` False; `correctness`: the user's own
    command), one profiled run (`profile`); all of it within `budget_s` seconds, each step's limit
    cut to what is left (kopt_mcp/commands/init/progress.py), what it could not check marked NOT
    CHECKED. `progress`: where the progress lines go (default: none). Raises InitError with what to pass."""
    repo = repo.resolve()
    budget = Budget(budget_s)
    progress = Progress(budget, console=progress.console, quiet=progress.quiet) if progress else Progress(budget, quiet=True)
    tree = worktree_identity(repo) if command else None  # what the runs measure: the baseline may adopt them
    prof = script_profiler(profile, command)
    runs = _read_runs(repo, command, results, timeout_s, budget, progress, prof)
    found, bench = find_test_files(repo), (benchmark_files(repo, command) if command else [])
    own = ownership(repo, bench, command or "")
    reading = {"results": results, "kernel": kernel, "provider": provider, "mode": mode, "metric_name": metric_name,
               "own": own}
    keys, read = analyse(runs, **reading)
    where = ([f"interpreter: {interpreter_line(command, repo, _probe_s(budget))}"] if command else
             ["read from result files already there, not from a run: their rows may be stale or another kernel's; "
              "pass --command so init runs the benchmark and reads only the rows it writes now"])
    for f in read + where:
        progress.say(f"found: {f}")
    checked = propose_correctness(repo, command, bench, found, kernel, correctness, run_tests, tests_timeout_s,
                                  {n for n in own.names if n.isidentifier()}, budget, progress, test_timeout_s)
    oracles = [t for t in find_test_files(repo, ORACLE_FILE)]
    written = {path for r in runs for path in r.files}
    protect = protected_paths(repo, bench, found, oracles[:10], written)
    progress.say(f"protected: {protect}")
    if prof is not None and len(runs) == 1 and budget.can_start(runs[0].seconds * PROFILED_RUN_FACTOR):
        keys, read = (_second_run_late(repo, command, timeout_s, budget, progress, prof, runs, reading, read)
                      or (keys, read))
    findings = read + where
    unit = result_unit(keys, runs, "benchmark.log")
    kern = traced_targets(runs, repo, kernel) or (
        profiled_targets(repo, command, kernel, budget, progress, runs[0].seconds, timeout_s) if (profile and command)
        else (None, "not profiled"))
    progress.say(f"target kernels: {kern[0] or '-'} ({kern[1]})")
    unchecked = list(budget.unchecked)
    toml = render(command, keys, unit, checked, protect, kern, findings, unchecked)
    if command and keep_for_baseline(repo, command, tree, runs, checked, toml, _probe_s(budget), gpu_ids()):
        progress.say(f"kept {len(runs)} benchmark run(s) and the tests' outcome for the baseline (it adopts them while "
                     "the tree, command, config and interpreter stay the same)")
    return Proposal(toml=toml, findings=findings, correctness=checked, unchecked=unchecked)


def run_init(repo: Path, command: str | None, results: str | None, kernel: str | None, provider: str | None,
             mode: str | None, metric_name: str | None, write: bool, force: bool, correctness: str | None = None,
             run_tests: bool = True, tests_timeout_s: float = DEFAULT_TESTS_TIMEOUT_S,
             budget_s: float = DEFAULT_BUDGET_S,
             test_timeout_s: float | None = 60.0, fresh: bool = False) -> int:
    """CLI entry: print the proposal (or write <repo>/kopt.toml with --write); 0, or 2 with the error.
    Progress goes to stderr. The proposal is saved under the git directory
    (kopt_mcp/commands/init/saved.py); `--write` after an init with the same flags on the same tree
    writes that one instead of running everything again (`fresh`: run again). A proposal whose
    correctness command init did not run (--no-run-tests) is printed, never written; one the budget
    left partly unchecked is written with those parts marked NOT CHECKED."""
    if budget_s <= 0:
        print(f"kopt-mcp init: --budget {budget_s:g}: pass a positive number of seconds", file=sys.stderr)
        return 2
    dest = repo / "kopt.toml"
    if write and dest.exists() and not force:
        print(f"kopt-mcp init: {dest} exists; pass --force to replace it (or omit --write to print)", file=sys.stderr)
        return 2
    flags = {"command": command, "results": results, "kernel": kernel, "provider": provider, "mode": mode,
             "metric_name": metric_name, "correctness": correctness, "run_tests": run_tests,
             "tests_timeout_s": tests_timeout_s, "budget_s": budget_s, "test_timeout_s": test_timeout_s}
    progress = Progress(Budget(budget_s))
    p = None if fresh or not write else saved.load(repo, flags)
    if p is not None:
        progress.say(f"writing the proposal init made for the same flags on this tree (saved in {saved.where(repo)}; "
                     "--fresh runs everything again)")
    else:
        try:
            p = propose(repo, command, results, kernel, provider, mode, metric_name, correctness=correctness,
                        run_tests=run_tests, tests_timeout_s=tests_timeout_s, budget_s=budget_s,
                        test_timeout_s=test_timeout_s, progress=progress)
        except InitError as e:
            print(f"kopt-mcp init: {e}", file=sys.stderr)
            return 2
        saved.save(repo, flags, p)
    for what, cmd in p.unchecked:
        print(f"kopt-mcp init: NOT CHECKED (the budget of {budget_s:g} s ran out): {what}"
              + (f"; run by hand: {cmd}" if cmd else ""), file=sys.stderr)
    not_run = p.correctness is not None and not p.correctness.ran and not p.correctness.not_checked
    if not_run:
        print("kopt-mcp init: WARNING: the correctness command was NOT run (--no-run-tests): run it on the "
              "unmodified tree before `serve`", file=sys.stderr)
    if not write:
        sys.stdout.write(p.toml)
        return 0
    if not_run:
        print("kopt-mcp init: not writing kopt.toml: its correctness command was never run (--no-run-tests). Omit "
              "--write to print it, or drop --no-run-tests so init runs it", file=sys.stderr)
        return 2
    dest.write_text(p.toml)
    for line in drop_lines(p.correctness.drops, detail=False) if p.correctness else []:
        print(f"kopt-mcp init: dropped from the correctness command: {line}", file=sys.stderr)
    print(f"wrote {dest}; next: kopt-mcp check-config --repo {repo}", file=sys.stderr)
    return 0
