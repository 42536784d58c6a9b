"""`kopt-mcp init`: look at a repository's own benchmark and propose a commented kopt.toml.

With `--command`, the benchmark runs twice in the repository (the result files it writes are put
back as they were afterwards); without, `--results GLOB` names output that is already there. From
what the runs wrote it proposes: the result file and format (CSV wide or long, JSON,
pytest-benchmark, or the run log), the metric and its unit, error columns, config columns (dropping
columns that differ between two identical runs), a `rows` filter where several kernels, providers,
modes or metric names are present (flags pick the target), protected paths (the benchmark and test
files), and the target kernel regex from one profiled run where a profiler is available.

Pure parts (`analyse`, `render`) take contents; `run_init` does the I/O.
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

from kopt_mcp.config import BenchmarkSection, TargetConfig
from kopt_mcp.metrics import MEASUREMENT_PREFIXES, MetricsError, found_config_columns, never_config, read_results
from kopt_mcp.readers import ReaderError, ResultFile, make_reader

RESULT_SUFFIXES = (".csv", ".json")
SKIP_DIRS = {".git", ".kopt", "__pycache__", "node_modules", ".venv", "venv", ".tox", ".mypy_cache", ".pytest_cache"}
# selector columns: several values among one run's rows -> a `rows` filter (flag name, column names)
SELECTORS = {
    "kernel": ("kernel_name", "kernel", "op", "op_name", "operation", "benchmark"),
    "provider": ("kernel_provider", "provider", "backend", "impl", "implementation", "line"),
    "mode": ("kernel_operation_mode", "mode", "direction", "pass"),
}
METRIC_NAME_COLUMNS = ("metric_name", "metric", "measurement")
VALUE_COLUMNS = ("y_value_50", "value", "median", "p50", "y_value", "val")
PREFERRED_METRIC_NAMES = ("speed", "latency", "time", "runtime", "duration")
# rates are higher-is-better: named (tflops, gbps, bandwidth, ...) or a unit per second ("triton (GB/s)",
# "TFLOP/s", "tokens/s": triton.testing.perf_report names a provider's column "<line> (<ylabel>)")
HIGHER_IS_BETTER = re.compile(r"tflops|gflops|gbps|gb_s|bandwidth|throughput|speedup|ops_per|items_per|\w/s(ec)?\b", re.I)
# a time column, also where names hold spaces and units in parentheses ("Gems Latency (ms)")
TIME_NAME = re.compile(r"(^|[_\s(])(ms|us|ns|s|sec|time|latency|runtime|duration|median|mean|p50)($|[_\s)])", re.I)


class InitError(RuntimeError):
    """init could not propose a config; the message says what to pass or fix."""


class Run(BaseModel):
    """What one benchmark run left: result file -> (content before, content after), and its log."""

    files: dict[str, tuple[bytes | None, bytes]]
    log: bytes = b""


class Proposal(BaseModel):
    """The proposed config (TOML with comments) and what init found on the way."""

    toml: str
    findings: list[str]


# --- running -------------------------------------------------------------------------------------


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
    (Liger-Kernel's benchmark imported an installed liger_kernel). '' when there is none."""
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
    return ""


def run_twice(repo: Path, command: str, timeout_s: float = 600.0, runs: int = 2) -> list[Run]:
    """Run `command` `runs` times in `repo`; per run, the .csv/.json files it wrote or changed (with
    their content before that run) and its log. Every file is put back as it was before the first
    run (created ones are removed). Raises InitError when a run fails."""
    from kopt_mcp.runner import run_command

    first = {p: (repo / p).read_bytes() for p in _result_files(repo)}
    out: list[Run] = []
    try:
        with tempfile.TemporaryDirectory(prefix="kopt-init-") as tmp:
            for i in range(runs):
                before = {p: (repo / p).read_bytes() for p in _result_files(repo)}
                stamp = _result_files(repo)
                r = run_command(command, repo, {}, timeout_s, Path(tmp) / f"run{i}.log")
                if r.timed_out or r.exit_code != 0:
                    raise InitError(f"`{command}` {'timed out' if r.timed_out else f'exited {r.exit_code}'} in {repo}; "
                                    f"log tail: {r.log_tail[-800:]}{installed_copy_hint(repo, r.log_tail)}")
                changed = {p: (before.get(p), (repo / p).read_bytes()) for p, s in _result_files(repo).items()
                           if stamp.get(p) != s}
                out.append(Run(files=changed, log=(Path(tmp) / f"run{i}.log").read_bytes()))
    finally:
        for p in set(_result_files(repo)) - set(first):
            (repo / p).unlink(missing_ok=True)
        for p, content in first.items():
            if (repo / p).read_bytes() != content:
                (repo / p).write_bytes(content)
    return out


# --- analysing -----------------------------------------------------------------------------------


def _frame(bench: BenchmarkSection, name: str, content: bytes):
    try:
        return make_reader(bench, name).frame(content, name)
    except ReaderError as e:
        raise InitError(str(e)) from e


def _fresh(bench: BenchmarkSection, name: str, before: bytes | None, after: bytes):
    """Rows of `after` that are not rows of `before` (multiset); all rows when nothing was there."""
    from collections import Counter

    df = _frame(bench, name, after)
    if before is None:
        return df
    old = _frame(bench, name, before)
    cols = [c for c in df.columns if c in old.columns]
    left = Counter(tuple(map(str, r)) for r in old[cols].itertuples(index=False, name=None))
    keep = []
    for r in df[cols].itertuples(index=False, name=None):
        k = tuple(map(str, r))
        keep.append(left[k] == 0)
        if left[k]:
            left[k] -= 1
    return df[keep]


def _pick(df, names: tuple[str, ...]) -> str | None:
    lower = {str(c).lower(): str(c) for c in df.columns}
    return next((lower[n] for n in names if n in lower), None)


def _choose(values: list[str], wanted: str | None, preferred: tuple[str, ...], what: str, col: str) -> str:
    if wanted is not None:
        if wanted not in values:
            raise InitError(f"--{what} {wanted!r} is not a value of {col}; values: {values}")
        return wanted
    return next((v for v in preferred if v in values), values[0])


def _metric_column(df, pytest_benchmark: bool, provider: str | None = None,
                   findings: list[str] | None = None) -> str:
    """The metric column of a wide table: a time column first, then a rate, then any fractional
    one. Where several columns qualify (one per provider, e.g. "Torch Latency (ms)" and "Gems
    Latency (ms)"), the first naming `provider` (case-insensitive); the choice goes to `findings`.
    Raises InitError when no column holds measured numbers."""
    if pytest_benchmark and "stats.median" in df.columns:
        return "stats.median"
    numeric = [str(c) for c in df.columns if df[c].dtype.kind in "iuf" and not str(c).lower().startswith("err")]
    fractional = [c for c in numeric if df[c].dtype.kind == "f" and not (df[c].dropna() % 1 == 0).all()]
    for pool, rule in ((numeric, lambda c: c.lower().startswith(MEASUREMENT_PREFIXES) or TIME_NAME.search(c)),
                       (numeric, lambda c: HIGHER_IS_BETTER.search(c)), (fractional, lambda c: True)):
        hits = [c for c in pool if rule(c)]
        if hits:
            named = [c for c in hits if provider and provider.lower() in c.lower()]
            if len(hits) > 1 and findings is not None:
                findings.append(f"metric columns: {hits}; chose {(named or hits)[0]!r} "
                                "(--provider NAME takes the one naming NAME)")
            return (named or hits)[0]
    raise InitError(f"no column of measured numbers in the results (columns {list(map(str, df.columns))}): "
                    "pass --results to the file the benchmark writes its timings to")


def _shared_glob(paths: list[str], run: Run) -> str | None:
    """One glob for several result files of the same folder depth, file suffix and header (a
    perf_report per mode: results/fwd/rms-norm.csv, results/bwd/rms-norm.csv -> results/*/rms-norm.csv):
    the path segments that differ become `*`. None for fewer than two files or files of other shapes."""
    if len(paths) < 2:
        return None
    parts = [Path(p).parts for p in paths]
    heads = {(run.files[p][1] or b"").split(b"\n", 1)[0].strip() for p in paths}
    if len({len(x) for x in parts}) != 1 or len({Path(p).suffix for p in paths}) != 1 or len(heads) != 1:
        return None
    glob = [seg if len({x[i] for x in parts}) == 1 else "*" for i, seg in enumerate(parts[0])]
    if glob[-1] == "*":
        glob[-1] = "*" + Path(paths[0]).suffix
    return "/".join(glob)


def analyse(runs: list[Run], log_name: str = "benchmark.log", results: str | None = None,
            kernel: str | None = None, provider: str | None = None, mode: str | None = None,
            metric_name: str | None = None) -> tuple[dict, list[str]]:
    """The [benchmark] keys (a dict for BenchmarkSection, without command) and findings, from the
    runs' contents. `results` picks the result file among several; the flags pick selector values.
    Raises InitError when nothing readable was produced or a flag names no value."""
    import pandas as pd

    findings: list[str] = []
    written = [p for p in runs[0].files if results is None or Path(p).match(results) or p == results]
    shared = _shared_glob(written, runs[0])
    if shared:
        findings.append(f"the benchmark wrote {len(written)} result files of one shape ({', '.join(written[:5])}): "
                        f"reading them all as {shared!r}; each file's rows are classes of their own (result_file)")
    elif len(written) > 1:
        findings.append(f"the benchmark wrote {len(written)} result files ({', '.join(written[:5])}); using "
                        f"{written[0]} (pass --results GLOB to choose)")
    if written:
        path = written[0]
        keys: dict = {"csv": shared or path, "format": "auto"}
        probe = BenchmarkSection(command="x", metric="x", **keys)
        contents = [r.files.get(path, (None, None)) for r in runs]
        after = _frame(probe, path, contents[0][1])
        if path.endswith(".json"):
            reader = make_reader(probe, path)
            reader.frame(contents[0][1], path)
            keys["format"] = reader.name
        frames = [f for f in (_fresh(probe, path, b, a) for b, a in contents if a is not None) if not f.empty]
        if not frames:  # nothing new: read the file as it is, and say why every run would be stale
            findings.append(f"{path}: the run left every row unchanged (it keeps old rows): pass the benchmark's "
                            "overwrite flag in the command, or every run will be judged stale")
            frames = [after]
    else:
        keys = {"csv": "", "format": "stdout"}
        probe = BenchmarkSection(command="x", metric="x", format="stdout")
        frames = [_frame(probe, log_name, r.log) for r in runs]
        findings.append("the benchmark wrote no .csv or .json file: its printed table is read from the run log")
    df = frames[0]
    if df.empty:
        raise InitError("the results have no rows")
    name_col, value_col = _pick(df, METRIC_NAME_COLUMNS), _pick(df, VALUE_COLUMNS)
    if keys["format"] != "stdout" and keys["csv"].endswith(".csv") and name_col and value_col \
            and df[name_col].dtype.kind not in "biuf":
        names = sorted(map(str, df[name_col].dropna().unique()))
        keys.update(format="csv-long", metric_name_column=name_col, value_column=value_col,
                    metric=_choose(names, metric_name, PREFERRED_METRIC_NAMES, "metric-name", name_col))
        if len(names) > 1:
            findings.append(f"metric names in {name_col}: {names}; chose {keys['metric']!r} (--metric-name to change)")
    else:
        keys["metric"] = _metric_column(df, keys["format"] == "pytest-benchmark", provider, findings)
    keys["higher_is_better"] = bool(HIGHER_IS_BETTER.search(keys["metric"]))
    filters = []
    flags = {"kernel": kernel, "provider": provider, "mode": mode}
    for what, names in SELECTORS.items():
        col = _pick(df, names)
        if col is None or col in (keys.get("metric_name_column"), keys["metric"]):
            continue
        values = sorted(map(str, df[col].dropna().unique()))
        if len(values) > 1 or flags[what] is not None:
            v = _choose(values, flags[what], ("ours", "forward"), what, col)
            filters.append(f"{col} == {v!r}" if df[col].dtype.kind not in "biuf" else f"{col} == {v}")
            findings.append(f"{col} has {values}; counting {v!r} (--{what} to change)")
    keys["rows"] = " and ".join(filters)
    bench = BenchmarkSection(command="x", **keys)
    sel = [f.query(keys["rows"]) if keys["rows"] else f for f in frames]
    if keys["format"] == "csv-long":
        sel = [f[f[name_col].astype(str) == keys["metric"]].assign(**{keys["metric"]: f[value_col]}) for f in sel]
    if sel[0].empty:
        raise InitError(f"no row left after rows = {keys['rows']!r}")
    cols = found_config_columns(sel[0], bench, keys["format"])
    varying = [c for c in cols if sel[0][c].nunique(dropna=False) > 1]
    cols = varying or cols
    if len(sel) > 1:
        a, b = sel[0], sel[1]
        moved = [c for c in cols if c in b.columns and (
            set(map(str, a[c])) != set(map(str, b[c]))
            or (len(a) == len(b) and list(map(str, a[c])) != list(map(str, b[c]))))]
        if moved:
            findings.append(f"column(s) {moved} differ between two runs of the same code: not config columns")
        cols = [c for c in cols if c not in moved]
    dropped = [str(c) for c in df.columns if never_config(str(c), df[c])]
    if dropped:
        findings.append(f"never config columns (timestamps, versions, statistics, units, machine): {dropped[:12]}")
    keys["config_columns"] = cols
    errs = [str(c) for c in sel[0].columns if re.search(r"(^|[_.])(err|error|errors|mismatch|mismatches)", str(c), re.I)]
    zero = [c for c in errs if pd.to_numeric(sel[0][c], errors="coerce").fillna(1).eq(0).all()]
    keys["correctness_columns"] = zero
    if set(errs) - set(zero):
        findings.append(f"error column(s) {sorted(set(errs) - set(zero))} are not 0 on every row: write a "
                        "[benchmark] correctness condition such as \"max_err < 1e-3\"")
    return keys, findings


def _unit(keys: dict, runs: list[Run], log_name: str) -> str | None:
    bench = BenchmarkSection(command="x", **keys)
    if keys["format"] == "stdout":
        files = [ResultFile(path=log_name, after=runs[0].log)]
    else:
        paths = [p for p in runs[0].files if p == keys["csv"] or Path(p).match(keys["csv"])]
        files = [ResultFile(path=p, before=runs[0].files[p][0], after=runs[0].files[p][1],
                            tracked=runs[0].files[p][0] is not None) for p in paths]
    try:
        return read_results(files, bench).unit
    except MetricsError:
        return None


TEST_FILE = re.compile(r"^(test_.*|.*_test)\.py$")
ORACLE_FILE = re.compile(r"^(reference|ref|oracle|golden)(_.*)?\.py$|^.*_(reference|ref|oracle)\.py$")


def find_test_files(repo: Path, pattern: re.Pattern = TEST_FILE) -> list[str]:
    """Repository-relative files whose name matches `pattern` (default: pytest files test_*.py,
    *_test.py; ORACLE_FILE: reference/oracle implementations) outside hidden and vendored folders."""
    hits = []
    for root, dirs, files in os.walk(repo):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
        hits += [str((Path(root) / f).relative_to(repo)) for f in files if pattern.match(f)]
    return sorted(hits)


#: a performance suite, not a correctness test: FlagGems' benchmark/test_norm_perf.py is a pytest file
PERF_FILE = re.compile(r"(_perf|_bench|_benchmark)\.py$|^(bench|benchmark)_")
#: what a benchmark file's stem says around its topic ("test_norm_perf" -> "norm", "benchmark_rms_norm" -> "rms_norm")
_TOPIC_NOISE = re.compile(r"^(test_|benchmark_|bench_)|(_perf|_bench|_benchmark|_test)$")


def correctness_tests(test_files: list[str], bench: list[str], kernel: str | None = None) -> list[str]:
    """The pytest files to propose as the correctness command, from the repository's test files
    (`find_test_files`, sorted) and the files the benchmark command names (`benchmark_files`): those
    that are not performance suites (under a bench*/ folder, named *_perf.py, bench_*.py, ...) nor
    benchmark files; narrowed to those whose name holds `kernel`, else the benchmark files' topic
    ("benchmark/test_norm_perf.py" -> tests/test_norm_ops.py), where any does. Pure."""
    tests = [t for t in test_files if t not in bench and not PERF_FILE.search(Path(t).name)
             and not any(part.lower().startswith("bench") for part in Path(t).parts[:-1])]
    topics = [kernel.lower()] if kernel else [
        w for w in (_TOPIC_NOISE.sub("", Path(b).stem.lower()) for b in bench if b.endswith(".py")) if len(w) >= 3]
    narrowed = [t for t in tests if any(w in Path(t).stem.lower() for w in topics)]
    return narrowed or tests


def benchmark_files(repo: Path, command: str) -> list[str]:
    """Files of `repo` that `command` names (the benchmark script and its arguments that exist)."""
    try:
        words = shlex.split(command)
    except ValueError:
        return []
    out = []
    for w in words:
        w = w.split("=", 1)[-1]
        p = (repo / w)
        if w and not w.startswith("-") and p.is_file() and p.resolve().is_relative_to(repo.resolve()):
            out.append(str(p.resolve().relative_to(repo.resolve())))
    return out


def kernel_regex(repo: Path, command: str, timeout_s: float = 1200.0, profiler=None) -> tuple[str | None, str]:
    """The hottest kernel's anchored regex from one run under `profiler` (default: the machine's
    `auto` profiler for its first GPU), or None and why not (no GPU, no profiler, a failed run)."""
    try:
        from kopt_mcp.gpus import make_probe
        from kopt_mcp.profilers import make_profiler
        from kopt_mcp.profilers.base import exact_names_regex
        from kopt_mcp.runner import run_command

        prof = profiler
        if prof is None:
            gpus = make_probe("auto").read()
            if not gpus:
                return None, "no GPU here"
            prof = make_profiler("auto", gpus[0].vendor)
        if prof.name == "none" or not prof.available():
            return None, "no profiler available"
        with tempfile.TemporaryDirectory(prefix="kopt-init-trace-") as tmp:
            r = run_command(prof.wrap(command, Path(tmp)), repo, {"KOPT_PROFILE": "1"}, timeout_s, Path(tmp) / "p.log")
            if r.exit_code != 0:
                return None, f"the profiled run exited {r.exit_code}"
            trace = prof.parse(Path(tmp))
        if not trace.kernels:
            return None, "the trace has no kernels"
        return exact_names_regex([trace.kernels[0].name]), f"hottest kernel in one {prof.name} trace"
    except Exception as e:  # a proposal, not a gate: say why and go on
        return None, f"profiling failed: {e}"


# --- rendering -----------------------------------------------------------------------------------


def _q(v: object) -> str:
    return json.dumps(v, ensure_ascii=False)


def render(command: str | None, keys: dict, unit: str | None, correctness_cmd: str, protect: list[str],
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
    lines.append(f"config_columns = {_q(keys['config_columns'])}")
    if keys["correctness_columns"]:
        lines.append(f"correctness_columns = {_q(keys['correctness_columns'])}  # each 0 on every row")
    lines.append("timeout_s = 600")
    lines += ["", "[correctness]"]
    if correctness_cmd:
        lines.append(f"command = {_q(correctness_cmd)}  # run once per candidate; exit 0 = correct")
    else:
        lines.append('# command = "python -m pytest -q tests/test_my_kernel.py"  # no test files found: write one')
    lines += ["", "[profiler]", 'backend = "auto"']
    regex, why = kernel
    lines.append(f"kernel = {_q(regex)}  # {why}" if regex else
                 f'# kernel = "^my_kernel"  # {why}: run kernel_trace_analysis on the GPU host and set the target')
    lines += ["", "[protect]", f"paths = {_q(protect)}  # the benchmark and the tests: a candidate may not edit them"]
    text = "\n".join(lines) + "\n"
    try:
        TargetConfig.model_validate(tomllib.loads(text))
    except Exception as e:  # the proposal must load as written (once the user has filled in what it asks for)
        if command and (correctness_cmd or keys["correctness_columns"]):
            raise InitError(f"the proposed config does not load ({e}): please report this") from e
    return text


def propose(repo: Path, command: str | None, results: str | None = None, kernel: str | None = None,
            provider: str | None = None, mode: str | None = None, metric_name: str | None = None,
            timeout_s: float = 600.0, profile: bool = True) -> Proposal:
    """Run (or read) the benchmark and build the proposal. Raises InitError with what to pass."""
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
    keys, findings = analyse(runs, results=results, kernel=kernel, provider=provider, mode=mode,
                             metric_name=metric_name)
    unit = _unit(keys, runs, "benchmark.log")
    found, bench = find_test_files(repo), (benchmark_files(repo, command) if command else [])
    tests = correctness_tests(found, bench, kernel)
    correctness = f"python -m pytest -q {' '.join(tests[:8])}" if tests else ""
    oracles = [t for t in find_test_files(repo, ORACLE_FILE)]
    protect = sorted(set(bench + tests[:20] + found[:20] + oracles[:10]))
    kern = kernel_regex(repo, command) if (profile and command) else (None, "not profiled")
    return Proposal(toml=render(command, keys, unit, correctness, protect, kern, findings), findings=findings)


def run_init(repo: Path, command: str | None, results: str | None, kernel: str | None, provider: str | None,
             mode: str | None, metric_name: str | None, write: bool, force: bool) -> int:
    """CLI entry: print the proposal (or write <repo>/kopt.toml with --write); 0, or 2 with the error."""
    try:
        p = propose(repo, command, results, kernel, provider, mode, metric_name)
    except InitError as e:
        print(f"kopt-mcp init: {e}", file=sys.stderr)
        return 2
    if not write:
        sys.stdout.write(p.toml)
        return 0
    dest = repo / "kopt.toml"
    if dest.exists() and not force:
        print(f"kopt-mcp init: {dest} exists; pass --force to replace it (or omit --write to print)", file=sys.stderr)
        return 2
    dest.write_text(p.toml)
    print(f"wrote {dest}; next: kopt-mcp check-config --repo {repo}", file=sys.stderr)
    return 0
