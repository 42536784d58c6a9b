"""`nvidia-smi --query-*` CSV parsing and the `NvidiaSmiProbe` built on it.

nvidia-smi's CSV looks like (`--format=csv`)::

    index, uuid, name, utilization.gpu [%], memory.used [MiB], memory.total [MiB]
    0, GPU-12d4..., NVIDIA H200, 0 %, 0 MiB, 143771 MiB

With `nounits` the header keeps its `[unit]` labels and the values lose theirs; with `noheader`
there is no header line and the caller names the fields. Markers such as `[N/A]`,
`[Not Found]`, `[Not Supported]` mean "no value".
"""

from __future__ import annotations

import csv
import re
import subprocess
from collections.abc import Callable, Sequence

from kopt_mcp.errors import ProbeError
from kopt_mcp.gpus.base import GpuProcess, GpuReading

GPU_FIELDS = ("index", "uuid", "name", "utilization.gpu", "memory.used", "memory.total")
APP_FIELDS = ("pid", "process_name", "used_memory", "gpu_uuid")
GPU_COMMAND = ["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv"]
APPS_COMMAND = ["nvidia-smi", f"--query-compute-apps={','.join(APP_FIELDS)}", "--format=csv"]
RUN_TIMEOUT_S = 30.0

# query names whose CSV header nvidia-smi prints under another name
_ALIASES = {"used_memory": "used_gpu_memory"}
_UNITS = {"%", "B", "KiB", "MiB", "GiB", "W", "MHz", "C", "s", "ms", "us"}
_HEADER_RE = re.compile(r"^(?P<key>[^\[]+?)\s*(?:\[(?P<unit>[^\]]+)\])?$")
_VALUE_RE = re.compile(r"^(?P<num>[-+]?\d+(?:\.\d+)?)\s*(?P<unit>[A-Za-z%]+)$")

Row = dict[str, str | None]


def _key(field: str) -> str:
    """Canonical column key: lower-case, units dropped, query aliases mapped to header names."""
    m = _HEADER_RE.match(field.strip())
    key = (m.group("key") if m else field).strip().lower()
    return _ALIASES.get(key, key)


def _value(raw: str, unit: str | None) -> str | None:
    """Strip one value: `[N/A]`-style markers and empty -> None; `883 MiB` -> `883`."""
    v = raw.strip()
    if not v or (v.startswith("[") and v.endswith("]")) or v in {"N/A", "Not Supported"}:
        return None
    m = _VALUE_RE.match(v)
    if m and (m.group("unit") == unit or m.group("unit") in _UNITS):
        return m.group("num")
    return v


def _parse_csv(text: str, fields: Sequence[str] | None, required: Sequence[str] = ()) -> list[Row]:
    """Parse nvidia-smi CSV into rows keyed by canonical column name (see `parse_query_gpu_csv`).

    Raises ProbeError naming the first `required` column the header (or `fields`) lacks.
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    rows = list(csv.reader(lines, skipinitialspace=True))
    if fields is None:
        if not rows:
            raise ProbeError("nvidia-smi CSV is empty: expected a header line (or pass `fields`)")
        header, rows = rows[0], rows[1:]
        if any(_VALUE_RE.match(h) or h.strip().isdigit() or h.strip().startswith("GPU-") for h in header):
            raise ProbeError(f"the first line looks like data, not a header ({','.join(header)!r}): "
                             "for --format=csv,noheader pass `fields`")
    else:
        header = list(fields)
    keys = [_key(h) for h in header]
    for key in required:
        if key not in keys:
            raise ProbeError(f"no column '{key}' in the output (header: {', '.join(header)!r})")
    units = []
    for h in header:
        m = _HEADER_RE.match(h.strip())
        units.append(m.group("unit") if m else None)
    out: list[Row] = []
    for n, row in enumerate(rows, start=1):
        if len(row) != len(keys):
            raise ProbeError(
                f"CSV row {n} has {len(row)} fields, expected {len(keys)} "
                f"({', '.join(keys)}): {','.join(row)!r}"
            )
        out.append({k: _value(v, u) for k, v, u in zip(keys, row, units)})
    return out


def parse_query_gpu_csv(text: str, fields: Sequence[str] | None = None) -> list[Row]:
    """Parse `nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]` output.

    Returns one dict per GPU line, keyed by the column name without its unit (`memory.used`),
    values as stripped strings without units (`"883"`, `"99"`, `"NVIDIA H200"`), None for
    `[N/A]`-style markers. Columns may come in any order. `fields` (the query's field list) is
    required for `noheader` output and means "there is no header line".
    Raises ProbeError on empty output without `fields`, a first line that looks like data when
    `fields` is None, or a row whose field count is wrong.
    """
    return _parse_csv(text, fields)


def parse_compute_apps_csv(text: str, fields: Sequence[str] | None = None) -> list[Row]:
    """Parse `nvidia-smi --query-compute-apps=... --format=csv[,noheader][,nounits]` output.

    Same shape and errors as `parse_query_gpu_csv`; one dict per process; no process -> [].
    The query field `used_memory` is keyed `used_gpu_memory` (the header nvidia-smi prints).
    """
    return _parse_csv(text, fields)


def _default_run(args: list[str]) -> str:
    """Run a command, return its stdout; ProbeError when missing, failing or over 30 s."""
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except FileNotFoundError as e:
        raise ProbeError(f"`{' '.join(args)}`: {args[0]} not found on PATH") from e
    except subprocess.TimeoutExpired as e:
        raise ProbeError(f"`{' '.join(args)}` did not answer within {RUN_TIMEOUT_S:g} s") from e
    if done.returncode != 0:
        msg = (done.stderr or done.stdout).strip()[:500]
        raise ProbeError(f"`{' '.join(args)}` exited {done.returncode}: {msg}")
    return done.stdout


def _need(row: Row, key: str, cmd: list[str]) -> str:
    """The value of a required column; ProbeError naming the command and the column."""
    if key not in row:
        raise ProbeError(f"`{' '.join(cmd)}` output has no column '{key}' (got {', '.join(row)})")
    v = row[key]
    if v is None:
        raise ProbeError(f"`{' '.join(cmd)}` printed no value for '{key}'")
    return v


def _num(row: Row, key: str, cmd: list[str], kind: type = float) -> float | int | None:
    """A numeric column as `kind`; None when absent or marked `[N/A]`; ProbeError if not a number."""
    v = row.get(key)
    if v is None:
        return None
    try:
        return kind(float(v)) if kind is int else kind(v)
    except ValueError as e:
        raise ProbeError(f"`{' '.join(cmd)}`: column '{key}' is not a number: {v!r}") from e


class NvidiaSmiProbe:
    """GPU probe that runs `nvidia-smi` (name "nvidia-smi").

    `run(args) -> stdout` runs one command (default: subprocess, 30 s timeout, ProbeError on a
    missing binary, non-zero exit or timeout); tests pass a replay of recorded output.
    """

    name = "nvidia-smi"

    def __init__(self, run: Callable[[list[str]], str] | None = None) -> None:
        self._run = run or _default_run

    def _query(self, cmd: list[str], required: Sequence[str]) -> list[Row]:
        """Run one query and parse it; ProbeError names the command (and any missing column)."""
        text = self._run(list(cmd))
        if not text.strip():
            raise ProbeError(f"`{' '.join(cmd)}` printed nothing (expected a CSV header)")
        try:
            return _parse_csv(text, None, required)
        except ProbeError as e:
            raise ProbeError(f"`{' '.join(cmd)}`: {e}") from e

    def read(self) -> list[GpuReading]:
        """Read every GPU and its compute processes (joined by GPU uuid).

        Units: utilization %, memory MiB. `name` is "" when the output has no name column.
        Raises ProbeError naming the command when it fails or a required column
        (index, uuid / pid, gpu_uuid) is missing or not a number.
        """
        gpus = self._query(GPU_COMMAND, ("index", "uuid"))
        apps = self._query(APPS_COMMAND, ("pid", "gpu_uuid")) if gpus else []
        procs: dict[str, list[GpuProcess]] = {}
        for a in apps:
            uuid = _need(a, "gpu_uuid", APPS_COMMAND)
            pid = _num(a, "pid", APPS_COMMAND, int)
            if pid is None:
                raise ProbeError(f"`{' '.join(APPS_COMMAND)}` printed no value for 'pid'")
            procs.setdefault(uuid, []).append(GpuProcess(
                pid=pid, name=a.get("process_name") or "",
                used_mib=_num(a, "used_gpu_memory", APPS_COMMAND),
            ))
        out = []
        for g in gpus:
            uuid = _need(g, "uuid", GPU_COMMAND)
            index = _num(g, "index", GPU_COMMAND, int)
            if index is None:
                raise ProbeError(f"`{' '.join(GPU_COMMAND)}` printed no value for 'index'")
            out.append(GpuReading(
                index=index, uuid=uuid, name=g.get("name") or "", vendor="nvidia",
                util_pct=_num(g, "utilization.gpu", GPU_COMMAND),
                mem_used_mib=_num(g, "memory.used", GPU_COMMAND),
                mem_total_mib=_num(g, "memory.total", GPU_COMMAND),
                processes=procs.get(uuid, []),
            ))
        return out
