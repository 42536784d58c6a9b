"""The CUPTI trace files of one run, parsed: the collector's manifest, then each process's
`cupti-<pid>.json` (format: `cupti_inject/sitecustomize.py`) read one record kind at a time (its
header, kernels and their launch groups, harness units, compiled code, notes), merged over the
processes into one KernelTrace."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.groups import LaunchGroup, launch_median_us, split_runs
from kopt_mcp.evidence.trace import KernelStat, KernelTrace
from kopt_mcp.evidence.units import HarnessUnit

MANIFEST = "collected-cupti.json"
_NOT_PYTHON_HINT = (
    "the CUPTI trace is injected through Python's sitecustomize, so it records Python benchmark "
    "processes only (not `python -S`/`-I`, not a process ending in os._exit). If a script the command "
    "runs sets PYTHONPATH, keep the caller's value there: PYTHONPATH=../src\"${PYTHONPATH:+:$PYTHONPATH}\" "
    '(kopt-mcp check-config names such lines). For a compiled benchmark set [profiler] backend = "ncu"'
)


def _collected_files(out_dir: Path, require: bool) -> tuple[list[Path] | None, list[str]]:
    """The trace files the collector wrote (None: no manifest and none required), and warnings.
    Raises ProfilerError for a missing manifest when required, or a file changed after writing."""
    manifest = out_dir / MANIFEST
    if not manifest.exists():
        if require:
            raise ProfilerError(
                f"no CUPTI collector manifest ({MANIFEST}) in {out_dir}: the profiled command did not run under "
                "kopt-mcp's collector, it was killed before the collector wrote the trace, or the folder was "
                f"changed. Run it again; {_NOT_PYTHON_HINT}")
        return None, []
    try:
        listed = json.loads(manifest.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ProfilerError(f"{manifest}: not a kopt-mcp CUPTI collector manifest ({e!r})") from e
    files = []
    for name, digest in listed.items():
        path = out_dir / name
        try:
            data = path.read_bytes()
        except OSError as e:
            raise ProfilerError(f"{path}: the collector's trace file is gone ({e!r}): not used") from e
        if hashlib.sha256(data).hexdigest() != digest:
            raise ProfilerError(f"{path} changed after the CUPTI collector wrote it (a process that outlived the "
                                "benchmark command, or code that rewrites result files): the trace is not used")
        files.append(path)
    stray = sorted(p.name for p in out_dir.glob("cupti-*.json") if p.name not in listed)
    warnings = [(f"ignored {len(stray)} CUPTI trace file(s) the collector did not write ({', '.join(stray[:3])}): "
                 "written by code in the benchmark")] if stray else []
    return files, warnings


def parse_cupti_dir(out_dir: Path, require_collector: bool = False) -> KernelTrace:
    """Merge the per-process CUPTI trace files of one run (times in us, hottest first).

    Files: those listed in the collector's manifest (`collected-cupti.json`, hash-checked; other
    `cupti-*.json` files are ignored with a warning) where it exists, required with
    `require_collector`; else every `cupti-*.json` (file mode, recorded fixtures).

    Raises ProfilerError when no process wrote a file, when a process reports a CUPTI error
    (cupti-python missing for its interpreter, tracing refused), or when a file is not the
    injector's JSON. Kernels of several processes with the same name are summed.

    Launch groups (KernelTrace.groups, per kernel and grid/block shape): from format-2 files'
    "groups"; a format-1 file (per-name durations, no shapes) gives one group per name with the
    shape unknown; a kernel of several processes is one group per shape.
    """
    collected, warnings = _collected_files(out_dir, require_collector)
    files = collected if collected is not None else list(out_dir.glob("cupti-*.json"))
    if not files:
        raise ProfilerError(f"no CUPTI trace file (cupti-<pid>.json) in {out_dir}: {_NOT_PYTHON_HINT}")
    run = _Merged()
    for path, doc in _read_docs(files):
        _merge_process(run, path, doc)
    if run.errors and not run.kernels:
        raise ProfilerError("the CUPTI trace failed in every process: " + "; ".join(run.errors[:3]))
    if run.errors:
        warnings.append(f"{len(run.errors)} process(es) recorded no CUPTI trace: " + "; ".join(run.errors[:3]))
    if not run.kernels:
        raise ProfilerError(f"the CUPTI trace in {out_dir} recorded no GPU kernel in {len(files)} Python "
                            "process(es): is the benchmark running on the GPU?")
    names = _demangle(list(run.kernels))
    stats, total_us = _kernel_stats(run.kernels, names)
    try:
        harness = [_unit_of(i, u, names) for i, u in enumerate(run.units)] if run.marked else None
    except (KeyError, TypeError, ValueError) as e:
        raise ProfilerError(f"{out_dir}: a harness unit of the CUPTI trace is not the injector's JSON ({e!r})") from e
    return KernelTrace(backend="cupti", kernels=stats, total_gpu_us=total_us, warnings=warnings,
                       groups=_launch_groups(run.groups, names), units=harness,
                       code={names.get(n, n): sorted(s) for n, s in run.code.items()} or None, notes=run.notes)


@dataclass
class _Merged:
    """The records of every process so far (ns): kernels by mangled name, launch groups by
    (mangled name, grid, block), harness units in the order the processes ran, compiled code per
    kernel, the failed processes' errors, the injector's notes (diagnostics, not warnings);
    `marked`: some process wrote a "units" list (format 3): its harness units were looked for."""

    kernels: dict[str, dict] = field(default_factory=dict)
    groups: dict[tuple, dict] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    units: list[dict] = field(default_factory=list)
    code: dict[str, set[str]] = field(default_factory=dict)
    marked: bool = False
    notes: list[str] = field(default_factory=list)


def _read_docs(files: list[Path]) -> list[tuple[Path, object]]:
    """Each file's JSON, the processes in the order they ran on the GPU (so per-launch sequences line
    up between runs). Raises ProfilerError for a file that is not JSON."""
    docs = []
    for path in files:
        try:
            docs.append((path, json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError) as e:
            raise ProfilerError(f"{path}: not a kopt-mcp CUPTI trace file ({e!r})") from e
    docs.sort(key=lambda pd: (pd[1].get("first_start_ns") or 0) if isinstance(pd[1], dict) else 0)
    return docs


def _merge_process(run: _Merged, path: Path, doc) -> None:
    """One process's file into `run`: its header (a failed process adds its error only), then each
    record kind. Raises ProfilerError for a record that is not the injector's JSON."""
    try:
        kernels = doc["kernels"]
        status, error = doc["status"], doc.get("error")
    except (KeyError, TypeError) as e:
        raise ProfilerError(f"{path}: not a kopt-mcp CUPTI trace file ({e!r})") from e
    if status != "ok":
        run.errors.append(f"pid {doc.get('pid')}: {error}")
        return
    try:
        if isinstance(doc.get("units"), list):
            run.marked = run.marked or bool(doc["units"])
            run.units.extend(doc["units"])
        for name, shas in (doc.get("code") or {}).items():
            run.code.setdefault(name, set()).update(shas)
        run.notes.extend(f"pid {doc.get('pid')}: {n}" for n in (doc.get("notes") or []))
        for name, k in kernels.items():
            _merge_kernel(run, name, k)
    except (KeyError, TypeError, ValueError) as e:
        raise ProfilerError(f"{path}: not a kopt-mcp CUPTI trace file ({e!r})") from e


def _merge_kernel(run: _Merged, name: str, k: dict) -> None:
    """One kernel record (format 2: with its launch groups; format 1: per-name durations, one group
    of unknown shape) added to the kernel's totals and to its groups. A kernel or group some process
    recorded without per-launch durations keeps none. Raises KeyError/TypeError/ValueError."""
    m = run.kernels.setdefault(name, {"calls": 0, "total_ns": 0, "registers_per_thread": None,
                                      "shared_mem_per_block_bytes": None, "block_size": None,
                                      "grid_size": None, "durations": [], "starts": []})
    m["calls"] += int(k["calls"])
    m["total_ns"] += int(k["total_ns"])
    recorded = [_group_of(k, g) for g in k["groups"]] if "groups" in k else [_group_of(k, None)]
    for g in recorded:
        mg = run.groups.setdefault((name, g["grid"], g["block"]), {
            "calls": 0, "total_ns": 0, "regs": None, "smem": None, "durations": [], "starts": []})
        mg["calls"] += g["calls"]
        mg["total_ns"] += g["total_ns"]
        for fld, value in (("regs", g["regs"]), ("smem", g["smem"])):
            if value is not None:
                mg[fld] = max(mg[fld] or 0, value)
        for into in (mg, m):
            if into["durations"] is not None and g["durations"] is not None:
                into["durations"].extend(g["durations"])
                into["starts"].extend(g["starts"])
            else:
                into["durations"] = into["starts"] = None
    for fld in ("registers_per_thread", "shared_mem_per_block_bytes", "block_size", "grid_size"):
        if k.get(fld) is not None:
            m[fld] = max(m[fld] or 0, int(k[fld]))


def _kernel_stats(merged: dict[str, dict], names: dict[str, str]) -> tuple[list[KernelStat], float]:
    """The merged kernels as KernelStats (us, demangled, hottest first) and the total GPU time (us)."""
    total_us = sum(m["total_ns"] for m in merged.values()) / 1e3
    stats = []
    for n, m in merged.items():
        durations = [d / 1e3 for d in m["durations"]] if m["durations"] else None
        stats.append(KernelStat(
            name=names[n], calls=m["calls"], total_us=m["total_ns"] / 1e3, avg_us=m["total_ns"] / 1e3 / m["calls"],
            share_pct=100.0 * m["total_ns"] / 1e3 / total_us if total_us > 0 else 0.0,
            registers_per_thread=m["registers_per_thread"], shared_mem_per_block_bytes=m["shared_mem_per_block_bytes"],
            block_size=m["block_size"], grid_size=m["grid_size"], durations_us=durations,
            launch_order=[float(t) for t in m["starts"]] if durations else None,
            median_us=launch_median_us(durations)))
    stats.sort(key=lambda k: (-k.total_us, k.name))
    return stats, total_us


def _launch_groups(groups: dict[tuple, dict], names: dict[str, str]) -> list[LaunchGroup]:
    """The merged launch groups as LaunchGroups (us, demangled, launches in start order), split into
    runs (evidence.groups.split_runs)."""
    launch_groups = []
    for (n, grid, block), g in groups.items():
        launches = sorted(zip(g["starts"], g["durations"], strict=True)) if g["durations"] else []
        durs = [d / 1e3 for _, d in launches] or None
        launch_groups.append(LaunchGroup(
            kernel=names[n], grid=grid, block=block, registers_per_thread=g["regs"], shared_mem_bytes=g["smem"],
            calls=g["calls"], total_us=g["total_ns"] / 1e3, median_us=launch_median_us(durs),
            first_order=float(launches[0][0]) if launches else None, durations_us=durs,
            launch_starts=[float(t) for t, _ in launches] or None))
    return split_runs(launch_groups)


def _unit_of(index: int, u: dict, names: dict[str, str]) -> HarnessUnit:
    """One recorded harness unit (kopt_cupti_trace.Trace.units_doc) as a HarnessUnit (us, demangled
    names). Raises KeyError/TypeError/ValueError for a malformed entry."""
    per, counts = {}, {}
    for name, k in u["kernels"].items():
        invs = [int(i) for i in k["inv"]]
        per[names.get(name, name)] = dict(zip(invs, (int(ns) / 1e3 for ns in k["ns"]), strict=True))
        counts[names.get(name, name)] = dict(zip(invs, (int(n) for n in k["n"]), strict=True))
    return HarnessUnit(index=index, harness=str(u.get("harness") or "unknown"), label=str(u.get("label") or ""),
                       invocations=int(u.get("invocations") or 0),
                       weights={int(i): int(w) for i, w in (u.get("weights") or {}).items()},
                       per_invocation=per, launches=counts, l2=u.get("l2") or None,
                       between_us={names.get(n, n): int(c[0]) / 1e3 for n, c in (u.get("between") or {}).items()},
                       between_launches={names.get(n, n): int(c[1]) for n, c in (u.get("between") or {}).items()})


def _group_of(kernel: dict, group: dict | None) -> dict:
    """One recorded launch group as plain numbers (ns); `group` None: a format-1 kernel entry
    (per-name durations, shape unknown) as one group. Raises KeyError/TypeError/ValueError for a
    malformed entry (reported by the caller as not the injector's JSON)."""
    src = kernel if group is None else group

    def dims(v):
        return None if v is None else tuple(int(x) for x in v)

    has = "durations_ns" in src and "starts_ns" in src
    return {"grid": None if group is None else dims(group.get("grid")),
            "block": None if group is None else dims(group.get("block")),
            "calls": int(src["calls"]), "total_ns": int(src["total_ns"]),
            "regs": src.get("registers_per_thread"),
            "smem": src.get("shared_mem_bytes" if group is not None else "shared_mem_per_block_bytes"),
            "durations": [int(d) for d in src["durations_ns"]] if has else None,
            "starts": [int(t) for t in src["starts_ns"]] if has else None}


def _demangle(names: list[str]) -> dict[str, str]:
    """Itanium-mangled names (`_Z...`) demangled with binutils' c++filt where it is on PATH;
    other names (Triton's plain kernel names) and any failure leave the name as it was."""
    out = {n: n for n in names}
    mangled = [n for n in names if n.startswith("_Z") and "\n" not in n]
    tool = shutil.which("c++filt")
    if not mangled or tool is None:
        return out
    try:
        done = subprocess.run([tool], input="\n".join(mangled) + "\n", capture_output=True, text=True,
                              timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return out
    lines = done.stdout.splitlines()
    if len(lines) == len(mangled):
        out.update(zip(mangled, lines))
    return out
