"""Result files: find the fresh ones, read them (kopt_mcp/readers), keep the rows that count, check
units and correctness, group rows by config class.

A config class is one combination of the config columns' values (e.g. `M=4096,N=128,dtype=float16`);
every verdict is per class. Config columns come from the config, or are found: every column that is
neither the metric, a correctness column, an `err_*` column, a measurement column (names starting
with one of MEASUREMENT_PREFIXES), nor a column that changes from run to run or describes the machine
(timestamps, versions, percentiles/quantiles, GPU or host names, units: `never_config`).

Rows that count: those of THIS run (a row left unchanged in a tracked or appended file is stale),
selected by `[benchmark] rows` (a pandas query).
"""

from __future__ import annotations

import glob
import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from kopt_mcp.errors import MetricsError, MissingResults, StaleResults

if TYPE_CHECKING:  # pandas is imported where a CSV is read, keeping server start fast
    import pandas as pd

from kopt_mcp.config import BenchmarkSection
from kopt_mcp.errors import ReaderError
from kopt_mcp.readers import ResultFile, make_reader
from kopt_mcp.readers.records import PYTEST_BENCHMARK_NOT_CONFIG

MEASUREMENT_PREFIXES = ("us_", "ms_", "ns_", "s_", "time", "tflops", "gflops", "gbps", "gb_s", "bw", "speedup")


class ClassRow(BaseModel):
    """One config class of one run: the metric (median over the class's rows) and correctness.
    `errors`: error column -> largest |value| over the class's rows (NaN when not numeric)."""

    key: str
    metric: float
    rows: int
    errors: dict[str, float]
    correct: bool


class MetricTable(BaseModel):
    """Per-class results of one benchmark run, in file order. `files` are the result files read;
    `unit`: the metric's unit where the results name one (unit column, value suffix, pytest-benchmark:
    s); `format`: the reader used; `stale_rows`: rows selected by `rows` that this run left unchanged
    (not counted); `warnings`: findings a person should see (never a reason to fail)."""

    metric: str
    higher_is_better: bool
    config_columns: list[str]
    classes: list[ClassRow]
    files: list[str]
    unit: str | None = None
    format: str = "csv"
    stale_rows: int = 0
    warnings: list[str] = []

    def values(self) -> dict[str, float]:
        """Class key -> metric value."""
        return {c.key: c.metric for c in self.classes}

    @property
    def correct(self) -> bool:
        """True when every row of every class passed the correctness rule."""
        return all(c.correct for c in self.classes)

    def failing(self) -> list[str]:
        """Keys of the classes with at least one row failing the correctness rule."""
        return [c.key for c in self.classes if not c.correct]

    def failing_errors(self) -> dict[str, dict[str, float]]:
        """Per failing class, its error columns' values (largest |value| over its rows), e.g.
        `{"M=4096": {"err_count": 12.0, "max_abs_err": 0.031}}`: the numbers an `incorrect` verdict
        reports. Empty when every class passed."""
        return {c.key: dict(c.errors) for c in self.classes if not c.correct}

    def failing_summary(self, limit: int = 5) -> str:
        """One line for an `incorrect` reason: the first `limit` failing classes with their error
        numbers, e.g. `M=4096 (err_count=12, max_abs_err=0.031); 3 more`. Empty when all passed."""
        failing = self.failing_errors()
        parts = []
        for key, errs in list(failing.items())[:limit]:
            nums = ", ".join(f"{c}={v:.4g}" for c, v in errs.items())
            parts.append(f"{key} ({nums})" if nums else key)
        more = f"; {len(failing) - limit} more" if len(failing) > limit else ""
        return "; ".join(parts) + more


def fresh_csvs(workdir: Path, pattern: str, started_at: float) -> list[Path]:
    """The files matching `pattern` under `workdir` written at or after `started_at` (epoch s).

    Raises MissingResults (a MetricsError) if none match, StaleResults if all that match are older
    than the run.
    """
    hits = sorted(Path(p) for p in glob.glob(str(workdir / pattern), recursive=True) if os.path.isfile(p))
    if not hits:
        raise MissingResults(
            f"the benchmark wrote no file matching {pattern!r} under {workdir}: "
            "check [benchmark] csv and that the benchmark writes its CSV there"
        )
    # Filesystem mtimes can be coarser than the clock; allow 10 ms of slack only.
    fresh = [p for p in hits if p.stat().st_mtime >= started_at - 0.01]
    if not fresh:
        raise StaleResults(
            f"stale metrics: {', '.join(p.name for p in hits)} predate this run; the benchmark "
            "must write its CSV on every run (a file left from an earlier run never counts)"
        )
    return fresh


def class_key(columns: list[str], values: list[object]) -> str:
    """`"col=value,col=value"` in column order; integral floats print without `.0`."""
    parts = []
    for c, v in zip(columns, values, strict=True):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        parts.append(f"{c}={v}")
    return ",".join(parts) if parts else "all"


# Columns never found as config columns (they change from run to run, or describe the machine or the
# measurement rather than the problem): matched on name tokens, and on values below.
_NEVER_CONFIG_NAME = re.compile(
    r"(^|[_.\s-])(time|timestamp|date|datetime|created|updated|ts|version|commit|sha|git|revision|host|hostname|"
    r"node|machine|gpu|gpus|device|uuid|unit|units|p\d{1,3}|q\d|quantile|quantiles|percentile|percentiles|pct\d+|"
    r"median|mean|avg|average|std|stddev|stdev|iqr|rounds|iterations|iters|reps|repeats|samples|outliers|"
    r"y_value)($|[_.\s-])", re.IGNORECASE)
_MIN_MAX_NAME = re.compile(r"(^|[_.\s-])(min|max)($|[_.\s-])", re.IGNORECASE)  # a statistic only if fractional
_TIMESTAMP_VALUE = re.compile(r"^\d{4}-\d{2}-\d{2}([ T]\d{2}:\d{2}|$)")
_VERSION_VALUE = re.compile(r"^v?\d+\.\d+\.\d+([.+-][0-9A-Za-z.+-]*)?$")
_GPU_VALUE = re.compile(r"\b(NVIDIA|GeForce|Tesla|Quadro|RTX|Radeon|Instinct|AMD|MI\d{3}[A-Z]?|H100|H200|A100)\b")
_VALUE_UNIT = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-zµ%/]+[A-Za-z0-9µ%/]*)\s*$")
UNIT_COLUMNS = ("metric_unit", "unit", "units")


def never_config(name: str, values: pd.Series) -> str | None:
    """Why column `name` (with `values`) is never a found config column, or None if it may be one.

    Timestamps, versions, percentile/quantile and summary-statistic columns (min/max only when
    fractional: `max_seq_len` stays config), repetition counts, GPU/host/device names, units; by name (`timestamp`, `liger_version`, `y_value_20`, `gpu_name`, `metric_unit`) or by value
    (`2024-09-03 15:31:39`, `0.2.1`, `NVIDIA H100 80GB HBM3`); a non-integral float column named
    `..._<number>` (a percentile such as `latency_99`).
    """
    if _NEVER_CONFIG_NAME.search(name):
        return "its name marks a timestamp, version, statistic, unit or machine column"
    vals = values.dropna()
    if vals.empty:
        return "it is empty"
    if vals.dtype.kind == "f" and re.search(r"_\d{1,2}$", name) and not (vals % 1 == 0).all():
        return "a percentile column"
    if vals.dtype.kind == "f" and _MIN_MAX_NAME.search(name) and not (vals % 1 == 0).all():
        return "a min/max statistic"
    if vals.dtype.kind in "OSU" or str(vals.dtype) in ("string", "str"):
        text = vals.astype(str)
        for rx, why in ((_TIMESTAMP_VALUE, "timestamps"), (_VERSION_VALUE, "versions"), (_GPU_VALUE, "GPU names")):
            if text.map(lambda v, rx=rx: bool(rx.search(v))).all():
                return f"its values are {why}"
    return None


_ERROR_NAME = re.compile(r"(^err|(^|[_.])(err|errs|error|errors|mismatch|mismatches|max_abs_err|rel_err)($|[_.]))", re.I)


def _is_error_column(c: str, bench: BenchmarkSection) -> bool:
    """Error columns: the correctness columns, names starting with `err`, or with an err/error/mismatch
    token (`max_abs_err`, `extra_info.err`, `num_mismatches`)."""
    return c in bench.correctness_columns or bool(_ERROR_NAME.search(c))


#: a column name's trailing unit, as triton.testing.perf_report writes it: "triton (GB/s)" -> " (GB/s)"
_UNIT_SUFFIX = re.compile(r"\s\([^()]+\)$")


def found_config_columns(df: pd.DataFrame, bench: BenchmarkSection, fmt: str = "csv") -> list[str]:
    """Config columns: configured ones, or those that are neither metric, error, measurement (also a
    column carrying the metric's unit suffix, another provider's `torch (GB/s)` beside the metric
    `triton (GB/s)`), nor a `never_config` column (nor, for long CSVs, the metric-name/value/unit columns; for
    pytest-benchmark, `fullname`/`param`/`stats.*`/`options.*`/`extra_info.*`; for stdout, columns
    of non-integral numbers, the other providers' measurements of a printed table)."""
    if bench.config_columns:
        return list(bench.config_columns)
    skip = {bench.metric, *bench.correctness_columns, bench.metric_name_column, bench.value_column, bench.unit_column}
    if bench.correctness:  # columns the correctness expression reads are measurements, not config
        skip |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", bench.correctness)) & set(map(str, df.columns))
    unit = _UNIT_SUFFIX.search(bench.metric)
    cols = []
    for c in df.columns:
        c = str(c)
        if c in skip or c.startswith("__") or _is_error_column(c, bench) or c.lower().startswith(MEASUREMENT_PREFIXES):
            continue
        if unit and c.endswith(unit.group(0)):
            continue  # another provider's measurement in the metric's unit (perf_report: "torch (GB/s)")
        if fmt == "pytest-benchmark" and c.startswith(PYTEST_BENCHMARK_NOT_CONFIG):
            continue
        if fmt == "stdout" and df[c].dtype.kind == "f" and not (df[c].dropna() % 1 == 0).all():
            continue  # a printed table's measured columns (perf_report: one per provider)
        if never_config(c, df[c]) is None:
            cols.append(c)
    return cols


def capture_before(cwd: Path, bench: BenchmarkSection, all_tracked: bool = False) -> dict[str, tuple[bytes, bool]]:
    """Before a run: path -> (bytes, tracked by git) of every file matching `[benchmark] csv` under
    `cwd` (empty for format stdout). Pass the result to `collect_results` after the run.

    `all_tracked=True` counts every file already there as tracked without asking git: for a fresh
    checkout of a snapshot (with or without a .git), where nothing was left by an earlier run."""
    if not bench.csv or bench.format == "stdout":
        return {}
    hits = [Path(p) for p in glob.glob(str(cwd / bench.csv), recursive=True) if os.path.isfile(p)]
    if not hits:
        return {}
    if all_tracked:
        return {str(h): (h.read_bytes(), True) for h in hits}
    tracked: set[str] = set()
    try:
        import git

        repo = git.Repo(cwd, search_parent_directories=True)
        root = Path(repo.working_tree_dir).resolve()
        listed = repo.git.ls_files("--", *[str(h.resolve().relative_to(root)) for h in hits])
        tracked = {str((root / line).resolve()) for line in listed.splitlines() if line}
    except Exception:  # no repository (or a path outside it): nothing counts as tracked
        tracked = set()
    return {str(h): (h.read_bytes(), str(h.resolve()) in tracked) for h in hits}


def collect_results(cwd: Path, bench: BenchmarkSection, started_at: float,
                    before: dict[str, tuple[bytes, bool]] | None = None,
                    log_path: Path | None = None) -> list[ResultFile]:
    """After a run: the fresh result files (`fresh_csvs`) with their content before the run, or, for
    format stdout, the run log at `log_path`. Raises MetricsError as `fresh_csvs` does, or when the
    stdout format has no log."""
    if not bench.csv or bench.format == "stdout":
        if log_path is None or not log_path.is_file():
            raise MissingResults("format = \"stdout\" reads the run log, and the run left none")
        return [ResultFile(path=str(log_path), after=log_path.read_bytes())]
    before = before or {}
    out = []
    for f in fresh_csvs(cwd, bench.csv, started_at):
        content, tracked = before.get(str(f), (None, False))
        out.append(ResultFile.load(f, content, tracked))
    return out


def _row_keys(df: pd.DataFrame, columns: list[str]) -> list[tuple]:
    return [tuple(str(v) for v in row) for row in df[columns].itertuples(index=False, name=None)]


def _stale_mask(f: ResultFile, reader, after: pd.DataFrame) -> list[bool]:
    """Which rows of `after` this run left unchanged: for a tracked file, every row equal to a row
    before the run; for an untracked file that grew (rows appended, the old ones kept), the old
    rows. An untracked file rewritten in place counts whole (a deterministic benchmark may write
    the same values twice)."""
    from collections import Counter

    if f.before is None or after.empty:
        return [False] * len(after)
    try:
        before = reader.frame(f.before, f.name)
    except ReaderError:
        return [False] * len(after)
    cols = [c for c in after.columns if c in before.columns]
    if not cols or before.empty:
        return [False] * len(after)
    left = Counter(_row_keys(before, cols))
    keys = _row_keys(after, cols)
    if not f.tracked and not (len(after) > len(before) and not (left - Counter(keys))):
        return [False] * len(after)
    mask = []
    for k in keys:
        hit = left[k] > 0
        if hit:
            left[k] -= 1
        mask.append(hit)
    return mask


def _describe_rows(df: pd.DataFrame, cols: list[str], limit: int = 5) -> str:
    named = []
    for _, r in df.head(limit).iterrows():
        where = ", ".join(f"{c}={r[c]}" for c in cols[:4])
        named.append(f"{r['__file']} row {r['__row']}" + (f" ({where})" if where else ""))
    more = f" and {len(df) - limit} more" if len(df) > limit else ""
    return "; ".join(named) + more


def _frames(files: list[ResultFile], bench: BenchmarkSection) -> tuple[pd.DataFrame, str]:
    import pandas as pd

    frames, fmt = [], "csv"
    for f in files:
        reader = make_reader(bench, f.path)
        try:
            df = reader.frame(f.after, f.name).reset_index(drop=True)
        except ReaderError as e:
            raise MetricsError(str(e)) from e
        fmt = reader.name
        df["__stale"] = _stale_mask(f, reader, df)
        df["__file"] = f.name
        df["__path"] = f.path
        df["__row"] = range(1, len(df) + 1)
        frames.append(df)
    df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
    if df.empty:
        raise MetricsError(f"{', '.join(f.name for f in files) or 'the results'} has no rows "
                           "(a header but no rows, or no records)")
    df.columns = [str(c).strip() for c in df.columns]
    return df, fmt


def _select_rows(df: pd.DataFrame, bench: BenchmarkSection) -> pd.DataFrame:
    if not bench.rows:
        return df
    try:
        sel = df.query(bench.rows)
    except Exception as e:  # pandas raises many types for a bad expression
        raise MetricsError(f"[benchmark] rows = {bench.rows!r} cannot be evaluated on columns "
                           f"{[c for c in df.columns if not c.startswith('__')]}: {e}") from e
    if sel.empty:
        named = [c for c in df.columns if not c.startswith("__") and re.search(rf"\b{re.escape(c)}\b", bench.rows)]
        seen = "; ".join(f"{c}: {sorted(map(str, df[c].dropna().unique()))[:10]}" for c in named)
        raise MetricsError(f"[benchmark] rows = {bench.rows!r} selects none of the {len(df)} row(s)"
                           + (f"; values seen: {seen}" if seen else "") + ": fix the query")
    return sel


def _stale_error(stale: pd.DataFrame, cols: list[str], bench: BenchmarkSection) -> MetricsError:
    return MetricsError(
        f"stale results: all {len(stale)} counted row(s) are unchanged from before the run ("
        f"{_describe_rows(stale, cols)}). The benchmark kept its old rows instead of writing new ones: "
        "it appends to a cumulative file and skips configs it has results for. Pass its overwrite flag "
        "(e.g. `--overwrite`) in [benchmark] command, or make it write a fresh file per run")


def _units(df: pd.DataFrame, bench: BenchmarkSection, fmt: str) -> tuple[pd.DataFrame, str | None]:
    """Strip a unit suffix from metric values ("1.2 ms") and check that the counted rows share one
    unit (unit column or suffix). Raises MetricsError naming the units and their row counts."""
    import pandas as pd

    units = None
    col = df[bench.metric]
    if col.dtype.kind not in "biuf":
        parsed = col.astype(str).str.extract(_VALUE_UNIT)
        if parsed[0].notna().all():
            df = df.copy()
            df[bench.metric] = pd.to_numeric(parsed[0])
            units = parsed[1]
    ucol = bench.unit_column or next((c for c in (*UNIT_COLUMNS, f"{bench.metric}_unit") if c in df.columns), "")
    if bench.unit_column and bench.unit_column not in df.columns:
        raise MetricsError(f"[benchmark] unit_column {bench.unit_column!r} is not a column; columns: "
                           f"{[c for c in df.columns if not c.startswith('__')]}")
    if ucol:
        units = df[ucol].astype(str) if units is None else units
    if units is None:
        return df, "s" if fmt == "pytest-benchmark" else None
    counts = units.value_counts()
    if len(counts) > 1:
        listed = ", ".join(f"{u} ({n} rows)" for u, n in counts.items())
        raise MetricsError(f"metric {bench.metric!r} mixes units among the counted rows: {listed}. Select rows "
                           "of one unit with [benchmark] rows (e.g. metric_name == 'speed') or a unit filter")
    return df, str(counts.index[0])


def _row_correct(df: pd.DataFrame, bench: BenchmarkSection) -> pd.Series:
    import pandas as pd

    ok = pd.Series(True, index=df.index)
    for col in bench.correctness_columns:
        vals = pd.to_numeric(df[col], errors="coerce")
        ok &= vals.eq(0) & vals.notna()
    if bench.correctness:
        try:
            cond = df.eval(bench.correctness)
        except Exception as e:  # pandas raises many types for a bad expression
            raise MetricsError(
                f"[benchmark] correctness = {bench.correctness!r} cannot be evaluated on columns "
                f"{[c for c in df.columns if not c.startswith('__')]}: {e}"
            ) from e
        ok &= pd.Series(cond, index=df.index).fillna(False).astype(bool)
    return ok


#: the class column naming the result file, when one run's counted rows come from several files
RESULT_FILE_COLUMN = "result_file"


def result_file_labels(paths: pd.Series) -> pd.Series:
    """Each path relative to the folder the paths share (`results/fwd/rms-norm.csv` and
    `results/bwd/rms-norm.csv` -> `fwd/rms-norm.csv`, `bwd/rms-norm.csv`), POSIX separators."""
    root = os.path.commonpath([os.path.dirname(p) for p in paths.unique()])
    return paths.map(lambda p: Path(os.path.relpath(p, root)).as_posix())


def _files_merge(df: pd.DataFrame, cols: list[str]) -> bool:
    """True when some config class would hold rows of more than one result file."""
    if df["__path"].nunique() < 2 or RESULT_FILE_COLUMN in cols:
        return False
    if not cols:
        return True
    return bool(df.groupby(cols, sort=False, dropna=False)["__path"].nunique().max() > 1)


def read_results(files: list[ResultFile], bench: BenchmarkSection) -> MetricTable:
    """Parse one run's result files (or its log, for format stdout) into a per-class table.

    Steps: read each file with its reader; mark stale rows (`_stale_mask`); apply `[benchmark] rows`;
    drop stale rows (all counted rows stale: MetricsError naming them and the likely cause); check
    the metric (finite numbers, one unit); find config columns; apply the correctness rule; group.
    When rows of several files would fall into one config class (a glob such as
    `results/*/rms-norm.csv` matching a forward and a backward table of the same shapes), the file
    is a config column too (`result_file`, the path below the folder the files share), so rows of
    different files never merge into one class; files of distinct classes combine as they are.
    Raises MetricsError for: unreadable content, a missing metric/correctness/config column (listing
    the columns seen), a `rows` query that fails or selects nothing, stale results, a NaN/inf or
    non-numeric metric value, several units, no rows.
    """
    import pandas as pd

    df, fmt = _frames(files, bench)
    names = ", ".join(f.name for f in files)
    needed = [bench.metric, *bench.correctness_columns, *bench.config_columns]
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise MetricsError(
            f"column(s) {missing} not in {names}; its columns are "
            f"{[c for c in df.columns if not c.startswith('__')]}: fix [benchmark] "
            "metric/correctness_columns/config_columns"
        )
    df = _select_rows(df, bench)
    stale = df[df["__stale"]]
    if len(stale) == len(df):
        raise _stale_error(stale, found_config_columns(df, bench, fmt), bench)
    df = df[~df["__stale"]].copy()
    df, unit = _units(df, bench, fmt)
    metric = pd.to_numeric(df[bench.metric], errors="coerce")
    bad = [i for i, v in enumerate(metric.astype(float)) if not math.isfinite(v)]
    if bad:
        first = df.iloc[bad[0]]
        raise MetricsError(
            f"metric {bench.metric!r} is NaN, inf or not a number in {len(bad)} row(s) "
            f"(first: {first['__file']} row {first['__row']}, value {first[bench.metric]!r}): the run did not "
            "measure every config class"
        )
    df[bench.metric] = metric.astype(float)
    cols = found_config_columns(df, bench, fmt)
    warnings = []
    if bench.rows and not bench.config_columns:  # within the selected rows, a constant column names no class
        varying = [c for c in cols if df[c].nunique(dropna=False) > 1]
        cols = varying or [c for c in cols if not re.search(rf"\b{re.escape(c)}\b", bench.rows)]
    if len(stale):
        warnings.append(f"{len(stale)} counted row(s) were left unchanged by this run and do not count: "
                        f"{_describe_rows(stale, cols, 3)}")
    if _files_merge(df, cols):
        df[RESULT_FILE_COLUMN] = result_file_labels(df["__path"])
        cols = [RESULT_FILE_COLUMN, *cols]
    df["__ok"] = _row_correct(df, bench)
    err_cols = [c for c in df.columns if not c.startswith("__") and _is_error_column(c, bench)]
    classes: list[ClassRow] = []
    groups = df.groupby(cols, sort=False, dropna=False) if cols else [((), df)]
    for values, g in groups:
        vals = list(values) if isinstance(values, tuple) else [values]
        errors = {}
        for c in err_cols:
            num = pd.to_numeric(g[c], errors="coerce")
            errors[c] = float(num.abs().max()) if num.notna().any() else float("nan")
        classes.append(
            ClassRow(
                key=class_key(cols, vals),
                metric=float(g[bench.metric].median()),
                rows=len(g),
                errors=errors,
                correct=bool(g["__ok"].all()),
            )
        )
    return MetricTable(
        metric=bench.metric,
        higher_is_better=bench.higher_is_better,
        config_columns=cols,
        classes=classes,
        files=[f.path for f in files],
        unit=unit,
        format=fmt,
        stale_rows=len(stale),
        warnings=warnings,
    )


def read_metrics(files: list[Path], bench: BenchmarkSection) -> MetricTable:
    """`read_results` for files as they are now (no content from before the run: every row counts)."""
    return read_results([ResultFile.load(f) for f in files], bench)
