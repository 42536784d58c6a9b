"""py-spy backend: the hottest Python functions of a benchmark on the CPU (a sampling profile).

On a CPU device there is no kernel and no GPU time; what an agent needs first is where the
benchmark's processes spend their time. py-spy (https://github.com/benfred/py-spy, a sampling
profiler that reads the stacks of a Python process from outside, installed from PyPI as `py-spy`)
runs the benchmark as its child:

    py-spy record --format speedscope --rate 200 --subprocesses --output <out_dir>/pyspy.speedscope.json
        -- bash -c '<record $PWD>; ( <command> ); <record the exit status>'

Flags as `py-spy record --help` (0.4.3) documents them: `--format speedscope` (a JSON file,
schema https://www.speedscope.app/file-format-schema.json: `shared.frames` = {name, file, line},
`profiles` = one "sampled" profile per process and thread whose `samples` list each sample's stack
as frame indices from the outermost to the innermost frame, `weights` in `unit` "seconds"),
`--subprocesses` (the Python processes the shell starts), `--rate` (samples per second). py-spy
exits 0 whatever the benchmark's exit status, so the shell records that status beside the output.
Without `--native`, the innermost frame of a sample is a Python line (time in a numpy call is
charged to the line that made it): the profile says where the time goes, not what limits it.

A sample's stack also holds one pseudo-frame per process ("process 123:\"python bench.py\"", empty
file); those are not functions. py-spy reads another process's memory (process_vm_readv), which a
parent may do to its own children unprivileged under Yama ptrace_scope 0 or 1; on a host that
forbids it (ptrace_scope 2/3, a seccomp profile without process_vm_readv) py-spy's run fails and
kernel_trace_analysis says so and what to do instead.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from collections import Counter, defaultdict
from pathlib import Path

from pydantic import BaseModel, ValidationError

from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.trace import CpuProfile, FunctionStat, KernelTrace

__all__ = ["EXIT_FILE", "OUTPUT", "PySpyProfiler", "RATE_HZ", "parse_speedscope", "pyspy_error", "pyspy_path"]

OUTPUT = "pyspy.speedscope.json"
EXIT_FILE = "pyspy.exit_status"
CWD_FILE = "pyspy.cwd"
RATE_HZ = 200  # samples per second: 1000 samples in a 5 s benchmark; py-spy's default is 100
_PACKAGES = re.compile(r"/(?:site|dist)-packages/")
_STDLIB = re.compile(r"/lib/python3\.\d+/")
_IMPORT = "<frozen importlib"


def pyspy_path() -> str | None:
    """The py-spy executable: on PATH, else beside this Python (the venv's bin/, where pip puts it)."""
    found = shutil.which("py-spy")
    if found:
        return found
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def pyspy_error(log: Path) -> str | None:
    """py-spy's own error line in a run's log ("Error: No python processes found in process 1 or any of
    its subprocesses"), without its stack backtrace; None where the log has none or is unreadable."""
    try:
        text = Path(log).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return next((ln.strip() for ln in text.splitlines() if ln.startswith("Error: ")), None)


class PySpyProfiler:
    """A Profiler (profilers.base) for the CPU: kernel_trace_analysis's report, never the keep
    metric (`per_launch` False: no kernel times). `parse` returns a trace without kernels whose
    `cpu` holds the sampled functions."""

    name = "py-spy"
    per_launch = False

    def available(self) -> bool:
        """True where the py-spy executable is found (`pyspy_path`)."""
        return pyspy_path() is not None

    def wrap(self, command: str, out_dir: Path) -> str:
        """`command` under `py-spy record` (module docstring), writing into `out_dir`. Raises
        ProfilerError when py-spy is not installed."""
        exe = pyspy_path()
        if exe is None:
            raise ProfilerError("py-spy is not installed: pip install py-spy (a kopt-mcp dependency)")
        out = Path(out_dir)
        inner = (f'printf %s "$PWD" > {shlex.quote(str(out / CWD_FILE))}\n( {command}\n)\n'
                 f'printf %s "$?" > {shlex.quote(str(out / EXIT_FILE))}')
        return (f"{shlex.quote(exe)} record --format speedscope --rate {RATE_HZ} --subprocesses "
                f"--output {shlex.quote(str(out / OUTPUT))} -- bash -c {shlex.quote(inner)}")

    def parse(self, out_dir: Path) -> KernelTrace:
        """The sampled functions of the wrapped run. Raises ProfilerError when the benchmark exited
        non-zero or py-spy wrote no readable profile."""
        out = Path(out_dir)
        status = (out / EXIT_FILE).read_text().strip() if (out / EXIT_FILE).exists() else None
        if status not in (None, "0"):
            raise ProfilerError(f"the benchmark exited with status {status} under py-spy (see the log)")
        cwd = (out / CWD_FILE).read_text() if (out / CWD_FILE).exists() else None
        profile = parse_speedscope(out / OUTPUT, cwd)
        warnings = ["py-spy samples where the time goes (Python lines, native calls charged to the line "
                    "that made them), not what limits it: there are no hardware counters on this path"]
        if status is None:
            warnings.append("the benchmark's exit status was not recorded (the command left its shell early)")
        return KernelTrace(backend=self.name, kernels=[], total_gpu_us=0.0, warnings=warnings, cpu=profile)


#: fewer samples than this in the benchmark's work (25 ms at RATE_HZ) say nothing about where its time
#: goes: one or two samples of a few-ms run land wherever the run happened to be
MIN_WORK_SAMPLES = 5


def work_samples(profile: CpuProfile) -> int:
    """How many samples of a sampled run fell in the benchmark's work: an innermost Python frame in
    the repository's own code (also in the body of an own module being imported) or in a library
    outside an import. Samples in the import machinery, or with no Python frame (interpreter start
    and exit, a native call, a wait), are not work."""

    own_leaf_pct = sum(f.self_pct for f in profile.functions if f.own)
    return round((max(own_leaf_pct, profile.own_pct) + profile.library_pct) / 100.0 * profile.samples)


def too_short_to_sample(profile: CpuProfile) -> bool:
    """True when a sampled run holds fewer than MIN_WORK_SAMPLES samples of the benchmark's work
    (`work_samples`): it ended, or only waited, before py-spy could see where its time goes (a toy of
    a few ms on a slow machine, whose samples are interpreter start-up and imports)."""

    return work_samples(profile) < MIN_WORK_SAMPLES


class _Frame(BaseModel):
    name: str
    file: str = ""
    line: int | None = None


class _Shared(BaseModel):
    frames: list[_Frame]


class _Profile(BaseModel):
    type: str
    unit: str = "seconds"
    samples: list[list[int]] = []
    weights: list[float] = []


class _Speedscope(BaseModel):
    shared: _Shared
    profiles: list[_Profile]


def _short(path: str, cwd: str | None) -> tuple[str, bool]:
    """(display path, own): a library file by its package path, a repository file relative to the
    benchmark's folder `cwd`."""
    m = _PACKAGES.search(path) or _STDLIB.search(path)
    if m:
        return path[m.end():], False
    if path.startswith("<"):
        return path, False
    if cwd and os.path.isabs(path):
        return os.path.relpath(path, cwd), True
    return path, True


def parse_speedscope(path: Path, cwd: str | None = None, top: int = 200) -> CpuProfile:
    """A CpuProfile from a py-spy speedscope file (module docstring): per function (name and file)
    its self and total time over every process and thread, the `top` hottest by self time first,
    and where the samples' innermost Python frame lay. `cwd`: the benchmark's folder (files under
    it are the repository's own). Raises ProfilerError for a missing or unreadable file."""
    try:
        doc = _Speedscope.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
    except FileNotFoundError as e:
        raise ProfilerError(f"py-spy wrote no profile ({Path(path).name}): see its error in the log") from e
    except (OSError, ValueError, ValidationError) as e:
        raise ProfilerError(f"{Path(path).name} is not a py-spy speedscope profile: {str(e)[:300]}") from e
    frames = doc.shared.frames
    python = [bool(f.file) and not f.name.startswith("process ") for f in frames]
    shown = [_short(f.file, cwd) if py else ("", False) for f, py in zip(frames, python)]
    self_w: dict[tuple[str, str], float] = defaultdict(float)
    total_w: dict[tuple[str, str], float] = defaultdict(float)
    leaf_lines: dict[tuple[str, str], Counter] = defaultdict(Counter)
    stack_lines: dict[tuple[str, str], Counter] = defaultdict(Counter)
    where: dict[str, float] = defaultdict(float)
    samples, weight_sum = 0, 0.0
    for prof in doc.profiles:
        if prof.type != "sampled" or prof.unit != "seconds" or len(prof.weights) != len(prof.samples):
            raise ProfilerError(f"unexpected py-spy profile: type {prof.type!r}, unit {prof.unit!r}, "
                                f"{len(prof.samples)} samples, {len(prof.weights)} weights")
        for stack, w in zip(prof.samples, prof.weights):
            if any(i < 0 or i >= len(frames) for i in stack):
                raise ProfilerError("py-spy profile names a frame it does not list")
            samples, weight_sum = samples + 1, weight_sum + w
            py_stack = [i for i in stack if python[i]]
            if not py_stack:
                where["none"] += w
                continue
            leaf = py_stack[-1]
            key = (frames[leaf].name, shown[leaf][0])
            self_w[key] += w
            leaf_lines[key][frames[leaf].line or 0] += w
            for k in {(frames[i].name, shown[i][0]) for i in py_stack}:
                total_w[k] += w
            for i in py_stack:
                stack_lines[(frames[i].name, shown[i][0])][frames[i].line or 0] += w
            imported = any(frames[i].file.startswith(_IMPORT) for i in py_stack)
            where["import" if imported else "own" if shown[leaf][1] else "library"] += w
    own_files = {s[0] for s, py in zip(shown, python) if py and s[1]}

    def pct(w: float) -> float:
        return round(100.0 * w / weight_sum, 2) if weight_sum else 0.0

    def hottest_line(key: tuple[str, str]) -> int:
        return (leaf_lines.get(key) or stack_lines[key]).most_common(1)[0][0]

    stats = [FunctionStat(function=name, file=file, line=hottest_line((name, file)),
                          own=file in own_files, self_ms=round(self_w.get((name, file), 0.0) * 1e3, 3),
                          total_ms=round(w * 1e3, 3), self_pct=pct(self_w.get((name, file), 0.0)),
                          total_pct=pct(w))
             for (name, file), w in total_w.items()]
    stats.sort(key=lambda s: (-s.self_ms, -s.total_ms, s.function))
    rate = (samples / weight_sum) if weight_sum else 0.0
    return CpuProfile(functions=stats[:top], samples=samples, rate_hz=round(rate, 1),
                      sampled_ms=round(weight_sum * 1e3, 3), own_pct=pct(where["own"]),
                      library_pct=pct(where["library"]), import_pct=pct(where["import"]),
                      no_python_pct=pct(where["none"]))
