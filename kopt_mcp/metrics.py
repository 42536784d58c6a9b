"""Metric files: find the fresh CSV(s), read them, check correctness, group rows by config class.

A config class is one combination of the config columns' values (e.g. `M=4096,N=128,dtype=float16`);
every verdict is per class. Config columns come from the config, or are found: every column that is
neither the metric, a correctness column, an `err_*` column, nor a measurement column (names
starting with one of MEASUREMENT_PREFIXES).
"""

from __future__ import annotations

import glob
import math
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from kopt_mcp.errors import MeasurementError

if TYPE_CHECKING:  # pandas is imported where a CSV is read, keeping server start fast
    import pandas as pd

from kopt_mcp.config import BenchmarkSection

MEASUREMENT_PREFIXES = ("us_", "ms_", "ns_", "s_", "time", "tflops", "gflops", "gbps", "gb_s", "bw", "speedup")


class MetricsError(MeasurementError, ValueError):
    """The metrics file is missing, stale or unusable; the message names the cause and the fix."""


class ClassRow(BaseModel):
    """One config class of one run: the metric (median over the class's rows) and correctness."""

    key: str
    metric: float
    rows: int
    errors: dict[str, float]
    correct: bool


class MetricTable(BaseModel):
    """Per-class results of one benchmark run, in CSV order. `files` are the CSVs read."""

    metric: str
    higher_is_better: bool
    config_columns: list[str]
    classes: list[ClassRow]
    files: list[str]

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


def fresh_csvs(workdir: Path, pattern: str, started_at: float) -> list[Path]:
    """The files matching `pattern` under `workdir` written at or after `started_at` (epoch s).

    Raises MetricsError if none match, or if all that match are older than the run (stale).
    """
    hits = sorted(Path(p) for p in glob.glob(str(workdir / pattern), recursive=True) if os.path.isfile(p))
    if not hits:
        raise MetricsError(
            f"the benchmark wrote no file matching {pattern!r} under {workdir}: "
            "check [benchmark] csv and that the benchmark writes its CSV there"
        )
    # Filesystem mtimes can be coarser than the clock; allow 10 ms of slack only.
    fresh = [p for p in hits if p.stat().st_mtime >= started_at - 0.01]
    if not fresh:
        raise MetricsError(
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


def found_config_columns(df: pd.DataFrame, bench: BenchmarkSection) -> list[str]:
    """Config columns: configured ones, or those that are neither metric, error nor measurement."""
    if bench.config_columns:
        return list(bench.config_columns)
    skip = {bench.metric, *bench.correctness_columns}
    if bench.correctness:  # columns the correctness expression reads are measurements, not config
        skip |= set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", bench.correctness)) & set(map(str, df.columns))
    return [
        c
        for c in df.columns
        if c not in skip and not c.lower().startswith("err") and not c.lower().startswith(MEASUREMENT_PREFIXES)
    ]


def _read(files: list[Path]) -> pd.DataFrame:
    import pandas as pd

    frames = []
    for f in files:
        try:
            frames.append(pd.read_csv(f))
        except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as e:
            raise MetricsError(f"{f.name} is not a readable CSV ({e}): fix the benchmark's writer") from e
    df = pd.concat(frames, ignore_index=True)
    df.columns = [str(c).strip() for c in df.columns]
    if df.empty:
        raise MetricsError(f"{', '.join(f.name for f in files)} has a header but no rows")
    return df


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
                f"{list(df.columns)}: {e}"
            ) from e
        ok &= pd.Series(cond, index=df.index).fillna(False).astype(bool)
    return ok


def read_metrics(files: list[Path], bench: BenchmarkSection) -> MetricTable:
    """Parse the metric CSVs of one run into a per-class table.

    Raises MetricsError for: a missing metric/correctness/config column (listing the columns seen),
    a NaN/inf or non-numeric metric value in any row, an empty file.
    """
    import pandas as pd

    df = _read(files)
    needed = [bench.metric, *bench.correctness_columns, *bench.config_columns]
    missing = [c for c in needed if c not in df.columns]
    if missing:
        raise MetricsError(
            f"column(s) {missing} not in {', '.join(f.name for f in files)}; its columns are "
            f"{list(df.columns)}: fix [benchmark] metric/correctness_columns/config_columns"
        )
    metric = pd.to_numeric(df[bench.metric], errors="coerce")
    bad = df.index[~metric.astype(float).map(math.isfinite)]
    if len(bad):
        raise MetricsError(
            f"metric {bench.metric!r} is NaN, inf or not a number in {len(bad)} row(s) "
            f"(first: row {int(bad[0]) + 1}, value {df[bench.metric].iloc[bad[0]]!r}): the run did not "
            "measure every config class"
        )
    df[bench.metric] = metric.astype(float)
    cols = found_config_columns(df, bench)
    df["__ok"] = _row_correct(df, bench)
    err_cols = [c for c in df.columns if c in bench.correctness_columns or c.lower().startswith("err")]
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
        files=[str(f) for f in files],
    )


def improvement_pct(best: float, candidate: float, higher_is_better: bool) -> float:
    """Signed improvement of `candidate` over `best` in %: positive = better.

    Lower-is-better metrics (times): (best - candidate) / best * 100, so 100 us -> 90 us is +10%.
    Higher-is-better: (candidate - best) / best * 100.
    """
    if best == 0:
        return 0.0 if candidate == best else (math.inf if (candidate > best) == higher_is_better else -math.inf)
    change = (candidate - best) / abs(best) * 100.0
    return change if higher_is_better else -change
