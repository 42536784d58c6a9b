"""Stale rows: rows of a result file that this run left as they were before it (a tracked file's old
rows, or an untracked file's appended-to old rows). They never count; all counted rows stale is an
error naming them."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas is imported where a CSV is read, keeping server start fast
    import pandas as pd

from kopt_mcp.config import BenchmarkSection
from kopt_mcp.errors import MetricsError, ReaderError
from kopt_mcp.readers import ResultFile


def _row_keys(df: pd.DataFrame, columns: list[str]) -> list[tuple]:
    return [tuple(str(v) for v in row) for row in df[columns].itertuples(index=False, name=None)]


def stale_mask(f: ResultFile, reader, after: pd.DataFrame) -> list[bool]:
    """Which rows of `after` this run left unchanged: for a tracked file, every row equal to a row
    before the run; for an untracked file that grew (rows appended, the old ones kept), the old
    rows. An untracked file rewritten in place counts whole (a deterministic benchmark may write
    the same values twice)."""
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


def describe_rows(df: pd.DataFrame, cols: list[str], limit: int = 5) -> str:
    """The first `limit` rows of `df` as `<file> row <n> (col=value, ...)` (up to 4 of `cols`), `; `-joined."""
    named = []
    for _, r in df.head(limit).iterrows():
        where = ", ".join(f"{c}={r[c]}" for c in cols[:4])
        named.append(f"{r['__file']} row {r['__row']}" + (f" ({where})" if where else ""))
    more = f" and {len(df) - limit} more" if len(df) > limit else ""
    return "; ".join(named) + more


def stale_error(stale: pd.DataFrame, cols: list[str], bench: BenchmarkSection) -> MetricsError:
    return MetricsError(
        f"stale results: all {len(stale)} counted row(s) are unchanged from before the run ("
        f"{describe_rows(stale, cols)}). The benchmark kept its old rows instead of writing new ones: "
        "it appends to a cumulative file and skips configs it has results for. Pass its overwrite flag "
        "(e.g. `--overwrite`) in [benchmark] command, or make it write a fresh file per run")
