"""`kopt-mcp check-config`: validate kopt.toml against the repository and print a compact summary.

The summary: the config, the benchmark and correctness commands, the result files and how they are
read (format, rows filter, counts, the first 10 config classes), the gates in force, the device and
profiler, protected paths, warnings. Problems that make every run fail (a command, a file it names
or the test runner that is not there: kopt_mcp/bench/preflight.py; a workdir that does not
exist, a result glob that can never match inside the tree, existing results that do not fit) are
errors: exit code 2.
"""

from __future__ import annotations

import glob
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from kopt_mcp.bench.preflight import interpreter_line, preflight_problems, resolved_interpreter
from kopt_mcp.config import BenchmarkSection, TargetConfig, load_config
from kopt_mcp.errors import ConfigError, MetricsError
from kopt_mcp.gpus import make_probe
from kopt_mcp.profilers import make_profiler
from kopt_mcp.profilers.cupti import pythonpath_problems
from kopt_mcp.readers import resolve_format
from kopt_mcp.readers.metrics import MetricTable, read_metrics

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


def _results(out: Console, repo: Path, b: BenchmarkSection, warnings: list[str], config: Path) -> int:
    fmt = resolve_format(b)
    out.print(escape(f"metric: {b.metric} ({'higher' if b.higher_is_better else 'lower'} is better)"
                     + (f": the {b.value_column} of rows whose {b.metric_name_column} is {b.metric!r}"
                        if fmt == "csv-long" else "")))
    out.print(escape(f"results: {b.csv or 'the run log'} (format {fmt}); rows that count: {b.rows or 'all'}"))
    if fmt == "stdout":
        out.print("  read from the run log: config classes are found from the first run")
        return 0
    files = sorted(Path(p) for p in glob.glob(str(repo / b.workdir / b.csv), recursive=True) if Path(p).is_file())
    if not files:
        out.print(f"  no file matching {b.csv!r} yet: config classes are found from the first run")
        return 0
    old = stale_files(files, config)
    if old:
        warnings.append(f"{', '.join(f.name for f in old)} predate(s) {config.name}: its rows come from an earlier run "
                        "(stale, or classes of another kernel the benchmark may never run now), so the classes below "
                        "are only a preview: run the benchmark once (or `kopt-mcp init`) to see what it writes now")
    try:
        t = read_metrics(files, b)
    except MetricsError as e:
        out.print(f"[red]existing results do not fit the config[/red]: {escape(str(e))}")
        return 2
    out.print(escape(f"  existing {', '.join(f.name for f in files)}: {sum(c.rows for c in t.classes)} counted "
                     f"row(s), {len(t.classes)} config class(es) over columns {t.config_columns}"
                     + (f", unit {t.unit}" if t.unit else "")))
    for line in _classes_lines(t):
        out.print(escape(line))
    warnings.extend(t.warnings)
    if len(t.classes) > 200:
        warnings.append(f"{len(t.classes)} config classes: narrow [benchmark] rows to the kernel being optimized")
    return 0


def check_config(repo: Path, config: Path | None) -> int:
    """Print the config's summary (rich, to stdout); 0 when usable, 2 with the errors otherwise."""
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
        status = max(status, _results(out, repo, b, warnings, Path(cf.path)))
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
