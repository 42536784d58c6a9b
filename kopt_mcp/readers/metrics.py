"""Result files: find the fresh ones, read them (kopt_mcp/readers), keep the rows that count, check
units and correctness, group rows by config class.

A config class is one combination of the config columns' values (e.g. `M=4096,N=128,dtype=float16`);
every verdict is per class. Config columns come from the config, or are found: every column that is
neither the metric, a correctness column, an `err_*` column, a measurement column (names starting
with one of MEASUREMENT_PREFIXES), nor a column that changes from run to run or describes the machine
(timestamps, versions, percentiles/quantiles, GPU or host names, units: `never_config`).

Rows that count: those of THIS run (a row left unchanged in a tracked or appended file is stale),
selected by `[benchmark] rows` (a pandas query).

Cut along the domain: readers/collect.py finds the run's result files, readers/stale.py marks the rows
the run left unchanged, readers/columns.py finds the config columns; this module reads the rows that
count into a per-class table. Their public names are importable from here too.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from kopt_mcp.errors import MetricsError

if TYPE_CHECKING:  # pandas is imported where a CSV is read, keeping server start fast
    import pandas as pd

from kopt_mcp.config import BenchmarkSection
from kopt_mcp.errors import ReaderError
from kopt_mcp.readers import ResultFile, make_reader
from kopt_mcp.readers.collect import capture_before, collect_results, fresh_csvs
from kopt_mcp.readers.columns import MEASUREMENT_PREFIXES, found_config_columns, is_error_column, never_config
from kopt_mcp.readers.stale import describe_rows, stale_error, stale_mask

__all__ = ["MEASUREMENT_PREFIXES", "RESULT_FILE_COLUMN", "UNIT_COLUMNS", "ClassRow", "MetricTable", "capture_before",
           "class_key", "collect_results", "found_config_columns", "fresh_csvs", "never_config", "read_metrics",
           "read_results", "result_file_labels"]


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


def class_key(columns: list[str], values: list[object]) -> str:
    """`"col=value,col=value"` in column order; integral floats print without `.0`."""
    parts = []
    for c, v in zip(columns, values, strict=True):
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        parts.append(f"{c}={v}")
    return ",".join(parts) if parts else "all"


_VALUE_UNIT = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([A-Za-zµ%/]+[A-Za-z0-9µ%/]*)\s*$")
UNIT_COLUMNS = ("metric_unit", "unit", "units")


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
        df["__stale"] = stale_mask(f, reader, df)
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
    df, fmt = _frames(files, bench)
    _check_columns(df, files, bench)
    df = _select_rows(df, bench)
    stale = df[df["__stale"]]
    if len(stale) == len(df):
        raise stale_error(stale, found_config_columns(df, bench, fmt), bench)
    df = df[~df["__stale"]].copy()
    df, unit = _units(df, bench, fmt)
    df[bench.metric] = _finite_metric(df, bench)
    cols = _class_columns(df, bench, fmt)
    warnings = []
    if len(stale):
        warnings.append(f"{len(stale)} counted row(s) were left unchanged by this run and do not count: "
                        f"{describe_rows(stale, cols, 3)}")
    if _files_merge(df, cols):
        df[RESULT_FILE_COLUMN] = result_file_labels(df["__path"])
        cols = [RESULT_FILE_COLUMN, *cols]
    df["__ok"] = _row_correct(df, bench)
    return MetricTable(
        metric=bench.metric,
        higher_is_better=bench.higher_is_better,
        config_columns=cols,
        classes=_classes(df, cols, bench),
        files=[f.path for f in files],
        unit=unit,
        format=fmt,
        stale_rows=len(stale),
        warnings=warnings,
    )


def _check_columns(df: pd.DataFrame, files: list[ResultFile], bench: BenchmarkSection) -> None:
    """Raises MetricsError when a configured metric, correctness or config column is not in `df`."""
    names = ", ".join(f.name for f in files)
    needed = [bench.metric, *bench.correctness_columns, *bench.config_columns]
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise MetricsError(
            f"column(s) {missing} not in {names}; its columns are "
            f"{[c for c in df.columns if not c.startswith('__')]}: fix [benchmark] "
            "metric/correctness_columns/config_columns"
        )


def _finite_metric(df: pd.DataFrame, bench: BenchmarkSection) -> pd.Series:
    """The metric column as floats; raises MetricsError naming the first row whose value is NaN, inf
    or not a number."""
    import pandas as pd

    metric = pd.to_numeric(df[bench.metric], errors="coerce")
    bad = [i for i, v in enumerate(metric.astype(float)) if not math.isfinite(v)]
    if bad:
        first = df.iloc[bad[0]]
        raise MetricsError(
            f"metric {bench.metric!r} is NaN, inf or not a number in {len(bad)} row(s) "
            f"(first: {first['__file']} row {first['__row']}, value {first[bench.metric]!r}): the run did not "
            "measure every config class"
        )
    return metric.astype(float)


def _class_columns(df: pd.DataFrame, bench: BenchmarkSection, fmt: str) -> list[str]:
    """`found_config_columns`; with a `rows` selection and no configured columns, only those that vary
    within the selected rows (a constant column names no class)."""
    cols = found_config_columns(df, bench, fmt)
    if bench.rows and not bench.config_columns:
        varying = [c for c in cols if df[c].nunique(dropna=False) > 1]
        cols = varying or [c for c in cols if not re.search(rf"\b{re.escape(c)}\b", bench.rows)]
    return cols


def _classes(df: pd.DataFrame, cols: list[str], bench: BenchmarkSection) -> list[ClassRow]:
    """One ClassRow per group of `cols` in file order: median metric, row count, largest |error|
    per error column (NaN when not numeric), all rows correct (`__ok`)."""
    import pandas as pd

    err_cols = [c for c in df.columns if not c.startswith("__") and is_error_column(c, bench)]
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
    return classes


def read_metrics(files: list[Path], bench: BenchmarkSection) -> MetricTable:
    """`read_results` for files as they are now (no content from before the run: every row counts)."""
    return read_results([ResultFile.load(f) for f in files], bench)
