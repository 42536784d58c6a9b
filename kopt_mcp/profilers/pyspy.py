"""py-spy backend: the hottest Python functions of a benchmark on the CPU (a sampling profile).

On a CPU device there is no kernel and no GPU time; what an agent needs first is where the
benchmark's processes spend their time. py-spy (https://github.com/benfred/py-spy, a sampling
profiler that reads the stacks of a Python process from outside, installed from PyPI as `py-spy`)
runs the benchmark as its child:

    py-spy record --format speedscope --rate 200 --subprocesses --output <out_dir>/pyspy.speedscope.json
        -- bash -c '<record $PWD>; while :; do ( <command> ); <stop on failure, at MAX_RUNS runs or
                    after REPEAT_S s>; done; <record the runs and the exit status>'

A benchmark run shorter than REPEAT_S s is run again under the same py-spy (a 1 s run at 200 Hz
gives ~200 samples, too few to rank lines): the profile sums every run, and says how many
(`CpuProfile.runs`); every share comes with the sample count behind it.

Own, harness, imports: samples whose innermost Python frame is in the repository's own code outside
the protected paths (`[protect] paths`: the benchmark, the reference, the config) are "own"; those in
a protected file, or in a library a protected file called, are the harness's (`harness_pct`,
`harness_functions`), never the hottest own function; those under the import machinery are imports.

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
import posixpath
import re
import shlex
import shutil
import sys
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ValidationError

from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.trace import CpuProfile, FunctionStat, KernelTrace, LineStat

__all__ = [
    "EXIT_FILE",
    "MAX_RUNS",
    "OUTPUT",
    "RATE_HZ",
    "REPEAT_S",
    "RUNS_FILE",
    "PySpyProfiler",
    "is_protected",
    "parse_speedscope",
    "protect_paths",
    "pyspy_error",
    "pyspy_path",
    "too_short_to_sample",
    "work_samples",
]

OUTPUT = "pyspy.speedscope.json"
EXIT_FILE = "pyspy.exit_status"
CWD_FILE = "pyspy.cwd"
RUNS_FILE = "pyspy.runs"
LAST_EXIT = "pyspy.exit.last"  # the run's status, moved to pyspy.exit.<n> after run n
#: a run shorter than this (s) is run again under the same py-spy, until the runs together last this
#: long or MAX_RUNS ran: ~600 samples at RATE_HZ, enough to rank functions and their lines
REPEAT_S = 3.0
MAX_RUNS = 10
LINES_PER_FUNCTION = 5  # a function's hottest lines listed
TOP_LINES = 10  # the profile's hottest own lines listed
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

    def __init__(self, protect: Sequence[str] = ()) -> None:
        self.protect = tuple(protect)

    def scoped(self, protect: Sequence[str]) -> PySpyProfiler:
        """This profiler with the harness paths `protect` (relative to the benchmark's folder,
        `protect_paths`): samples in them are the harness's, not the repository's own."""
        return PySpyProfiler(protect)

    def wrap(self, command: str, out_dir: Path) -> str:
        """`command` under `py-spy record` (module docstring), writing into `out_dir`; a run that ends
        within REPEAT_S s is run again (at most MAX_RUNS runs, stopping at the first that fails; the
        count in RUNS_FILE). Raises ProfilerError when py-spy is not installed."""
        exe = pyspy_path()
        if exe is None:
            raise ProfilerError("py-spy is not installed: pip install py-spy (a kopt-mcp dependency)")
        out = Path(out_dir)
        last, q_out, exit_q = (shlex.quote(str(out / x)) for x in (LAST_EXIT, ".", EXIT_FILE))
        inner = f'printf %s "$PWD" > {shlex.quote(str(out / CWD_FILE))}\n( {command}\n)\nprintf %s "$?" > {last}'
        record = (f"{shlex.quote(exe)} record --format speedscope --rate {RATE_HZ} --subprocesses "
                  f"--output {q_out}/pyspy.$n.speedscope.json -- bash -c {shlex.quote(inner)}")
        # one py-spy per run: py-spy stops sampling once no Python process is left, between two runs (and
        # may end the shell before it records the status, or while: a run without one counts as passed). The
        # first status recorded is the benchmark's (EXIT_FILE); a later one, in pyspy.exit.<n>, only stops repeating
        return (f't0=$(date +%s%N); n=0\nwhile :; do\nn=$((n+1)); rm -f {last}\n{record}\n'
                f'st=$(cat {last} 2>/dev/null); [ -s {last} ] && mv {last} {q_out}/pyspy.exit.$n\n'
                f'[ ! -f {exit_q} ] && [ -f {q_out}/pyspy.exit.$n ] && cp {q_out}/pyspy.exit.$n {exit_q}\n'
                f'if [ "${{st:-0}}" != 0 ] || [ $n -ge {MAX_RUNS} ] || '
                f'[ $(( ($(date +%s%N) - t0) / 1000000 )) -ge {int(REPEAT_S * 1000)} ]; then break; fi\ndone\n'
                f'printf %s "$n" > {shlex.quote(str(out / RUNS_FILE))}')

    def parse(self, out_dir: Path) -> KernelTrace:
        """The sampled functions of the wrapped run. Raises ProfilerError when the benchmark exited
        non-zero or py-spy wrote no readable profile."""
        out = Path(out_dir)
        status = (out / EXIT_FILE).read_text().strip() if (out / EXIT_FILE).exists() else None
        if status not in (None, "0"):
            raise ProfilerError(f"the benchmark exited with status {status} under py-spy (see the log)")
        cwd = (out / CWD_FILE).read_text() if (out / CWD_FILE).exists() else None
        runs_text = (out / RUNS_FILE).read_text().strip() if (out / RUNS_FILE).exists() else "1"
        runs = int(runs_text) if runs_text.isdigit() and int(runs_text) > 0 else 1
        files = sorted(out.glob("pyspy.*.speedscope.json"), key=lambda f: f.name) or [out / OUTPUT]
        profile = parse_speedscope(files, cwd, protect=self.protect, runs=runs)
        warnings = ["py-spy samples where the time goes (Python lines, native calls charged to the line "
                    "that made them), not what limits it: there are no hardware counters on this path"]
        failed = [(k, (out / f"pyspy.exit.{k}").read_text().strip()) for k in range(2, runs + 1)
                  if (out / f"pyspy.exit.{k}").exists()]
        warnings += [f"repeat run {k} exited with status {st} under py-spy: its samples are kept, and repeating stopped"
                     for k, st in failed if st != "0"]
        if runs > 1:
            warnings.append(f"one run lasted under {REPEAT_S:g} s: the benchmark ran {runs} times under py-spy "
                            f"and every figure sums the {profile.samples} samples of all {runs} runs")
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
    """(display path, in the repository): a library file by its package path, a repository file
    relative to the benchmark's folder `cwd`."""
    m = _PACKAGES.search(path) or _STDLIB.search(path)
    if m:
        return path[m.end():], False
    if path.startswith("<"):
        return path, False
    if cwd and os.path.isabs(path):
        return os.path.relpath(path, cwd), True
    return path, True


def is_protected(file: str, protect: Sequence[str]) -> bool:
    """Whether `file` (a repository file as shown: relative to the benchmark's folder) equals or lies
    under one of `protect` (paths relative to the same folder, `protect_paths`)."""
    f = posixpath.normpath(file)
    return any(f == g or f.startswith(g + "/") for g in protect)


def protect_paths(protected: Sequence[str], workdir: str = ".") -> tuple[str, ...]:
    """The `[protect] paths` (repo-relative) relative to the benchmark's folder `workdir` (repo-relative),
    as `parse_speedscope` compares them: 'benchmark/scripts' with workdir 'benchmark' -> 'scripts'."""
    out = {posixpath.relpath(posixpath.normpath(p.strip("/")), posixpath.normpath(workdir or "."))
           for p in protected if p.strip("/")}
    return tuple(sorted(out))


class _Tally:
    """Weights (s) and sample counts per function, per (function, line), per place."""

    def __init__(self) -> None:
        self.self_w: dict[tuple[str, str], float] = defaultdict(float)
        self.total_w: dict[tuple[str, str], float] = defaultdict(float)
        self.self_n: Counter = Counter()
        self.total_n: Counter = Counter()
        self.leaf_lines: dict[tuple[str, str], Counter] = defaultdict(Counter)
        self.stack_lines: dict[tuple[str, str], Counter] = defaultdict(Counter)
        self.where_w: dict[str, float] = defaultdict(float)
        self.where_n: Counter = Counter()


def _place(stack: list[int], frames: list[_Frame], shown: list[tuple[str, bool]], harness: list[bool]) -> str:
    """Where one sample's time went (CpuProfile): import, own, harness or library (a library's time
    is the harness's where the innermost repository frame calling it is a protected file's)."""
    if any(frames[i].file.startswith(_IMPORT) for i in stack):
        return "import"
    leaf = stack[-1]
    if shown[leaf][1]:
        return "harness" if harness[leaf] else "own"
    caller = next((i for i in reversed(stack) if shown[i][1]), None)
    return "harness" if caller is not None and harness[caller] else "library"


def _read(path: Path) -> _Speedscope:
    """One speedscope file. Raises ProfilerError for a missing or unreadable file."""
    try:
        return _Speedscope.model_validate(json.loads(Path(path).read_text(encoding="utf-8")))
    except FileNotFoundError as e:
        raise ProfilerError(f"py-spy wrote no profile ({Path(path).name}): see its error in the log") from e
    except (OSError, ValueError, ValidationError) as e:
        raise ProfilerError(f"{Path(path).name} is not a py-spy speedscope profile: {str(e)[:300]}") from e


def parse_speedscope(path: Path | Sequence[Path], cwd: str | None = None, top: int = 200,
                     protect: Sequence[str] = (), runs: int = 1) -> CpuProfile:
    """A CpuProfile from py-spy speedscope files (module docstring; one per run, summed): per function
    (name and file) its self and total time and samples over every process and thread, the `top`
    hottest by self time first (the protected files' apart, in `harness_functions`), their hottest
    lines, and where the samples' innermost Python frame lay. `cwd`: the benchmark's folder (files
    under it are the repository's); `protect`: paths relative to it that are the harness
    (`protect_paths`); `runs`: how many runs of the benchmark the files hold. Raises ProfilerError
    for a missing or unreadable file."""
    t = _Tally()
    samples, weight_sum, repo_files = 0, 0.0, set()
    for doc in [_read(f) for f in ([path] if isinstance(path, (str, Path)) else path)]:
        frames = doc.shared.frames
        python = [bool(f.file) and not f.name.startswith("process ") for f in frames]
        shown = [_short(f.file, cwd) if py else ("", False) for f, py in zip(frames, python)]
        harness = [s[1] and is_protected(s[0], protect) for s in shown]
        repo_files |= {s[0] for s, py in zip(shown, python) if py and s[1]}
        for prof in doc.profiles:
            if prof.type != "sampled" or prof.unit != "seconds" or len(prof.weights) != len(prof.samples):
                raise ProfilerError(f"unexpected py-spy profile: type {prof.type!r}, unit {prof.unit!r}, "
                                    f"{len(prof.samples)} samples, {len(prof.weights)} weights")
            for stack, w in zip(prof.samples, prof.weights):
                if any(i < 0 or i >= len(frames) for i in stack):
                    raise ProfilerError("py-spy profile names a frame it does not list")
                samples, weight_sum = samples + 1, weight_sum + w
                _count(t, [i for i in stack if python[i]], w, frames, shown, harness)
    return _profile(t, samples, weight_sum, top, runs, repo_files, set(protect))


def _count(t: _Tally, py_stack: list[int], w: float, frames: list[_Frame], shown: list[tuple[str, bool]],
           harness: list[bool]) -> None:
    """Add one sample (its Python frames `py_stack`, outermost first, weight `w` s) to `t`."""
    if not py_stack:
        t.where_w["none"] += w
        t.where_n["none"] += 1
        return
    leaf = py_stack[-1]
    key = (frames[leaf].name, shown[leaf][0])
    t.self_w[key] += w
    t.self_n[key] += 1
    t.leaf_lines[key][frames[leaf].line or 0] += 1
    for k in {(frames[i].name, shown[i][0]) for i in py_stack}:
        t.total_w[k] += w
        t.total_n[k] += 1
    for i in py_stack:
        t.stack_lines[(frames[i].name, shown[i][0])][frames[i].line or 0] += 1
    place = _place(py_stack, frames, shown, harness)
    t.where_w[place] += w
    t.where_n[place] += 1


def _profile(t: _Tally, samples: int, weight_sum: float, top: int, runs: int, repo_files: set[str],
             protect: set[str]) -> CpuProfile:
    """The CpuProfile of a tally (`parse_speedscope`)."""
    def pct(w: float) -> float:
        return round(100.0 * w / weight_sum, 2) if weight_sum else 0.0

    def pct_n(n: int) -> float:
        return round(100.0 * n / samples, 2) if samples else 0.0

    def lines(key: tuple[str, str]) -> list[LineStat]:
        return [LineStat(file=key[1], line=ln, function=key[0], samples=n, pct=pct_n(n))
                for ln, n in t.leaf_lines[key].most_common(LINES_PER_FUNCTION)]

    def stat(key: tuple[str, str], w: float) -> FunctionStat:
        name, file = key
        in_repo, guarded = file in repo_files, file in repo_files and is_protected(file, tuple(protect))
        hottest = (t.leaf_lines.get(key) or t.stack_lines[key]).most_common(1)[0][0]
        return FunctionStat(function=name, file=file, line=hottest, own=in_repo and not guarded, harness=guarded,
                            self_ms=round(t.self_w.get(key, 0.0) * 1e3, 3), total_ms=round(w * 1e3, 3),
                            self_pct=pct(t.self_w.get(key, 0.0)), total_pct=pct(w),
                            self_samples=t.self_n[key], total_samples=t.total_n[key], lines=lines(key))

    stats = [stat(k, w) for k, w in t.total_w.items()]
    stats.sort(key=lambda s: (-s.self_ms, -s.total_ms, s.function))
    own_lines = sorted((ln for s in stats if s.own for ln in _all_lines(t, s, pct_n)),
                       key=lambda ln: (-ln.samples, ln.file, ln.line))
    rate = (samples / weight_sum) if weight_sum else 0.0
    n = t.where_n
    return CpuProfile(functions=[s for s in stats if not s.harness][:top],
                      harness_functions=[s for s in stats if s.harness][:top], lines=own_lines[:TOP_LINES],
                      samples=samples, rate_hz=round(rate, 1), sampled_ms=round(weight_sum * 1e3, 3), runs=runs,
                      own_pct=pct(t.where_w["own"]), library_pct=pct(t.where_w["library"]),
                      import_pct=pct(t.where_w["import"]), no_python_pct=pct(t.where_w["none"]),
                      harness_pct=pct(t.where_w["harness"]), own_samples=n["own"], library_samples=n["library"],
                      import_samples=n["import"], harness_samples=n["harness"], no_python_samples=n["none"])


def _all_lines(t: _Tally, s: FunctionStat, pct_n) -> list[LineStat]:
    """Every line of function `s` with self samples."""
    return [LineStat(file=s.file, line=ln, function=s.function, samples=c, pct=pct_n(c))
            for ln, c in t.leaf_lines[(s.function, s.file)].items()]
