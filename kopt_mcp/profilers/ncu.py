"""Nsight Compute (ncu) backend: per-kernel GPU time, launch configuration and, in detail mode,
throughput and occupancy, read from ncu's CSV output.

`wrap` runs the benchmark under `ncu --csv --page raw --log-file <out_dir>/ncu.csv`, always with
`--clock-control none` (ncu must never lock the GPU clocks: the keep metric is compared with runs
that were not locked). `parse` reads both CSV layouts ncu writes: the raw page (one row per launch,
one column per metric, a units row under the header) and the default details page (one row per
metric of a launch). Units are normalised: times to us, shared memory to bytes.
"""

from __future__ import annotations

import csv
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.groups import build_groups, launch_median_us
from kopt_mcp.evidence.peak import peak_from_interface
from kopt_mcp.evidence.trace import KernelStat, KernelTrace
from kopt_mcp.profilers.ncu_flops import FLOP_METRICS, flop_fields
from kopt_mcp.profilers.ncu_units import nvtx_units

__all__ = ["DRAM_METRICS", "LOG_NAME", "NcuProfiler", "dram_bytes", "parse_ncu_csv"]

LOG_NAME = "ncu.csv"

TIMING_METRICS: tuple[str, ...] = (
    "gpu__time_duration.sum",
    "launch__registers_per_thread",
    "launch__shared_mem_per_block_static",
    "launch__shared_mem_per_block_dynamic",
    "launch__grid_size",
    "launch__block_size",
)
DETAIL_METRICS: tuple[str, ...] = (
    "sm__throughput.avg.pct_of_peak_sustained_elapsed",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    "sm__warps_active.avg.pct_of_peak_sustained_active",
    "launch__occupancy_limit_registers",
    "launch__occupancy_limit_shared_mem",
    "launch__occupancy_limit_warps",
    "launch__occupancy_limit_blocks",
    "launch__waves_per_multiprocessor",
)

# Each field: the raw-page metric name(s) first, then the details-page display name(s).
_TIME = ("gpu__time_duration.sum", "gpu__time_duration.avg", "gpu__time_duration", "Duration")
_REGISTERS = ("launch__registers_per_thread", "Registers Per Thread")
_SMEM_STATIC = ("launch__shared_mem_per_block_static", "Static Shared Memory Per Block")
_SMEM_DYNAMIC = ("launch__shared_mem_per_block_dynamic", "Dynamic Shared Memory Per Block")
_BLOCK = ("launch__block_size", "Block Size")
_GRID = ("launch__grid_size", "Grid Size")
# DRAM traffic and the device's memory interface (issue 38 item 3: speed of light). The device__attribute_*
# and launch__persisting_l2_cache_size columns come with every raw page (recorded on an H200:
# tests/fixtures/ncu/h200_liger_rmsnorm_confirm_best.csv: 6,016 bits, 3,201,000 kHz, 11,796,480 bytes)
DRAM_METRICS: tuple[str, ...] = ("dram__bytes_read.sum", "dram__bytes_write.sum")
_DRAM_READ = ("dram__bytes_read.sum", "DRAM Bytes Read")
_DRAM_WRITE = ("dram__bytes_write.sum", "DRAM Bytes Write")
_PERSISTING_L2 = ("launch__persisting_l2_cache_size",)
_MEM_CLOCK_KHZ = ("device__attribute_memory_clock_rate",)
_BUS_BITS = ("device__attribute_global_memory_bus_width",)
EXTRA_FIELDS: dict[str, tuple[str, ...]] = {
    "sm_throughput_pct": (DETAIL_METRICS[0], "Compute (SM) Throughput", "SM [%]"),
    # "SOL FB" (frame buffer = device memory) is what ncu 2020 called DRAM throughput.
    "dram_throughput_pct": (DETAIL_METRICS[1], "DRAM Throughput", "SOL DRAM", "SOL FB"),
    "achieved_occupancy_pct": (DETAIL_METRICS[2], "Achieved Occupancy"),
    "occupancy_limit_registers": (DETAIL_METRICS[3], "Block Limit Registers"),
    "occupancy_limit_shared_mem": (DETAIL_METRICS[4], "Block Limit Shared Mem"),
    "occupancy_limit_warps": (DETAIL_METRICS[5], "Block Limit Warps"),
    "occupancy_limit_blocks": (DETAIL_METRICS[6], "Block Limit SM"),
    "waves_per_sm": (DETAIL_METRICS[7], "Waves Per SM"),
}

_TO_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
          "s": 1e6, "second": 1e6}
_FLOP_COLUMNS = frozenset(FLOP_METRICS)
_TO_HZ = {"": 1.0, "hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9, "cycle/second": 1.0, "cycle/nsecond": 1e9,
          "cycle/usecond": 1e6}
_TO_BYTES = {"": 1, "b": 1, "byte": 1, "kbyte": 1e3, "mbyte": 1e6, "gbyte": 1e9,
             "kibyte": 1024, "mibyte": 1024**2, "gibyte": 1024**3}
_NO_ROWS_HINT = (
    "ncu wrote no kernel rows: did the benchmark launch GPU kernels? "
    "is ncu allowed to read counters here?"
)
_EXPECTED_WARNING = "unmodified GPU clocks"  # we ask for --clock-control none on purpose


class NcuProfiler:
    """Profile the benchmark with Nsight Compute. `detail` adds throughput/occupancy metrics
    (more replay passes, so slower); `binary` is the ncu executable name or path."""

    name = "ncu"
    per_launch = True  # records each launch's GPU time (the keep metric's paired test)

    def __init__(self, detail: bool = False, binary: str = "ncu") -> None:
        self.detail = detail
        self.binary = binary

    @property
    def metrics(self) -> tuple[str, ...]:
        """The ncu metric names this profiler asks for."""
        return TIMING_METRICS + DETAIL_METRICS if self.detail else TIMING_METRICS

    def available(self) -> bool:
        """True where `binary` resolves on PATH (or is an executable path)."""
        return shutil.which(self.binary) is not None

    def wrap(self, command: str, out_dir: Path) -> str:
        """A `bash -c` command line running the shell `command` under ncu, all processes, clocks
        left alone; ncu's CSV (raw page) goes to `out_dir/ncu.csv`, the benchmark's own stdout
        and stderr are untouched."""
        log = Path(out_dir) / LOG_NAME
        parts = [
            shlex.quote(self.binary), "--clock-control", "none", "--target-processes", "all",
            "--csv", "--page", "raw", "--metrics", ",".join(self.metrics),
            "--log-file", shlex.quote(str(log)), "bash", "-c", shlex.quote(command),
        ]
        return " ".join(parts)

    def parse(self, out_dir: Path) -> KernelTrace:
        """Read `out_dir/ncu.csv` into a KernelTrace (times in us). Raises ProfilerError."""
        return parse_ncu_csv(Path(out_dir) / LOG_NAME)


@dataclass
class _Launch:
    name: str
    metrics: dict[str, tuple[str, str]] = field(default_factory=dict)  # metric -> (unit, value)


def parse_ncu_csv(path: Path, groups: bool = False) -> KernelTrace:
    """Parse an ncu `--csv` log (raw or details page) into kernels grouped by full name.

    Lines before the header row (one starting with "ID") are skipped: ncu's ==PROF== lines and
    any application output. `groups=True` also fills `KernelTrace.groups` (launch groups by
    kernel, grid and block, from the raw page's "Grid Size" / "Block Size" columns, e.g.
    "(1056, 1, 1)"; launch order = ncu's row order) where every timed launch has both columns;
    else `groups` stays None; and `KernelTrace.units` where ncu ran with `--nvtx` inside the injector's
    unit marks (profilers/ncu_units.py). Raises ProfilerError for a missing file, no header, no GPU time
    column, an unknown unit, or a header with no kernel rows.
    """
    path = Path(path)
    if not path.is_file():
        raise ProfilerError(f"{path} does not exist (columns found: none). {_NO_ROWS_HINT}")
    lines = path.read_text(errors="replace").splitlines()
    notes = [ln.strip() for ln in lines if ln.startswith(("==ERROR==", "==WARNING=="))]
    errors = [n for n in notes if n.startswith("==ERROR==")]
    start = next((i for i, ln in enumerate(lines) if ln.startswith(('"ID",', "ID,"))), None)
    if start is None:
        said = f" ncu said: {' | '.join(errors)}." if errors else ""
        raise ProfilerError(
            f"{path}: no ncu CSV header (a row starting with \"ID\") in {len(lines)} lines "
            f"(columns found: none).{said} {_NO_ROWS_HINT}"
        )
    rows = list(csv.reader(lines[start:]))
    header = rows[0]
    details = "Metric Name" in header and "Metric Value" in header
    needed = ("ID", "Kernel Name", "Metric Name", "Metric Value") if details else ("Kernel Name",)
    if any(h not in header for h in needed):
        raise ProfilerError(
            f"{path}: ncu CSV header lacks {', '.join(h for h in needed if h not in header)}; "
            f"columns found: {_listing(header)}. {_NO_ROWS_HINT}"
        )
    launches = (_details_launches if details else _raw_launches)(header, rows[1:])
    if not launches:
        said = "".join(f"{n} " for n in notes if _EXPECTED_WARNING not in n)
        raise ProfilerError(
            f"{path}: the profiled run launched no GPU kernel (ncu CSV header, no kernel rows). "
            f"{said}Is the benchmark running on the GPU?"
        )
    found = list(dict.fromkeys(m for launch in launches for m in launch.metrics))
    if not any(m in found for m in _TIME):
        raise ProfilerError(
            f"{path}: no GPU time column (one of {', '.join(_TIME)}); "
            f"{'metrics' if details else 'columns'} found: {_listing(found)}. {_NO_ROWS_HINT}"
        )
    warnings = [n for n in notes if n.startswith("==WARNING==") and _EXPECTED_WARNING not in n]
    trace = _aggregate(launches, path, warnings)
    if groups:
        trace.groups = _launch_groups(launches, path)
        trace.units = nvtx_units([(x.name, x.metrics) for x in launches],
                                 lambda i: _value(launches[i], _TIME, _TO_US, path))
        if trace.units and any("dram_bytes" in k.extra for k in trace.kernels):
            trace.unit_bytes = nvtx_units([(x.name, x.metrics) for x in launches],
                                          lambda i: dram_bytes(launches[i], path))
    return trace


def _launch_groups(launches: list[_Launch], path: Path) -> list | None:
    """Launch groups (kernel, grid, block) of the timed launches, in ncu's row order; None where a
    timed launch lacks a 3-dimensional "Grid Size" or "Block Size" (the details page has neither)."""
    records = []
    for index, launch in enumerate(launches):
        time_us = _value(launch, _TIME, _TO_US, path)
        if time_us is None:
            continue
        grid, block = (_dims3(launch.metrics.get(col, ("", ""))[1]) for col in ("Grid Size", "Block Size"))
        if grid is None or block is None:
            return None
        records.append((launch.name, grid, block, float(index), time_us, None, None))
    return build_groups(records)


def _dims3(text: str) -> tuple[int, int, int] | None:
    """"(1056, 1, 1)" -> (1056, 1, 1); anything else -> None."""
    text = text.strip()
    if not (text.startswith("(") and text.endswith(")")):
        return None
    try:
        dims = tuple(int(d.replace(",", "").strip()) for d in text[1:-1].split(", "))
    except ValueError:
        return None
    return dims if len(dims) == 3 else None


def _raw_launches(header: list[str], rows: list[list[str]]) -> list[_Launch]:
    """Raw page: one row per launch; the first row after the header holds the units."""
    units = [""] * len(header)
    if rows and rows[0] and not rows[0][0].strip().isdigit():
        units, rows = rows[0] + [""] * (len(header) - len(rows[0])), rows[1:]
    name_at = header.index("Kernel Name")
    launches = []
    for row in rows:
        if len(row) != len(header) or not row[0].strip().isdigit():
            continue  # stray output interleaved with the CSV
        metrics = {h: (units[j], row[j]) for j, h in enumerate(header) if j != name_at}
        launches.append(_Launch(row[name_at], metrics))
    return launches


def _details_launches(header: list[str], rows: list[list[str]]) -> list[_Launch]:
    """Details page: one row per metric; rows with the same (process, ID) are one launch."""
    col = {h: j for j, h in enumerate(header)}
    by_id: dict[tuple[str, str], _Launch] = {}
    for row in rows:
        if len(row) != len(header) or not row[col["ID"]].strip().isdigit():
            continue
        key = (row[col["Process ID"]] if "Process ID" in col else "", row[col["ID"]])
        launch = by_id.setdefault(key, _Launch(row[col["Kernel Name"]]))
        unit = row[col["Metric Unit"]] if "Metric Unit" in col else ""
        launch.metrics[row[col["Metric Name"]]] = (unit, row[col["Metric Value"]])
    return list(by_id.values())


def _listing(names: list[str], limit: int = 40) -> str:
    """Names joined for an error message, cut after `limit` with a count of the rest."""
    shown = ", ".join(names[:limit]) or "none"
    return shown + (f" ... ({len(names) - limit} more)" if len(names) > limit else "")


def _number(text: str) -> float | None:
    """"13,696" -> 13696.0; "(2, 64, 1)" -> 128.0 (product of dims); "n/a" or "" -> None."""
    text = text.strip()
    try:
        if text.startswith("(") and text.endswith(")"):
            product = 1.0
            for dim in text[1:-1].split(", "):
                product *= float(dim.replace(",", ""))
            return product
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _value(launch: _Launch, names: tuple[str, ...], scale: dict[str, float] | None,
           path: Path) -> float | None:
    """The first of `names` this launch has with a number, scaled by its unit. Raises
    ProfilerError on a unit missing from `scale`."""
    for metric in names:
        if metric not in launch.metrics:
            continue
        unit, raw = launch.metrics[metric]
        number = _number(raw)
        if number is None:
            continue
        if scale is None:
            return number
        key = unit.strip().lower().removesuffix("/block")
        if key not in scale:
            raise ProfilerError(
                f"{path}: unknown unit {unit!r} for {metric}; expected one of {sorted(scale)}"
            )
        return number * scale[key]
    return None


def dram_bytes(launch: _Launch, path: Path) -> float | None:
    """One launch's DRAM bytes read + written (bytes), None where ncu measured neither. Raises
    ProfilerError for an unknown unit."""
    read, write = _value(launch, _DRAM_READ, _TO_BYTES, path), _value(launch, _DRAM_WRITE, _TO_BYTES, path)
    return None if read is None and write is None else (read or 0.0) + (write or 0.0)


def _device_fields(launch: _Launch, path: Path) -> dict[str, float]:
    """The launch's DRAM bytes, persisting-L2 size (bytes) and the device's peak DRAM bandwidth (GB/s:
    bus width / 8 x memory clock x 2, double data rate) where ncu wrote them; with FLOP counters, each math
    path's work and peak (profilers/ncu_flops.py `flop_fields`: "flops <path>", "flop_peak <path>")."""
    out: dict[str, float] = {}
    moved = dram_bytes(launch, path)
    if moved is not None:
        out["dram_bytes"] = moved
    persisting = _value(launch, _PERSISTING_L2, _TO_BYTES, path)
    if persisting is not None:
        out["persisting_l2_bytes"] = persisting
    clock, bus = _value(launch, _MEM_CLOCK_KHZ, None, path), _value(launch, _BUS_BITS, None, path)
    if clock and bus:
        out["dram_peak_gbps"] = peak_from_interface(bus, clock)
    if not _FLOP_COLUMNS.isdisjoint(launch.metrics):  # a page without FLOP counters costs one set check per launch
        out.update(flop_fields(lambda m: _flop_value(launch, m, path)))
    return out


def _flop_value(launch: _Launch, metric: str, path: Path) -> float | None:
    """A FLOP counter or peak as written; the SM clock in Hz; None for a clock in a unit not known here
    (the FLOP/s check is then skipped, never the confirmation)."""
    try:
        return _value(launch, (metric,), _TO_HZ if metric.endswith("per_second") else None, path)
    except ProfilerError:
        return None


@dataclass
class _Acc:
    calls: int = 0
    total_us: float = 0.0
    registers: int | None = None
    smem: int | None = None
    block: int | None = None
    grid: int | None = None
    extra: dict[str, list[float]] = field(default_factory=dict)
    durations: list[float] = field(default_factory=list)
    order: list[float] = field(default_factory=list)


def _max(old: int | None, new: float | None) -> int | None:
    if new is None:
        return old
    return int(round(new)) if old is None else max(old, int(round(new)))


def _aggregate(launches: list[_Launch], path: Path, warnings: list[str]) -> KernelTrace:
    """Group launches by full kernel name: calls, total/avg us, share %, max registers /
    shared memory (bytes, static + dynamic) / block and grid size, mean of each extra metric."""
    accs: dict[str, _Acc] = {}
    untimed = 0
    for index, launch in enumerate(launches):  # rows are in launch order
        time_us = _value(launch, _TIME, _TO_US, path)
        if time_us is None:
            untimed += 1
            continue
        acc = accs.setdefault(launch.name, _Acc())
        acc.calls += 1
        acc.total_us += time_us
        acc.durations.append(time_us)
        acc.order.append(float(index))
        acc.registers = _max(acc.registers, _value(launch, _REGISTERS, None, path))
        smem = [_value(launch, names, _TO_BYTES, path) for names in (_SMEM_STATIC, _SMEM_DYNAMIC)]
        if any(s is not None for s in smem):
            acc.smem = _max(acc.smem, sum(s or 0.0 for s in smem))
        acc.block = _max(acc.block, _value(launch, _BLOCK, None, path))
        acc.grid = _max(acc.grid, _value(launch, _GRID, None, path))
        for key, names in EXTRA_FIELDS.items():
            number = _value(launch, names, None, path)
            if number is not None:
                acc.extra.setdefault(key, []).append(number)
        for key, number in _device_fields(launch, path).items():
            acc.extra.setdefault(key, []).append(number)
    if not accs:
        raise ProfilerError(f"{path}: {untimed} kernel rows but none has a GPU time value. "
                            f"{_NO_ROWS_HINT}")
    if untimed:
        warnings = warnings + [f"{untimed} kernel launch(es) had no GPU time value and were skipped"]
    total = sum(a.total_us for a in accs.values())
    kernels = [
        KernelStat(
            name=name, calls=a.calls, total_us=a.total_us, avg_us=a.total_us / a.calls,
            share_pct=100.0 * a.total_us / total if total > 0 else 0.0,
            registers_per_thread=a.registers, shared_mem_per_block_bytes=a.smem,
            block_size=a.block, grid_size=a.grid,
            extra={k: sum(v) / len(v) for k, v in a.extra.items()},
            durations_us=a.durations, launch_order=a.order, median_us=launch_median_us(a.durations),
        )
        for name, a in accs.items()
    ]
    kernels.sort(key=lambda k: (-k.total_us, k.name))
    return KernelTrace(backend="ncu", kernels=kernels, total_gpu_us=total, warnings=warnings)
