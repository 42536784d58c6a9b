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
(kopt_mcp/commands/init/kernels.py: the trace's kernels the repository defines).

Running and reading the benchmark (`run_twice`, `analyse`: format, metric, config columns) is
kopt_mcp/commands/init/read.py, re-exported here; this module writes the proposal: correctness tests and
protected paths from the repository's files, the target kernel from one profiled run, and the
commented kopt.toml text. Pure parts (`analyse`, `render`) take contents; `run_init` does the I/O.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
import tempfile
import tomllib
from pathlib import Path

from pydantic import BaseModel

from kopt_mcp.bench.preflight import command_words, runner_problems
from kopt_mcp.bench.runner import run_command
from kopt_mcp.commands.init.correctness import (
    PERF_FILE,
    Checked,
    check_correctness,
    command_text,
    correctness_tests,
    selection,
)
from kopt_mcp.commands.init.kernels import choose_targets, defined_kernels
from kopt_mcp.commands.init.own import ownership
from kopt_mcp.commands.init.protect import protected_paths
from kopt_mcp.commands.init.pytest_report import summary_line
from kopt_mcp.commands.init.read import (
    HIGHER_IS_BETTER,
    SKIP_DIRS,
    TEST_FILE,
    TIME_NAME,
    Run,
    analyse,
    installed_copy_hint,
    result_unit,
    run_twice,
)
from kopt_mcp.config import TargetConfig
from kopt_mcp.errors import InitError
from kopt_mcp.evidence.trace import exact_names_regex
from kopt_mcp.gpus import make_probe
from kopt_mcp.profilers import make_profiler
from kopt_mcp.profilers.base import profile_env

__all__ = ["HIGHER_IS_BETTER", "PERF_FILE", "TIME_NAME", "InitError", "Proposal", "Run", "analyse", "benchmark_files",
           "correctness_tests", "env_prefix", "find_test_files", "installed_copy_hint", "kernel_regex", "propose", "render",
           "result_unit", "run_init", "run_twice"]


class Proposal(BaseModel):
    """The proposed config (TOML with comments), what init found on the way, and what its runs of
    the correctness command showed (None where no test was found)."""

    toml: str
    findings: list[str]
    correctness: Checked | None = None


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


def kernel_regex(repo: Path, command: str, timeout_s: float = 1200.0, profiler=None,
                 topic: str | None = None) -> tuple[str | None, str]:
    """The target kernels' anchored regex from one run under `profiler` (default: the machine's
    `auto` profiler for its first GPU): the kernels of the trace that the repository defines, hottest
    first (kopt_mcp/commands/init/kernels.py `choose_targets`; `topic`: init's --kernel), and why; or None and
    why not (no GPU, no profiler, a failed run, an empty trace)."""
    try:
        prof = profiler
        if prof is None:
            gpus = make_probe("auto").read()
            if not gpus:
                return None, "no GPU here"
            prof = make_profiler("auto", gpus[0].vendor)
        if prof.name == "none" or not prof.available():
            return None, "no profiler available"
        with tempfile.TemporaryDirectory(prefix="kopt-init-trace-") as tmp:
            r = run_command(prof.wrap(command, Path(tmp)), repo, profile_env(prof), timeout_s, Path(tmp) / "p.log")
            if r.exit_code != 0:
                return None, f"the profiled run exited {r.exit_code}"
            trace = prof.parse(Path(tmp))
        names, why = choose_targets([k.name for k in trace.kernels], defined_kernels(repo), topic)
        return exact_names_regex(names), f"{why} (one {prof.name} trace)"
    except Exception as e:  # a proposal, not a gate: say why and go on
        return None, f"profiling failed: {e}"


# --- rendering -----------------------------------------------------------------------------------


def _q(v: object) -> str:
    return json.dumps(v, ensure_ascii=False)


def _correctness_lines(checked: Checked | None, columns: list[str]) -> list[str]:
    """The [correctness] section: the command with what init's runs of it showed, or why none."""
    if checked is None:
        if columns:
            return ["# no pytest file found: the error columns above are the correctness check"]
        return ['# command = "python -m pytest -q tests/test_my_kernel.py"  # no test files found: write one']
    lines = []
    if checked.ran:
        lines.append(f"# init ran this command on the unmodified tree: {checked.summary or 'exit 0'} "
                     f"({checked.seconds:g} s); it must pass there, or every candidate fails for another reason")
    else:
        lines += ["# NOT RUN: init did not run this command (--no-run-tests). Run it on the unmodified tree and check",
                  "# that it passes before `kopt-mcp serve`: a command that fails there fails every candidate"]
    lines += [f"# dropped: {d.target}: {d.kind}: {d.detail}" for d in checked.drops]
    lines += [f"# note: {n}" for n in checked.notes]
    lines.append(f"command = {_q(checked.command)}  # run once per candidate; exit 0 = correct")
    if checked.seconds * 3 > 600:
        lines.append(f"timeout_s = {int(checked.seconds * 3) + 1}  # three times init's run")
    return lines


def render(command: str | None, keys: dict, unit: str | None, correctness: Checked | None, protect: list[str],
           kernel: tuple[str | None, str], findings: list[str]) -> str:
    """The commented kopt.toml text. Raises InitError if it would not load (a bug: report it)."""
    lines = ["# kopt.toml proposed by `kopt-mcp init`: read every line, then `kopt-mcp check-config`.", "#"]
    lines += [f"# found: {f}" for f in findings]
    lines += ["", "[benchmark]"]
    lines.append(f"command = {_q(command)}" if command else
                 '# command = "python my_benchmark.py"  # REQUIRED: the command that writes the results below')
    if keys["format"] != "stdout":
        lines.append(f"csv = {_q(keys['csv'])}  # the result file the benchmark writes")
    lines.append(f"format = {_q(keys['format'])}")
    if keys["format"] == "csv-long":
        lines += [f"metric_name_column = {_q(keys['metric_name_column'])}",
                  f"value_column = {_q(keys['value_column'])}"]
    lines.append(f"metric = {_q(keys['metric'])}" + (f"  # unit: {unit}" if unit else ""))
    lines.append(f"higher_is_better = {'true' if keys['higher_is_better'] else 'false'}")
    if keys["rows"]:
        lines.append(f"rows = {_q(keys['rows'])}  # only these rows count")
    if keys.get("comparisons"):
        lines.append(f"# comparison rows (read, never judged): {'; '.join(keys['comparisons'])}")
    lines.append(f"config_columns = {_q(keys['config_columns'])}")
    if keys["correctness_columns"]:
        lines.append(f"correctness_columns = {_q(keys['correctness_columns'])}  # each 0 on every row")
    lines.append("timeout_s = 600")
    lines += ["", "[correctness]", *_correctness_lines(correctness, keys["correctness_columns"])]
    lines += ["", "[profiler]", 'backend = "auto"']
    regex, why = kernel
    lines.append(f"kernel = {_q(regex)}  # {why}" if regex else
                 f'# kernel = "^my_kernel"  # {why}: run kernel_trace_analysis on the GPU host and set the target')
    lines += ["", "[protect]", f"paths = {_q(protect)}  # the benchmark and the tests (their folders where those hold no kernel and no result): a candidate may not edit them"]
    text = "\n".join(lines) + "\n"
    try:
        TargetConfig.model_validate(tomllib.loads(text))
    except Exception as e:  # the proposal must load as written (once the user has filled in what it asks for)
        if command and (correctness or keys["correctness_columns"]):
            raise InitError(f"the proposed config does not load ({e}): please report this") from e
    return text


def _interpreter(command: str | None) -> str:
    """The Python interpreter the benchmark command runs (`python3`, `/opt/venv/bin/python`), so the
    tests run under the same one; `python` where it runs none."""
    try:
        words, _ = command_words(command or "")
    except ValueError:
        return "python"
    return words[0] if words and re.match(r"^python[0-9.]*$", Path(words[0]).name) else "python"


def gpu_count() -> int:
    """GPUs this machine's `auto` probe sees (0 where none, or where the probe fails)."""
    try:
        return len(make_probe("auto").read())
    except Exception:  # a count for the reasons of dropped tests, never a reason to stop
        return 0


def _run_given(repo: Path, cmd: str, timeout_s: float) -> Checked:
    """The user's own correctness command (--correctness), run once as is: it must exit 0."""
    with tempfile.TemporaryDirectory(prefix="kopt-init-tests-") as tmp:
        r = run_command(cmd, repo, {}, timeout_s, Path(tmp) / "tests.log")
        if r.timed_out or r.exit_code != 0:
            raise InitError(f"--correctness `{cmd}` {'timed out' if r.timed_out else f'exited {r.exit_code}'} on the "
                            f"unmodified tree in {repo}: it must pass there. Log tail: {r.log_tail[-1200:]}")
    return Checked(command=cmd, ran=True, summary=summary_line(r.log_tail), seconds=round(r.duration_s, 1))


def propose_correctness(repo: Path, command: str | None, bench: list[str], found: list[str], kernel: str | None,
                        given: str | None = None, run: bool = True, timeout_s: float = 600.0,
                        own_packages: set[str] = frozenset()) -> Checked | None:
    """The correctness command (kopt_mcp/commands/init/correctness.py), run once on the unmodified
    tree unless `run` is False; `given` (--correctness) is run as is. None where no test file is
    found. Raises InitError when the test runner is missing or nothing passes."""
    tests = correctness_tests(found, bench, kernel, command or "")
    if given is None and not tests:
        return None
    prefix, python = env_prefix(command or ""), _interpreter(command)
    select = selection(repo, tests, bench, command or "", kernel)
    cmd = given or command_text(prefix, python, tests[:8], select, [])
    if not run:
        return Checked(command=cmd, ran=False)
    problems = runner_problems(cmd, repo)
    if problems:
        raise InitError(f"{'; '.join(problems)} (the correctness command init proposes is `{cmd}`)")
    if given:
        return _run_given(repo, given, timeout_s)
    return check_correctness(repo, prefix, python, tests, select, timeout_s, gpu_count(), own_packages)


def propose(repo: Path, command: str | None, results: str | None = None, kernel: str | None = None,
            provider: str | None = None, mode: str | None = None, metric_name: str | None = None,
            timeout_s: float = 600.0, profile: bool = True, correctness: str | None = None,
            run_tests: bool = True, tests_timeout_s: float = 600.0) -> Proposal:
    """Run (or read) the benchmark and build the proposal: the benchmark run twice (`timeout_s`
    each), the correctness command run on the unmodified tree (`tests_timeout_s` per run; not with
    `run_tests` False; `correctness`: the user's own command), one profiled run (`profile`).
    Raises InitError with what to pass."""
    repo = repo.resolve()
    if command:
        runs = run_twice(repo, command, timeout_s)
    else:
        if not results:
            raise InitError("pass --command CMD (the benchmark, run twice) or --results GLOB (output already there)")
        hits = sorted(p for p in repo.glob(results) if p.is_file())
        if not hits:
            raise InitError(f"no file matches --results {results!r} under {repo}")
        runs = [Run(files={str(h.relative_to(repo)): (None, h.read_bytes()) for h in hits})]
    found, bench = find_test_files(repo), (benchmark_files(repo, command) if command else [])
    own = ownership(repo, bench, command or "")
    keys, findings = analyse(runs, results=results, kernel=kernel, provider=provider, mode=mode,
                             metric_name=metric_name, own=own)
    unit = result_unit(keys, runs, "benchmark.log")
    checked = propose_correctness(repo, command, bench, found, kernel, correctness, run_tests, tests_timeout_s,
                                  {n for n in own.names if n.isidentifier()})
    oracles = [t for t in find_test_files(repo, ORACLE_FILE)]
    written = {path for r in runs for path in r.files}
    protect = protected_paths(repo, bench, found, oracles[:10], written)
    kern = kernel_regex(repo, command, topic=kernel) if (profile and command) else (None, "not profiled")
    return Proposal(toml=render(command, keys, unit, checked, protect, kern, findings), findings=findings,
                    correctness=checked)


def run_init(repo: Path, command: str | None, results: str | None, kernel: str | None, provider: str | None,
             mode: str | None, metric_name: str | None, write: bool, force: bool, correctness: str | None = None,
             run_tests: bool = True, tests_timeout_s: float = 600.0) -> int:
    """CLI entry: print the proposal (or write <repo>/kopt.toml with --write); 0, or 2 with the error.
    A proposal whose correctness command init did not run (--no-run-tests) is printed, never written."""
    try:
        p = propose(repo, command, results, kernel, provider, mode, metric_name, correctness=correctness,
                    run_tests=run_tests, tests_timeout_s=tests_timeout_s)
    except InitError as e:
        print(f"kopt-mcp init: {e}", file=sys.stderr)
        return 2
    if p.correctness is not None and not p.correctness.ran:
        print("kopt-mcp init: WARNING: the correctness command was NOT run (--no-run-tests): run it on the "
              "unmodified tree before `serve`", file=sys.stderr)
    if not write:
        sys.stdout.write(p.toml)
        return 0
    if p.correctness is not None and not p.correctness.ran:
        print("kopt-mcp init: not writing kopt.toml: its correctness command was never run (--no-run-tests). Omit "
              "--write to print it, or drop --no-run-tests so init runs it", file=sys.stderr)
        return 2
    dest = repo / "kopt.toml"
    if dest.exists() and not force:
        print(f"kopt-mcp init: {dest} exists; pass --force to replace it (or omit --write to print)", file=sys.stderr)
        return 2
    dest.write_text(p.toml)
    for d in p.correctness.drops if p.correctness else []:
        print(f"kopt-mcp init: dropped from the correctness command: {d.target}: {d.kind}", file=sys.stderr)
    print(f"wrote {dest}; next: kopt-mcp check-config --repo {repo}", file=sys.stderr)
    return 0
