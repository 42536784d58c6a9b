"""rocprofv3 (ROCprofiler-SDK) backend: per-kernel GPU time and register / LDS / scratch use,
read from the CSV files rocprofv3 writes.

`wrap` runs the benchmark as
`rocprofv3 --kernel-trace --stats --output-format csv -d <out_dir> -o run -- bash -c <command>`.
Flags as documented in the rocprofv3 command-line options page
(https://rocm.docs.amd.com/projects/rocprofiler-sdk/en/develop/quick-reference/rocprofv3-cli-options.html:
`-d/--output-directory`, `-o/--output-file`, `--output-format csv`), the quick reference
(https://rocm.docs.amd.com/projects/rocprofiler-sdk/en/latest/quick_guide.html: `--kernel-trace`,
`--` before the application) and the recorded `rocprofv3 --stats --kernel-trace --hip-trace` run
behind tests/fixtures/rocprofv3/hpctraining_jacobi_hip_kernel_stats.csv (`--stats`).

`parse` searches `out_dir` recursively (rocprofv3 may nest its files as <host>/<pid>/...) for
`*kernel_trace.csv` (one row per dispatch), else `*counter_collection.csv` (one row per dispatch x
counter), else `*kernel_stats.csv` (one row per kernel). Column names changed between releases;
every spelling seen in real outputs is accepted, case-insensitively:

- 2024 schema: Private_Segment_Size / Group_Segment_Size, no register columns;
- current docs schema: LDS_Block_Size, Scratch_Size, VGPR_Count, Accum_VGPR_Count, SGPR_Count;
- rocpd2csv: Lds_Block_Size, Vgpr_Count, Accum_Vgpr_Count, Sgpr_Count, plus a Guid column;
- rocpd SQL views: LDS_Per_Workgroup, Scratch_Per_Workitem, Arch_VGPR, Accum_VGPR, SGPR;
- stats: Name, Calls, TotalDurationNs, AverageNs, Percentage, MinNs, MaxNs, StdDev.

Times: Start_Timestamp/End_Timestamp and *Ns columns are ns; reported in us.
`grid_size` is reported in workgroups (rocprofv3's Grid_Size counts work-items), like ncu's blocks.
`registers_per_thread` is the per-lane VGPR count (arch + accum), the AMD analog of CUDA registers.
"""

from __future__ import annotations

import csv
import math
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.groups import build_groups, launch_median_us
from kopt_mcp.evidence.trace import KernelStat, KernelTrace

__all__ = ["OUTPUT_NAME", "RocprofV3Profiler", "parse_rocprof_csv", "parse_rocprof_dir"]

OUTPUT_NAME = "run"

# field -> accepted column names (compared lowercased)
_NAME = ("kernel_name", "name")
_START = ("start_timestamp",)
_END = ("end_timestamp",)
_CALLS = ("calls",)
_TOTAL_NS = ("totaldurationns",)
_DISPATCH = ("dispatch_id",)
_PROCESS = ("process_id", "pid")
EXTRA_COLUMNS: dict[str, tuple[str, ...]] = {
    "arch_vgpr": ("arch_vgpr_count", "vgpr_count", "arch_vgpr"),
    "accum_vgpr": ("accum_vgpr_count", "accum_vgpr"),
    "sgpr": ("sgpr_count", "sgpr"),
    "lds_bytes": ("lds_block_size", "lds_size", "lds_per_workgroup", "group_segment_size"),
    "scratch_bytes": ("scratch_size", "scratch_per_workitem", "private_segment_size"),
}
_WG_XYZ = ("workgroup_size_x", "workgroup_size_y", "workgroup_size_z")
_GRID_XYZ = ("grid_size_x", "grid_size_y", "grid_size_z")
_WG = ("workgroup_size",)
_GRID = ("grid_size",)
_COUNTER = ("counter_name",)
_COUNTER_VALUE = ("counter_value",)

_PATTERNS = ("*kernel_trace.csv", "*counter_collection.csv", "*kernel_stats.csv")
_NO_KERNEL_HINT = "did the benchmark launch GPU kernels on the AMD GPU?"


class RocprofV3Profiler:
    """Profile the benchmark with rocprofv3 (kernel trace + stats, CSV output)."""

    name = "rocprofv3"
    #: the kernel trace (`--kernel-trace`) times each dispatch: the keep metric's per-launch test
    per_launch = True

    def __init__(self, binary: str = "rocprofv3") -> None:
        self.binary = binary

    def available(self) -> bool:
        """True where `binary` resolves on PATH (or is an executable path)."""
        return shutil.which(self.binary) is not None

    def wrap(self, command: str, out_dir: Path) -> str:
        """The shell command running `command` under rocprofv3, CSVs under `out_dir`."""
        parts = [
            shlex.quote(self.binary), "--kernel-trace", "--stats", "--output-format", "csv",
            "-d", shlex.quote(str(out_dir)), "-o", OUTPUT_NAME, "--", "bash", "-c", shlex.quote(command),
        ]
        return " ".join(parts)

    def parse(self, out_dir: Path) -> KernelTrace:
        """Read what rocprofv3 left under `out_dir`. Raises ProfilerError."""
        return parse_rocprof_dir(Path(out_dir))


def parse_rocprof_dir(out_dir: Path) -> KernelTrace:
    """Find the kernel trace CSV(s) under `out_dir` (recursively; several processes write
    several files) and parse them; fall back to counter collection, then to kernel stats."""
    out_dir = Path(out_dir)
    for pattern in _PATTERNS:
        files = sorted(p for p in out_dir.rglob(pattern) if p.is_file())
        if files:
            return parse_rocprof_csv(*files)
    seen = sorted(str(p.relative_to(out_dir)) for p in out_dir.rglob("*") if p.is_file())[:20]
    raise ProfilerError(
        f"{out_dir}: no rocprofv3 kernel CSV ({', '.join(_PATTERNS)}) found; files there: "
        f"{', '.join(seen) or 'none'}. Was the run wrapped in rocprofv3 --kernel-trace "
        f"--output-format csv? {_NO_KERNEL_HINT}"
    )


@dataclass
class _Acc:
    calls: int = 0
    total_us: float = 0.0
    extra: dict[str, float] = field(default_factory=dict)
    block: int | None = None
    grid: int | None = None
    counters: dict[str, list[float]] = field(default_factory=dict)
    #: per dispatch (start ns, GPU time us), kernel-trace layouts only
    launches: list[tuple[float, float]] | None = field(default_factory=list)


def parse_rocprof_csv(*paths: Path) -> KernelTrace:
    """Parse one or more rocprofv3 CSVs of one layout (kernel trace, counter collection or
    kernel stats) into a KernelTrace, kernels grouped by name, hottest first.

    Raises ProfilerError naming the file and its columns for an unknown layout, and saying
    "no kernel" when the files hold no kernel row."""
    accs: dict[str, _Acc] = {}
    warnings: list[str] = []
    shaped: list[tuple] = []  # per dispatch: build_groups' records
    for path in paths:
        _read_one(Path(path), accs, warnings, shaped)
    if not accs:
        names = ", ".join(str(p) for p in paths)
        raise ProfilerError(f"{names}: rocprofv3 recorded no kernel dispatch (header only). {_NO_KERNEL_HINT}")
    total = sum(a.total_us for a in accs.values())
    kernels = []
    for name, a in accs.items():
        extra = dict(a.extra)
        extra.update({f"pmc_{k}": sum(v) / len(v) for k, v in a.counters.items()})
        vgpr = [extra[k] for k in ("arch_vgpr", "accum_vgpr") if k in extra]
        launches = sorted(a.launches) if a.launches else None
        durations = [d for _, d in launches] if launches else None
        kernels.append(KernelStat(
            name=name, calls=a.calls, total_us=a.total_us,
            avg_us=a.total_us / a.calls if a.calls else 0.0,
            share_pct=100.0 * a.total_us / total if total > 0 else 0.0,
            registers_per_thread=int(sum(vgpr)) if vgpr else None,
            shared_mem_per_block_bytes=int(extra["lds_bytes"]) if "lds_bytes" in extra else None,
            block_size=a.block, grid_size=a.grid, extra=extra, durations_us=durations,
            launch_order=[float(t) for t, _ in launches] if launches else None,
            median_us=launch_median_us(durations),
        ))
    kernels.sort(key=lambda k: (-k.total_us, k.name))
    per_dispatch = bool(shaped) and all(a.launches for a in accs.values())
    return KernelTrace(backend="rocprofv3", kernels=kernels, total_gpu_us=total, warnings=warnings,
                       groups=build_groups(shaped) if per_dispatch else None)


def _col(index: dict[str, int], names: tuple[str, ...]) -> int | None:
    return next((index[n] for n in names if n in index), None)


def _num(text: str) -> float | None:
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _read_one(path: Path, accs: dict[str, _Acc], warnings: list[str], shaped: list[tuple]) -> None:
    """Add one CSV's rows to `accs` (per kernel name) and, for kernel-trace layouts, each dispatch
    to `shaped` as (name, grid in workgroups (x, y, z), workgroup size (x, y, z), start ns, GPU time
    us, VGPRs, LDS bytes); shapes are None where the columns are missing."""
    try:
        with path.open(newline="", errors="replace") as f:
            rows = list(csv.reader(f))
    except OSError as e:
        raise ProfilerError(f"{path}: cannot read ({e})") from e
    if not rows:
        raise ProfilerError(f"{path}: empty file, no header (columns found: none). {_NO_KERNEL_HINT}")
    header = [h.strip() for h in rows[0]]
    lay = _layout(path, header)
    seen_dispatch: set[tuple[str, str]] = set()
    bad = 0
    for row in rows[1:]:
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != len(header):
            bad += 1
            continue
        name = row[lay.name]
        timed = _dispatch_time(row, lay, seen_dispatch) if lay.per_dispatch else _stats_time(row, lay)
        if timed is None:
            bad += 1
            continue
        calls, time_us, start = timed
        acc = accs.setdefault(name, _Acc())
        acc.calls += calls
        acc.total_us += time_us
        if not lay.per_dispatch:
            acc.launches = None
        elif calls:
            acc.launches.append((start, time_us))
            shaped.append(_dispatch_shape(row, lay, name, start, time_us))
        _add_row_figures(acc, row, lay)
    if bad:
        warnings.append(f"{path.name}: {bad} row(s) without usable times were skipped")


@dataclass
class _Layout:
    """Where one CSV holds each field (column index, None: absent). `per_dispatch`: a kernel-trace or
    counter-collection layout (start/end per dispatch), else kernel stats (calls, total ns per kernel)."""

    name: int
    start: int | None
    end: int | None
    calls: int | None
    total: int | None
    per_dispatch: bool
    extra: dict[str, int | None]
    wg_xyz: list[int | None]
    grid_xyz: list[int | None]
    wg: int | None
    grid: int | None
    counter: int | None
    value: int | None
    dispatch: int | None
    process: int | None


def _layout(path: Path, header: list[str]) -> _Layout:
    """The CSV's layout from its header (column names compared lowercased). Raises ProfilerError
    naming the columns found when it is neither a kernel trace nor kernel stats."""
    index = {h.lower(): j for j, h in enumerate(header)}
    name_at = _col(index, _NAME)
    start_at, end_at = _col(index, _START), _col(index, _END)
    calls_at, total_at = _col(index, _CALLS), _col(index, _TOTAL_NS)
    if name_at is None or not ((start_at is not None and end_at is not None)
                               or (calls_at is not None and total_at is not None)):
        raise ProfilerError(
            f"{path}: unknown rocprofv3 CSV layout: need Kernel_Name + Start_Timestamp/End_Timestamp "
            f"(kernel trace) or Name + Calls + TotalDurationNs (kernel stats); columns found: "
            f"{', '.join(header) or 'none'}"
        )
    return _Layout(name=name_at, start=start_at, end=end_at, calls=calls_at, total=total_at,
                   per_dispatch=start_at is not None and end_at is not None,
                   extra={k: _col(index, names) for k, names in EXTRA_COLUMNS.items()},
                   wg_xyz=[_col(index, (n,)) for n in _WG_XYZ], grid_xyz=[_col(index, (n,)) for n in _GRID_XYZ],
                   wg=_col(index, _WG), grid=_col(index, _GRID),
                   counter=_col(index, _COUNTER), value=_col(index, _COUNTER_VALUE),
                   dispatch=_col(index, _DISPATCH), process=_col(index, _PROCESS))


def _dispatch_time(row: list[str], lay: _Layout, seen: set[tuple[str, str]]) -> tuple[int, float, float] | None:
    """A kernel-trace row: (calls, GPU time us, start ns); a counter-collection row (one per dispatch x
    counter) times its dispatch once (`seen`: (process, dispatch id) timed so far), later rows count 0.
    None when the times are missing or end before they start."""
    start, end = _num(row[lay.start]), _num(row[lay.end])
    if start is None or end is None or end < start:
        return None
    if lay.counter is not None and lay.dispatch is not None:
        key = (row[lay.process] if lay.process is not None else "", row[lay.dispatch])
        first = key not in seen
        seen.add(key)
    else:
        first = True
    calls = 1 if first else 0
    if _isint(row[lay.start], row[lay.end]):  # exact integer ns; floats lose digits at 1e15
        time_us = (int(row[lay.end]) - int(row[lay.start])) / 1e3 if first else 0.0
    else:
        time_us = (end - start) / 1e3 if first else 0.0
    return calls, time_us, start


def _stats_time(row: list[str], lay: _Layout) -> tuple[int, float, None] | None:
    """A kernel-stats row: (calls, total GPU time us, no start); None when either is not a number."""
    calls_f, total_ns = _num(row[lay.calls]), _num(row[lay.total])
    if calls_f is None or total_ns is None:
        return None
    return int(calls_f), total_ns / 1e3, None


def _dispatch_shape(row: list[str], lay: _Layout, name: str, start: float, time_us: float) -> tuple:
    """One dispatch as build_groups' record: (name, grid in workgroups, workgroup size, start ns, GPU
    time us, VGPRs, LDS bytes); the shape None where the columns are missing."""
    wg3, grid3 = _dims(row, lay.wg_xyz), _dims(row, lay.grid_xyz)
    if wg3 is None and lay.wg is not None and lay.grid is not None:  # totals only (counter collection)
        wg1, grid1 = _num(row[lay.wg]), _num(row[lay.grid])
        wg3, grid3 = ((int(wg1), 1, 1), (int(grid1), 1, 1)) if wg1 and grid1 else (None, None)
    blocks = (None if wg3 is None or grid3 is None or 0 in wg3
              else tuple(math.ceil(g / w) for g, w in zip(grid3, wg3, strict=True)))
    vgpr = [_num(row[j]) for j in (lay.extra.get("arch_vgpr"), lay.extra.get("accum_vgpr")) if j is not None]
    lds = _num(row[lay.extra["lds_bytes"]]) if lay.extra.get("lds_bytes") is not None else None
    return (name, blocks, wg3 if blocks else None, start, time_us,
            int(sum(v for v in vgpr if v is not None)) if vgpr else None,
            int(lds) if lds is not None else None)


def _add_row_figures(acc: _Acc, row: list[str], lay: _Layout) -> None:
    """A row's counter value, its register / LDS / scratch figures (the largest seen) and its
    workgroup size and grid in workgroups (the largest seen) into the kernel's `acc`."""
    if lay.counter is not None and lay.value is not None:
        value = _num(row[lay.value])
        if value is not None:
            acc.counters.setdefault(row[lay.counter], []).append(value)
    for key, at in lay.extra.items():
        value = _num(row[at]) if at is not None else None
        if value is not None:
            acc.extra[key] = max(acc.extra.get(key, value), value)
    block = _product(row, lay.wg_xyz) if all(j is not None for j in lay.wg_xyz) else \
        (_num(row[lay.wg]) if lay.wg is not None else None)
    grid = _product(row, lay.grid_xyz) if all(j is not None for j in lay.grid_xyz) else \
        (_num(row[lay.grid]) if lay.grid is not None else None)
    if block:
        acc.block = max(acc.block or 0, int(block))
        if grid:
            acc.grid = max(acc.grid or 0, math.ceil(grid / block))


def _dims(row: list[str], cols: list[int | None]) -> tuple[int, int, int] | None:
    """The three integer values of `cols` in `row`, or None where a column is missing or not a number."""
    vals = [_num(row[j]) if j is not None else None for j in cols]
    return None if any(v is None for v in vals) else tuple(int(v) for v in vals)


def _isint(*texts: str) -> bool:
    return all(t.strip().lstrip("-").isdigit() for t in texts)


def _product(row: list[str], cols: list[int | None]) -> float | None:
    product = 1.0
    for j in cols:
        value = _num(row[j]) if j is not None else None
        if value is None:
            return None
        product *= value
    return product
