"""`kopt-mcp init`, reading the runs: what the benchmark's runs wrote (kopt_mcp/commands/init/runs.py
`run_twice`), or result files already there.

`analyse` (pure: contents in, [benchmark] keys out) detects the result file and format (CSV wide
or long, JSON, pytest-benchmark, or the run log), the metric and its direction, a `rows` filter
where several kernels, providers or metric names are present (several modes become a config
column instead, unless --mode picks one), error columns, and the config columns, dropping columns
that differ between two runs of the same code; `result_unit` reads the metric's unit. Writing the proposal (kopt.toml text) is kopt_mcp/commands/init/propose.py.
"""

from __future__ import annotations

import re
from pathlib import Path

from kopt_mcp.commands.init.own import Ownership, choose, provider_label
from kopt_mcp.commands.init.runs import Run
from kopt_mcp.config import BenchmarkSection
from kopt_mcp.errors import InitError, MetricsError, ReaderError
from kopt_mcp.readers import ResultFile, make_reader
from kopt_mcp.readers.metrics import MEASUREMENT_PREFIXES, found_config_columns, never_config, read_results

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


def _left_out(path: str, rows: int, fresh: int) -> list[str]:
    """The finding for a result file of `rows` rows of which the run wrote only `fresh` (the rest left out)."""
    if rows <= fresh:
        return []
    return [f"{path}: {rows - fresh} of its {rows} rows were not written by the run (stale, or another kernel's, "
            "provider's or device's): only the rows the run wrote are read"]


def _pick(df, names: tuple[str, ...]) -> str | None:
    lower = {str(c).lower(): str(c) for c in df.columns}
    return next((lower[n] for n in names if n in lower), None)


def _choose(values: list[str], wanted: str | None, preferred: tuple[str, ...], what: str, col: str) -> str:
    if wanted is not None:
        if wanted not in values:
            raise InitError(f"--{what} {wanted!r} is not a value of {col}; values: {values}")
        return wanted
    return next((v for v in preferred if v in values), values[0])


def _few(values: list[str], n: int = 8) -> str:
    """`values` as a list, the first `n` of them and how many more."""
    return str(values) if len(values) <= n else f"{values[:n]} and {len(values) - n} more"


#: keys of `analyse`'s result that are notes for the proposal's comments, not [benchmark] keys
NOTE_KEYS = ("comparisons",)


def section(keys: dict) -> BenchmarkSection:
    """The [benchmark] section `keys` (analyse's result) make, with a placeholder command."""
    return BenchmarkSection(command="x", **{k: v for k, v in keys.items() if k not in NOTE_KEYS})


def _metric_column(df, pytest_benchmark: bool, provider: str | None = None,
                   findings: list[str] | None = None, own: Ownership | None = None,
                   comparisons: list[str] | None = None) -> str:
    """The metric column of a wide table: a time column first, then a rate, then any fractional
    one. Where several columns qualify (one per provider, e.g. "Torch Latency (ms)" and "Gems
    Latency (ms)"), the first naming `provider` (case-insensitive), else the repository's own
    (kopt_mcp/commands/init/own.py `choose`: never a reference such as torch while another is there);
    the choice goes to `findings`, the other columns to `comparisons`. Raises InitError when no
    column holds measured numbers."""
    if pytest_benchmark and "stats.median" in df.columns:
        return "stats.median"
    numeric = [str(c) for c in df.columns if df[c].dtype.kind in "iuf" and not str(c).lower().startswith("err")]
    fractional = [c for c in numeric if df[c].dtype.kind == "f" and not (df[c].dropna() % 1 == 0).all()]
    for pool, rule in ((numeric, lambda c: c.lower().startswith(MEASUREMENT_PREFIXES) or TIME_NAME.search(c)),
                       (numeric, lambda c: HIGHER_IS_BETTER.search(c)), (fractional, lambda c: True)):
        hits = [c for c in pool if rule(c)]
        if hits:
            named = [c for c in hits if provider and provider.lower() in c.lower()]
            if len(hits) == 1:
                return hits[0]
            stats = _statistics_of_one(hits)
            if named:
                pick, why = named[0], f"it names --provider {provider}"
            elif stats:
                pick, why = stats, "the median of one measurement's statistics"
            else:
                c = choose(hits, own or Ownership(), "provider", {h: provider_label(h) for h in hits})
                pick, why = c.value, c.why
            if findings is not None:
                findings.append(f"metric columns: {hits}; chose {pick!r}: {why} "
                                "(--provider NAME takes the one naming NAME)")
            if comparisons is not None and not stats:
                comparisons += [f"column {h!r}" for h in hits if h != pick]
            return pick
    raise InitError(f"no column of measured numbers in the results (columns {list(map(str, df.columns))}): "
                    "pass --results to the file the benchmark writes its timings to")


_STAT_TOKENS = re.compile(r"^(median|mean|avg|average|min|max|std|stdev|p\d{1,2}|q\d{1,2}|y|value|\d{1,2})$")


def _statistics_of_one(columns: list[str]) -> str | None:
    """The median column where `columns` are statistics of one measurement ("median_ms", "p20_ms",
    "p80_ms"; "y_value_50", "y_value_20"), not one column per provider; else None."""
    def rest(c: str) -> tuple[str, ...]:
        return tuple(t for t in re.split(r"[^a-z0-9]+", provider_label(c).lower()) if t and not _STAT_TOKENS.match(t))

    if len(columns) < 2 or len({rest(c) for c in columns}) != 1:
        return None
    return next((c for c in columns if re.search(r"median|p50|(^|[^0-9])50($|[^0-9])", c.lower())), columns[0])


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
            metric_name: str | None = None, own: Ownership | None = None) -> tuple[dict, list[str]]:
    """The [benchmark] keys (a dict for BenchmarkSection, without command, plus NOTE_KEYS: use
    `section`) and findings, from the runs' contents. `results` picks the result file among several;
    the flags pick selector values; without a flag, a provider column (or a wide table's columns per
    provider) counts the repository's own provider and a kernel column the kernel the command
    benchmarks (`own`: kopt_mcp/commands/init/own.py), the others become `comparisons` (rows and
    columns read, never judged). A kernel column with one value among the run's rows is filtered
    to it where the file holds other kernels' rows. Raises InitError when nothing readable was
    produced or a flag names no value."""
    own = own or Ownership()
    findings: list[str] = []
    comparisons: list[str] = []
    keys, whole, frames = _result_frames(runs, log_name, results, findings)
    df = frames[0]
    if df.empty:
        raise InitError("the results have no rows")
    name_col, value_col = _metric(df, keys, metric_name, provider, own, findings, comparisons)
    flags = {"kernel": kernel, "provider": provider, "mode": mode}
    filters, mode_col, kernel_col = _selectors(df, whole, keys, flags, own, findings, comparisons)
    if kernel is not None and kernel_col is None:
        filters += _kernel_by_name(df, kernel, findings)
    keys["rows"] = " and ".join(filters)
    bench = section(keys)
    sel = [f.query(keys["rows"]) if keys["rows"] else f for f in frames]
    if keys["format"] == "csv-long":
        sel = [f[f[name_col].astype(str) == keys["metric"]].assign(**{keys["metric"]: f[value_col]}) for f in sel]
    if sel[0].empty:
        raise InitError(f"no row left after rows = {keys['rows']!r}")
    keys["config_columns"] = _config_columns(df, sel, bench, keys["format"], mode_col, findings)
    keys["correctness_columns"] = _correctness_columns(sel[0], findings)
    keys["comparisons"] = comparisons
    return keys, findings


def _result_frames(runs: list[Run], log_name: str, results: str | None,
                   findings: list[str]) -> tuple[dict, object, list]:
    """What the runs wrote, read: the keys found so far (`csv`, `format`), the result file as it is
    after the first run (None for the run log), and each run's fresh rows (the whole file where a run
    left every row unchanged, with a finding saying every run would be stale)."""
    written = [p for p in runs[0].files if results is None or Path(p).match(results) or p == results]
    shared = _shared_glob(written, runs[0])
    if shared:
        findings.append(f"the benchmark wrote {len(written)} result files of one shape ({', '.join(written[:5])}): "
                        f"reading them all as {shared!r}; each file's rows are classes of their own (result_file)")
    elif len(written) > 1:
        findings.append(f"the benchmark wrote {len(written)} result files ({', '.join(written[:5])}); using "
                        f"{written[0]} (pass --results GLOB to choose)")
    if not written:
        probe = BenchmarkSection(command="x", metric="x", format="stdout")
        findings.append("the benchmark wrote no .csv or .json file: its printed table is read from the run log")
        return {"csv": "", "format": "stdout"}, None, [_frame(probe, log_name, r.log) for r in runs]
    path = written[0]
    keys: dict = {"csv": shared or path, "format": "auto"}
    probe = BenchmarkSection(command="x", metric="x", **keys)
    contents = [r.files.get(path, (None, None)) for r in runs]
    after = whole = _frame(probe, path, contents[0][1])
    if path.endswith(".json"):
        reader = make_reader(probe, path)
        reader.frame(contents[0][1], path)
        keys["format"] = reader.name
    frames = [f for f in (_fresh(probe, path, b, a) for b, a in contents if a is not None) if not f.empty]
    if not frames:  # nothing new: read the file as it is, and say why every run would be stale
        findings.append(f"{path}: the run left every row unchanged (it keeps old rows): pass the benchmark's "
                        "overwrite flag in the command, or every run will be judged stale")
        frames = [after]
    findings += _left_out(path, len(after), len(frames[0]))  # rows the run never wrote
    return keys, whole, frames


def _metric(df, keys: dict, metric_name: str | None, provider: str | None, own: Ownership,
            findings: list[str], comparisons: list[str]) -> tuple[str | None, str | None]:
    """Sets keys' `metric` and `higher_is_better` (a long CSV: also its format, metric-name and value
    columns). Returns the metric-name and value columns found (None, None: no long layout)."""
    name_col, value_col = _pick(df, METRIC_NAME_COLUMNS), _pick(df, VALUE_COLUMNS)
    if keys["format"] != "stdout" and keys["csv"].endswith(".csv") and name_col and value_col \
            and df[name_col].dtype.kind not in "biuf":
        names = sorted(map(str, df[name_col].dropna().unique()))
        keys.update(format="csv-long", metric_name_column=name_col, value_column=value_col,
                    metric=_choose(names, metric_name, PREFERRED_METRIC_NAMES, "metric-name", name_col))
        if len(names) > 1:
            findings.append(f"metric names in {name_col}: {names}; chose {keys['metric']!r} (--metric-name to change)")
    else:
        keys["metric"] = _metric_column(df, keys["format"] == "pytest-benchmark", provider, findings, own, comparisons)
    keys["higher_is_better"] = bool(HIGHER_IS_BETTER.search(keys["metric"]))
    return name_col, value_col


def _selectors(df, whole, keys: dict, flags: dict[str, str | None], own: Ownership, findings: list[str],
               comparisons: list[str]) -> tuple[list[str], str | None, str | None]:
    """The `rows` filters the selector columns (SELECTORS: kernel, provider, mode) call for, the mode
    column (several modes and no --mode: a config column, not a filter) and the kernel column. Other
    providers' rows go to `comparisons`."""
    filters, mode_col, kernel_col = [], None, None
    kernel, mode = flags["kernel"], flags["mode"]
    for what, names in SELECTORS.items():
        # pytest-benchmark's `group` (@pytest.mark.benchmark(group="layer_norm")) names the kernel
        names = (*names, "group") if what == "kernel" and keys["format"] == "pytest-benchmark" else names
        col = _pick(df, names)
        if what == "kernel" and col is not None and kernel is not None \
                and kernel not in set(map(str, df[col].dropna().unique())):
            continue  # not a value of the kernel column: looked for in the rows' names below
        kernel_col = col if what == "kernel" and col is not None else kernel_col
        if col is None or col in (keys.get("metric_name_column"), keys["metric"]):
            continue
        values = sorted(map(str, df[col].dropna().unique()))
        in_file = sorted(map(str, whole[col].dropna().unique())) if whole is not None and col in whole else values
        if what == "mode" and len(values) > 1 and mode is None:
            # forward and backward are both the kernel's work (the kernel regex covers both): a config
            # class each, as the hand-finished Liger-Kernel config counts them, not a filter
            mode_col = col
            findings.append(f"{col} has {values}: each is a config class of its own (--mode NAME counts one)")
            continue
        if flags[what] is not None:
            v, why, others = _choose(values, flags[what], (), what, col), f"--{what}", []
        elif len(values) > 1:
            c = choose(values, own, what)
            v, why, others = c.value, c.why, c.others
        elif what == "kernel" and len(in_file) > 1:
            v, why, others = values[0], "the only one the run wrote", [x for x in in_file if x != values[0]]
        else:
            continue
        filters.append(f"{col} == {v!r}" if df[col].dtype.kind not in "biuf" else f"{col} == {v}")
        findings.append(f"{col} has {_few(in_file if what == 'kernel' else values)}; counting {v!r}: {why} "
                        f"(--{what} to change)")
        if what == "provider":  # the same kernel by others: rows to compare with, never judged
            comparisons += [f"{col} == {o!r}" for o in others]
    return filters, mode_col, kernel_col


def _config_columns(df, sel: list, bench: BenchmarkSection, fmt: str, mode_col: str | None,
                    findings: list[str]) -> list[str]:
    """The config columns of the selected rows: found ones that vary (all found where none does),
    less those that differ between two runs of the same code; the mode column first."""
    cols = found_config_columns(sel[0], bench, fmt)
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
    return [mode_col, *(c for c in cols if c != mode_col)] if mode_col else cols


def _correctness_columns(rows, findings: list[str]) -> list[str]:
    """The error columns (err/error/mismatch) that are 0 on every selected row: correctness columns;
    the others get a finding asking for a [benchmark] correctness condition."""
    import pandas as pd

    errs = [str(c) for c in rows.columns if re.search(r"(^|[_.])(err|error|errors|mismatch|mismatches)", str(c), re.I)]
    zero = [c for c in errs if pd.to_numeric(rows[c], errors="coerce").fillna(1).eq(0).all()]
    if set(errs) - set(zero):
        findings.append(f"error column(s) {sorted(set(errs) - set(zero))} are not 0 on every row: write a "
                        "[benchmark] correctness condition such as \"max_err < 1e-3\"")
    return zero


def _kernel_by_name(df, kernel: str, findings: list[str]) -> list[str]:
    """The rows filter for --kernel where the results have no kernel column: the first text column
    (`name`, `fullname`, then the others) some of whose values hold `kernel` (case-insensitive); none
    where every row holds it. Raises InitError when no value holds it: --kernel would count nothing."""
    text = [str(c) for c in df.columns if df[c].dtype.kind == "O"]
    text = [c for c in ("name", "fullname") if c in text] + [c for c in text if c not in ("name", "fullname")]
    for c in text:
        hits = df[c].astype(str).str.contains(kernel, case=False, regex=False)
        if hits.all():
            findings.append(f"--kernel {kernel}: every row's {c} names it: no rows filter needed")
            return []
        if hits.any():
            findings.append(f"--kernel {kernel}: no kernel column; counting the rows whose {c} holds {kernel!r} "
                            f"({int(hits.sum())} of {len(df)})")
            return [f"`{c}`.str.contains({kernel!r}, case=False, regex=False)"]
    raise InitError(f"--kernel {kernel!r} names no row: it is no value of a kernel column ({', '.join(SELECTORS['kernel'])}"
                    f"; pytest-benchmark's group) and no text column holds it (columns {list(map(str, df.columns))[:12]}). "
                    "Leave out --kernel when the results hold one kernel, or write the benchmark command so it runs only "
                    "that kernel")


def result_unit(keys: dict, runs: list[Run], log_name: str) -> str | None:
    """The metric's unit (e.g. "ms", "GB/s") as the referee's reader finds it in the first run's
    result files (or its log for `format = "stdout"`) under the proposed [benchmark] `keys`; None
    where the results do not read. Never raises."""
    bench = section(keys)
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
