"""`kopt-mcp check-config`: validate kopt.toml against the repository and print a compact summary.

The summary: the config, the benchmark and correctness commands, the result files and how they are
read (format, rows filter, counts, the first 10 config classes), the gates in force, the device and
profiler, protected paths, warnings. Problems that make every run fail (a command, a file it names
or the test runner that is not there: kopt_mcp/bench/preflight.py; a workdir that does not
exist, a result glob that can never match inside the tree, existing results that do not fit) are
errors: exit code 2.

The classes previewed are only rows the benchmark writes now (issue 36 item 5). With `run` (CLI
`--run`) the benchmark runs once in place (kopt_mcp/commands/init/runs.py: result files are put back
as they were) and the preview holds only the rows that run wrote (readers.metrics: a row it left
unchanged is stale); classes the result files already held that the run never wrote (another
kernel's, provider's or device's, or gone) are named in a warning. Without it, a result file
committed to git or older than the config is not previewed (its rows are not from a run of this
config: stale, another device's); its rows are still checked against the config.
"""

from __future__ import annotations

import fnmatch
import glob
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from kopt_mcp.bench.preflight import interpreter_line, preflight_problems, resolved_interpreter
from kopt_mcp.config import BenchmarkSection, TargetConfig, load_config
from kopt_mcp.commands.init.runs import run_twice
from kopt_mcp.errors import ConfigError, InitError, MetricsError
from kopt_mcp.gpus import make_probe
from kopt_mcp.profilers import make_profiler
from kopt_mcp.profilers.cupti import pythonpath_problems
from kopt_mcp.readers import resolve_format
from kopt_mcp.readers.base import ResultFile
from kopt_mcp.readers.metrics import MetricTable, read_metrics, read_results

SHOWN_CLASSES = 10


def glob_problems(pattern: str) -> list[str]:
    """Why the result glob can never match inside the run's tree (absolute, or climbing out with ..)."""
    if Path(pattern).is_absolute():
        return [f"[benchmark] csv = {pattern!r} is absolute: runs happen in disposable checkouts, so write it "
                "relative to workdir"]
    if ".." in Path(pattern).parts:
        return [f"[benchmark] csv = {pattern!r} climbs out of the tree with '..': write it relative to workdir, "
                "inside the repository"]
    return []


def command_warnings(command: str, cwd: Path) -> list[str]:
    """Advice for commands that work but lose something: a shell script the command runs that
    replaces PYTHONPATH drops the CUPTI injector (profilers.cupti.pythonpath_problems names the line
    and what to write). A PYTHONPATH assignment in the command itself is handled
    (profilers.cupti.keep_injector puts the injector in front of it)."""
    return pythonpath_problems(command, cwd)


def _interpreters(out: Console, command: str, cwd: Path, tests: str | None, repo: Path) -> list[str]:
    """Print the interpreter the benchmark's (and the correctness command's) `python` resolves to;
    a warning when the two differ (the tests would check another installation than the one timed)."""
    bench = resolved_interpreter(command, cwd)
    out.print(escape(f"interpreter: {interpreter_line(command, cwd)}"))
    if not tests:
        return []
    mine = resolved_interpreter(tests, repo)
    out.print(escape(f"correctness interpreter: {interpreter_line(tests, repo)}"))
    if bench and mine and bench[0] != mine[0]:
        return [f"the benchmark runs {bench[0]} ({bench[1]}) but the correctness command {mine[0]} ({mine[1]}): "
                "write the same interpreter in both"]
    return []


def _gates_line(t: TargetConfig) -> str:
    g = t.gates
    return (f"gates: noise {g.noise_pct:g}%, {g.confirmations} confirmation(s), confidence {g.confidence:g}, "
            f"at most {g.max_rounds} candidate run(s) per verdict, {g.baseline_runs} baseline run(s), "
            f"{g.max_repairs} repair(s), stop after {g.max_consecutive_regressions} regressions")


def _classes_lines(t: MetricTable) -> list[str]:
    unit = f" {t.unit}" if t.unit else ""
    lines = [f"  {c.key[:100]}: {c.metric:.6g}{unit} ({c.rows} row(s){'' if c.correct else ', INCORRECT'})"
             for c in t.classes[:SHOWN_CLASSES]]
    if len(t.classes) > SHOWN_CLASSES:
        lines.append(f"  ... and {len(t.classes) - SHOWN_CLASSES} more")
    return lines


def stale_files(files: list[Path], config: Path) -> list[Path]:
    """The result files last written before `config` was (mtime): rows of an earlier run, maybe of
    another kernel or provider, that the next run may not write at all."""
    try:
        since = config.stat().st_mtime
    except OSError:
        return []
    return [f for f in files if f.stat().st_mtime < since]


def tracked_files(repo: Path, files: list[Path]) -> set[Path]:
    """Those of `files` (under `repo`) that git tracks: committed result rows, maybe of another device."""
    import git

    try:
        r = git.Repo(repo, search_parent_directories=True)
        out = r.git.ls_files("--", *[str(f.resolve()) for f in files]).splitlines()
    except (git.exc.GitError, ValueError):
        return set()
    root = Path(r.working_tree_dir).resolve()
    return {root / x for x in out}


def _class_line(t: MetricTable, what: str) -> str:
    return (f"  {what}: {sum(c.rows for c in t.classes)} counted row(s), {len(t.classes)} config class(es) over "
            f"columns {t.config_columns}" + (f", unit {t.unit}" if t.unit else ""))


def _existing(out: Console, repo: Path, files: list[Path], b: BenchmarkSection, warnings: list[str],
              config: Path) -> int:
    """The result files already there, without a run: previewed only where neither committed nor older
    than the config; checked against the config either way (2 where they do not fit)."""
    old = set(stale_files(files, config)) | {f for f in files if f.resolve() in tracked_files(repo, files)}
    try:
        t = read_metrics(files, b)
    except MetricsError as e:
        out.print(f"[red]existing results do not fit the config[/red]: {escape(str(e))}")
        return 2
    names = ", ".join(f.name for f in files)
    if old:
        out.print(escape(_class_line(t, f"existing {names} (not previewed: not from a run of this config)")))
        warnings.append(f"{', '.join(sorted(f.name for f in old))}: committed to git or older than {config.name}, "
                        "its rows are not what the benchmark writes now (stale, another device's, or classes of another "
                        "kernel it never runs): `kopt-mcp check-config --run` runs the benchmark once and previews only "
                        "the rows it writes")
        return 0
    out.print(escape(_class_line(t, f"existing {names} (the last run's rows; --run to run it now)")))
    for line in _classes_lines(t):
        out.print(escape(line))
    warnings.extend(t.warnings)
    if len(t.classes) > 200:
        warnings.append(f"{len(t.classes)} config classes: narrow [benchmark] rows to the kernel being optimized")
    return 0


def _run_preview(out: Console, repo: Path, b: BenchmarkSection, warnings: list[str]) -> int:
    """Run the benchmark once in place and preview only the rows it wrote (module docstring); the classes
    the files held before that the run never wrote are named in a warning. 2 where the run fails or
    writes no result the config reads."""
    cwd = repo / b.workdir
    try:
        run = run_twice(cwd, b.command, b.timeout_s, runs=1)[0]
    except InitError as e:
        out.print(f"[red]the benchmark run failed[/red]: {escape(str(e))}")
        return 2
    if resolve_format(b) == "stdout":
        mine = [ResultFile(path=str(cwd / "benchmark.log"), after=run.log)]
    else:
        written = {p: v for p, v in run.files.items() if fnmatch.fnmatch(p, b.csv)}
        if not written:
            out.print(f"[red]the run wrote no file matching {escape(repr(b.csv))}[/red] (it wrote: "
                      f"{escape(', '.join(sorted(run.files)) or 'no .csv or .json file')})")
            return 2
        others = sorted({Path(p).relative_to(cwd).as_posix() for p in glob.glob(str(cwd / b.csv), recursive=True)
                         if Path(p).is_file()} - set(written))
        for name in others:
            warnings.append(f"{name}: matches {b.csv!r} but this run did not write it: not previewed, and its rows "
                            "are never judged (stale, another device's or another kernel's); remove it or narrow the "
                            "glob")
        tracked = tracked_files(cwd, [cwd / p for p in written])
        mine = [ResultFile(path=str(cwd / p), before=bv, after=av, tracked=(cwd / p).resolve() in tracked)
                for p, (bv, av) in sorted(written.items())]
    try:
        t = read_results(mine, b)
    except MetricsError as e:
        out.print(f"[red]the run's results do not fit the config[/red]: {escape(str(e))}")
        return 2
    out.print(escape(_class_line(t, f"this run ({run.seconds:g} s) wrote") + (
        f"; {t.stale_rows} row(s) it left unchanged not counted" if t.stale_rows else "")))
    for line in _classes_lines(t):
        out.print(escape(line))
    warnings.extend(t.warnings)
    before = [ResultFile(path=f.path, after=f.before) for f in mine if f.before]
    try:
        held = read_results(before, b).values() if before else {}
    except MetricsError:
        held = {}
    never = [k for k in held if k not in t.values()]
    if never:
        warnings.append(f"{len(never)} config class(es) in the result files that this run never wrote (stale rows, or "
                        f"another kernel's, provider's or device's; never judged): {', '.join(never[:5])}"
                        + (f" and {len(never) - 5} more" if len(never) > 5 else ""))
    return 0


def _results(out: Console, repo: Path, b: BenchmarkSection, warnings: list[str], config: Path, run: bool) -> int:
    fmt = resolve_format(b)
    out.print(escape(f"metric: {b.metric} ({'higher' if b.higher_is_better else 'lower'} is better)"
                     + (f": the {b.value_column} of rows whose {b.metric_name_column} is {b.metric!r}"
                        if fmt == "csv-long" else "")))
    out.print(escape(f"results: {b.csv or 'the run log'} (format {fmt}); rows that count: {b.rows or 'all'}"))
    if run:
        return _run_preview(out, repo, b, warnings)
    if fmt == "stdout":
        out.print("  read from the run log: config classes are found from the first run (--run to run it now)")
        return 0
    files = sorted(Path(p) for p in glob.glob(str(repo / b.workdir / b.csv), recursive=True) if Path(p).is_file())
    if not files:
        out.print(f"  no file matching {b.csv!r} yet: config classes are found from the first run (--run to run it now)")
        return 0
    return _existing(out, repo, files, b, warnings, config)


def check_config(repo: Path, config: Path | None, run: bool = False) -> int:
    """Print the config's summary (rich, to stdout); 0 when usable, 2 with the errors otherwise. `run`:
    run the benchmark once and preview only the rows it writes (module docstring)."""
    out = Console(soft_wrap=True)
    path = config or repo / "kopt.toml"
    try:
        cf = load_config(path)
    except ConfigError as e:
        out.print(f"[red]config error[/red]: {escape(str(e))}")
        return 2
    t, status, warnings, errors = cf.target, 0, [], []
    b = t.benchmark
    out.print(f"config {cf.path} (sha256 {cf.sha256[:12]})")
    out.print(escape(f"benchmark: `{b.command}` in {b.workdir}, timeout {b.timeout_s:g} s"))
    errors += preflight_problems(t, repo)  # kopt_mcp/bench/preflight.py: programs, files, test runner
    errors += glob_problems(b.csv) if b.csv else []
    if (repo / b.workdir).is_dir():
        warnings += command_warnings(b.command, repo / b.workdir)
        warnings += _interpreters(out, b.command, repo / b.workdir, t.correctness.command, repo)
    out.print(escape(f"correctness: columns {b.correctness_columns or '-'}; condition {b.correctness or '-'}; "
                     f"command {t.correctness.command or '-'}"))
    if not errors:
        status = max(status, _results(out, repo, b, warnings, Path(cf.path), run))
    out.print(_gates_line(t))
    try:
        probe = make_probe(t.gates.gpu_probe)
        gpus = probe.read()
        vendor = gpus[0].vendor if gpus else "cpu"
        out.print(f"GPU probe: {probe.name}; {len(gpus)} GPU(s)" + (": the CPU is the device" if not gpus else ""))
        prof = make_profiler(t.profiler.backend, vendor)
        out.print(escape(f"profiler: {prof.name}" + (f", target kernel regex {t.profiler.kernel!r}"
                                                    if t.profiler.kernel else ", target: the hottest kernel")))
    except Exception as e:  # probe/profiler problems are findings, not crashes
        out.print(f"[red]device check failed[/red]: {escape(str(e))}")
        status = 2
    out.print(escape(f"protected: {t.protect.paths + ['kopt.toml', 'performance.md']}"))
    for w in warnings:
        out.print(f"[yellow]warning[/yellow]: {escape(w)}")
    for e in errors:
        out.print(f"[red]error[/red]: {escape(e)}")
    return 2 if errors else status
