"""CUPTI kernel trace backend (NVIDIA): every kernel's GPU duration at small overhead, the default
keep-metric source on NVIDIA where cupti-python is installed.

`wrap` runs the fixed command with `cupti_inject/` first on PYTHONPATH and KOPT_CUPTI_OUT set,
so each Python process of the benchmark records CUPTI CONCURRENT_KERNEL activity and writes
`cupti-<pid>.json` into the run folder (format: `cupti_inject/sitecustomize.py`). `parse` merges
those files into one KernelTrace. The benchmark is not edited. A benchmark that is not Python
(a compiled binary) leaves no file: the error says to use `[profiler] backend = "ncu"`.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.groups import LaunchGroup, launch_median_us, split_runs
from kopt_mcp.evidence.trace import KernelStat, KernelTrace
from kopt_mcp.evidence.units import HarnessUnit

__all__ = ["INJECT_DIR", "CuptiProfiler", "cupti_importable", "keep_injector", "parse_cupti_dir", "pythonpath_problems"]

INJECT_DIR = Path(__file__).parent / "cupti_inject"
COLLECTOR = Path(__file__).parent / "cupti_collect.py"
MANIFEST = "collected-cupti.json"
_NOT_PYTHON_HINT = (
    "the CUPTI trace is injected through Python's sitecustomize, so it records Python benchmark "
    "processes only (not `python -S`/`-I`, not a process ending in os._exit). If a script the command "
    "runs sets PYTHONPATH, keep the caller's value there: PYTHONPATH=../src\"${PYTHONPATH:+:$PYTHONPATH}\" "
    '(kopt-mcp check-config names such lines). For a compiled benchmark set [profiler] backend = "ncu"'
)


def cupti_importable() -> bool:
    """True where `import cupti` would work in this interpreter (checked without importing it)."""
    try:
        return importlib.util.find_spec("cupti") is not None
    except (ImportError, ValueError):
        return False


class CuptiProfiler:
    """Kernel trace through CUPTI activity records, injected into the benchmark's Python processes."""

    name = "cupti"
    per_launch = True  # records each launch's GPU time (the keep metric's paired test)
    #: a profiled run costs about what a plain run does (0.95-1.00x, benchmarks/results/2026-11-23-h100-cupti-accuracy.md)
    #: and reads the same results: every run of a verdict is profiled (referee/profiled.py)
    measures_script = True
    #: stream the launches to the collector (True) or let each process write its file (False)
    stream = True

    def available(self) -> bool:
        """True where cupti-python is importable here (the benchmark's interpreter is checked at run time)."""
        return cupti_importable()

    def wrap(self, command: str, out_dir: Path) -> str:
        """`command` with the injector first on PYTHONPATH (the caller's PYTHONPATH after it) and
        KOPT_CUPTI_OUT=out_dir, as one bash line. cupti-python must be importable by the
        benchmark's own interpreter; where it is not, the run's trace file says so.

        A PYTHONPATH the command sets itself (`PYTHONPATH=../src python b.py`, `export
        PYTHONPATH=...; ...`, `env PYTHONPATH=... python ...`) would drop the injector: each such
        assignment in the command text gets the injector put in front (`keep_injector`). One made
        inside a script the command runs cannot be seen here: `pythonpath_problems` (check-config)
        and the missing-trace error say what to write there.

        Stream mode (the default): the command runs as the child of the collector
        (`cupti_collect.py`, this interpreter), which receives the launches over a socket and writes
        the trace files after the command ended, so the benchmark cannot rewrite them. `stream =
        False` (file mode): each process writes its own file at exit into `out_dir`."""
        inject = shlex.quote(str(INJECT_DIR))
        inner = f'export PYTHONPATH={inject}"${{PYTHONPATH:+:$PYTHONPATH}}"; {keep_injector(command)}'
        if not self.stream:
            return f"export KOPT_CUPTI_OUT={shlex.quote(str(out_dir))}; {inner}"
        return (f"{shlex.quote(sys.executable)} {shlex.quote(str(COLLECTOR))} {shlex.quote(str(out_dir))} -- "
                f"bash -c {shlex.quote(inner)}")

    def parse(self, out_dir: Path) -> KernelTrace:
        """Merge the run's trace files in `out_dir` into one KernelTrace; in stream mode only those
        of the collector's manifest, hash-checked. Raises ProfilerError."""
        return parse_cupti_dir(Path(out_dir), require_collector=self.stream)


#: a PYTHONPATH assignment word: at the start, or after a blank or a shell operator
_ASSIGN = re.compile(r"(?<![^\s;&|(`])PYTHONPATH=")
_KEEP_IDIOM = '${PYTHONPATH:+:$PYTHONPATH}'


def keep_injector(command: str) -> str:
    """`command` with the CUPTI injector's folder put in front of every PYTHONPATH value it assigns
    (`PYTHONPATH=../src python b.py` -> `PYTHONPATH=<injector>:../src python b.py`; an empty
    value becomes the injector alone), so a command that sets its own PYTHONPATH keeps the trace.
    Text that only looks like an assignment (an `echo PYTHONPATH=x` argument) is changed too,
    harmlessly. Never raises."""
    inject = shlex.quote(str(INJECT_DIR))

    def put(m: re.Match) -> str:
        rest = command[m.end():m.end() + 1]
        return f"PYTHONPATH={inject}" + ("" if rest == "" or rest.isspace() or rest in ";&|)" else ":")
    return _ASSIGN.sub(put, command)


def pythonpath_problems(command: str, workdir: Path) -> list[str]:
    """Where the CUPTI injector will be lost: PYTHONPATH assignments that replace the caller's value
    inside shell scripts the command runs (files named in `command` that exist under `workdir` and
    end in .sh or start with a sh/bash shebang). `keep_injector` handles assignments in the command
    itself. Returns one line per problem: file:line, the assignment, and exactly what to write
    instead. Never raises (unreadable files are skipped)."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split()
    out = []
    for word in dict.fromkeys(words):
        path = (Path(workdir) / word) if not Path(word).is_absolute() else Path(word)
        try:
            if not path.is_file() or path.stat().st_size > 1_000_000:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        first = text.split("\n", 1)[0]
        if not (path.suffix == ".sh" or (first.startswith("#!") and ("sh" in first.rsplit("/", 1)[-1]))):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0]
            for m in _ASSIGN.finditer(code):
                value = re.split(r"[\s;&|]", code[m.end():], maxsplit=1)[0]
                if "PYTHONPATH" in value:
                    continue
                out.append(f"{word}:{n}: `{code.strip()}` replaces PYTHONPATH, which drops kopt-mcp's CUPTI "
                           f"trace injector (no GPU time then): write PYTHONPATH={value}\"{_KEEP_IDIOM}\" "
                           "there (keeps the caller's entries), or set [profiler] backend = \"ncu\"")
    return out


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
    merged: dict[str, dict] = {}
    groups: dict[tuple, dict] = {}  # (mangled name, grid, block) -> merged launches
    errors: list[str] = []
    units: list[dict] = []  # harness units of every process, in the order the processes ran
    code: dict[str, set[str]] = {}
    marked = False  # some process wrote a "units" list (format 3): its harness units were looked for
    notes: list[str] = []  # what the injector could not do (units, provenance): diagnostics, not warnings
    docs = []
    for path in files:
        try:
            docs.append((path, json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError) as e:
            raise ProfilerError(f"{path}: not a kopt-mcp CUPTI trace file ({e!r})") from e
    # processes in the order they ran on the GPU, so per-launch sequences line up between runs
    docs.sort(key=lambda pd: (pd[1].get("first_start_ns") or 0) if isinstance(pd[1], dict) else 0)
    for path, doc in docs:
        try:
            kernels = doc["kernels"]
            status, error = doc["status"], doc.get("error")
        except (KeyError, TypeError) as e:
            raise ProfilerError(f"{path}: not a kopt-mcp CUPTI trace file ({e!r})") from e
        if status != "ok":
            errors.append(f"pid {doc.get('pid')}: {error}")
            continue
        try:
            if isinstance(doc.get("units"), list):
                marked = marked or bool(doc["units"])
                units.extend(doc["units"])
            for name, shas in (doc.get("code") or {}).items():
                code.setdefault(name, set()).update(shas)
            notes.extend(f"pid {doc.get('pid')}: {n}" for n in (doc.get("notes") or []))
            for name, k in kernels.items():
                m = merged.setdefault(name, {"calls": 0, "total_ns": 0, "registers_per_thread": None,
                                             "shared_mem_per_block_bytes": None, "block_size": None,
                                             "grid_size": None, "durations": [], "starts": []})
                m["calls"] += int(k["calls"])
                m["total_ns"] += int(k["total_ns"])
                recorded = [_group_of(k, g) for g in k["groups"]] if "groups" in k else [_group_of(k, None)]
                for g in recorded:
                    mg = groups.setdefault((name, g["grid"], g["block"]), {
                        "calls": 0, "total_ns": 0, "regs": None, "smem": None, "durations": [], "starts": []})
                    mg["calls"] += g["calls"]
                    mg["total_ns"] += g["total_ns"]
                    for field, value in (("regs", g["regs"]), ("smem", g["smem"])):
                        if value is not None:
                            mg[field] = max(mg[field] or 0, value)
                    if mg["durations"] is not None and g["durations"] is not None:
                        mg["durations"].extend(g["durations"])
                        mg["starts"].extend(g["starts"])
                    else:
                        mg["durations"] = mg["starts"] = None
                    if m["durations"] is not None and g["durations"] is not None:
                        m["durations"].extend(g["durations"])
                        m["starts"].extend(g["starts"])
                    else:
                        m["durations"] = m["starts"] = None
                for field in ("registers_per_thread", "shared_mem_per_block_bytes", "block_size", "grid_size"):
                    if k.get(field) is not None:
                        m[field] = max(m[field] or 0, int(k[field]))
        except (KeyError, TypeError, ValueError) as e:
            raise ProfilerError(f"{path}: not a kopt-mcp CUPTI trace file ({e!r})") from e
    if errors and not merged:
        raise ProfilerError("the CUPTI trace failed in every process: " + "; ".join(errors[:3]))
    if errors:
        warnings.append(f"{len(errors)} process(es) recorded no CUPTI trace: " + "; ".join(errors[:3]))
    if not merged:
        raise ProfilerError(f"the CUPTI trace in {out_dir} recorded no GPU kernel in {len(files)} Python "
                            "process(es): is the benchmark running on the GPU?")
    names = _demangle(list(merged))
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
    launch_groups = []
    for (n, grid, block), g in groups.items():
        launches = sorted(zip(g["starts"], g["durations"], strict=True)) if g["durations"] else []
        durs = [d / 1e3 for _, d in launches] or None
        launch_groups.append(LaunchGroup(
            kernel=names[n], grid=grid, block=block, registers_per_thread=g["regs"], shared_mem_bytes=g["smem"],
            calls=g["calls"], total_us=g["total_ns"] / 1e3, median_us=launch_median_us(durs),
            first_order=float(launches[0][0]) if launches else None, durations_us=durs,
            launch_starts=[float(t) for t, _ in launches] or None))
    launch_groups = split_runs(launch_groups)
    try:
        harness = [_unit_of(i, u, names) for i, u in enumerate(units)] if marked else None
    except (KeyError, TypeError, ValueError) as e:
        raise ProfilerError(f"{out_dir}: a harness unit of the CUPTI trace is not the injector's JSON ({e!r})") from e
    return KernelTrace(backend="cupti", kernels=stats, total_gpu_us=total_us, warnings=warnings, groups=launch_groups,
                       units=harness, code={names.get(n, n): sorted(s) for n, s in code.items()} or None,
                       notes=notes)


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
