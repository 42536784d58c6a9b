"""Test helpers shipped with the package: a toy kernel repository with exactly controlled metrics.

The toy repository's `kernel.py` declares per-class metric values instead of computing them, so the
rules can be tested on exact numbers with a real git repository, real subprocess runs and real CSV
files. A value may be a list: run k of the benchmark of one kernel.py (same content) reads item k
(the last repeats), which models measurement noise across the server's repeated runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from kopt_mcp.bench.runner import run_command
from kopt_mcp.referee.services import Services

BENCH = '''\
"""Toy fixed benchmark: writes results/bench.csv from kernel.TIMES / kernel.ERRORS."""
import csv, hashlib, os, pathlib, sys, time
sys.path.insert(0, os.getcwd())
k_source = pathlib.Path("kernel.py").read_bytes() if pathlib.Path("kernel.py").exists() else b""
import kernel

# runs are counted per kernel.py content, outside the (disposable) tree the benchmark runs in
count_file = pathlib.Path(RUNS_DIR) / (hashlib.sha256(k_source).hexdigest()[:16] + ".runs")
count_file.parent.mkdir(parents=True, exist_ok=True)
with open(count_file, "ab") as f:  # one byte per run, appended atomically: concurrent runs count right
    f.write(b".")
    f.flush()
    k = f.tell() - 1
os.makedirs("results", exist_ok=True)
if getattr(kernel, "SLEEP_S", 0):
    time.sleep(kernel.SLEEP_S)
if getattr(kernel, "EXIT", 0):
    sys.exit(kernel.EXIT)
if getattr(kernel, "NO_CSV", False):
    sys.exit(0)
with open("results/bench.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["n", "us_per_call", "err_count"])
    for n, t in kernel.TIMES.items():
        v = t[min(k, len(t) - 1)] if isinstance(t, list) else t
        w.writerow([n, v, kernel.ERRORS.get(n, 0)])
print("toy benchmark run", k)
'''

CONFIG = '''\
[benchmark]
command = "python bench.py"
csv = "results/*.csv"
metric = "us_per_call"
correctness_columns = ["err_count"]
config_columns = ["n"]
timeout_s = {timeout_s}

[profiler]
backend = "none"

[gates]
noise_pct = 1.0
gpu_probe = "none"
idle_cpu_pct = {idle_cpu_pct}  # 100: the toy metrics are fixed numbers, no CPU gate
{extra_gates}

[protect]
paths = ["bench.py"]
'''


def kernel_source(times: dict[str, float | list[float]], errors: dict[str, int] | None = None,
                  **flags: object) -> str:
    """Source of the toy `kernel.py` (times in us per class key; flags: SLEEP_S, EXIT, NO_CSV)."""
    lines = [f"TIMES = {json.dumps(times)}", f"ERRORS = {json.dumps(errors or {})}"]
    lines += [f"{k} = {v!r}" for k, v in flags.items()]
    return "\n".join(lines) + "\n"


def toy_runs_dir(repo: Path) -> Path:
    """Where the toy benchmark of the repository at `repo` counts its runs: one counter file per
    kernel.py content, beside the repository (every run happens in a fresh checkout, so a counter
    inside the tree would always read 0)."""
    repo = Path(repo).resolve()
    return repo.parent / f".{repo.name}-toy-runs"


def bench_source(repo: Path) -> str:
    """The toy `bench.py` of the repository at `repo` (it counts runs in `toy_runs_dir(repo)`)."""
    return f"RUNS_DIR = {str(toy_runs_dir(repo))!r}\n" + BENCH


def make_toy_repo(path: Path, times: dict[str, float | list[float]], timeout_s: float = 60,
                  extra_gates: str = "", idle_cpu_pct: float = 100.0) -> Path:
    """Create a committed git repository at `path` with kernel.py, bench.py and kopt.toml
    (`extra_gates`: more `[gates]` lines; `idle_cpu_pct`: the CPU gate, 100 = off).

    A value list in `times` is read item k on run k of the same kernel.py content (the last
    repeats), counted across the whole session in `toy_runs_dir(path)`."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "bench.py").write_text(bench_source(path))
    (path / "kernel.py").write_text(kernel_source(times))
    (path / "kopt.toml").write_text(CONFIG.format(timeout_s=timeout_s, extra_gates=extra_gates,
                                                  idle_cpu_pct=float(idle_cpu_pct)))
    (path / ".gitignore").write_text("results/\n__pycache__/\n")
    env_id = ["-c", "user.name=test", "-c", "user.email=test@localhost"]
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=path, check=True)
    subprocess.run(["git", "add", "-A"], cwd=path, check=True)
    subprocess.run(["git", *env_id, "commit", "-q", "-m", "toy kernel"], cwd=path, check=True)
    return path


def set_kernel(workspace: Path, times: dict[str, float | list[float]], errors: dict[str, int] | None = None,
               **flags: object) -> None:
    """Write a candidate kernel.py into the session's workspace."""
    (Path(workspace) / "kernel.py").write_text(kernel_source(times, errors, **flags))


class FakeClock:
    """A clock for the GPU gate's waiting: `sleep(s)` advances `now` instantly; `slept` lists pauses."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class RecordingRunner:
    """A runner for `Services.run` that runs each command for real (kopt_mcp.bench.runner.run_command)
    and records (command, cwd, env) of every call in `calls`, so a test can see which device a run
    was bound to and how many runs an operation made."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Path, dict[str, str]]] = []

    def __call__(self, command: str, cwd: Path, env: dict[str, str], timeout_s: float, log_path: Path, **kw):
        self.calls.append((command, Path(cwd), dict(env)))
        return run_command(command, cwd, env, timeout_s, log_path, **kw)


def fake_services(clock: FakeClock | None = None, **fields):
    """`Services` for tests: the gate waits on `clock` (a FakeClock, made when None: no real
    sleeping); `fields` replace others (probe, profiler, run, lease_dir)."""
    clock = clock or FakeClock()
    return Services(clock=clock, sleep=clock.sleep, **fields)


#: a Python program that spins one core for `s` seconds (wall clock): `SPIN_LOOP.format(s=2.0)`
SPIN_LOOP = "import time\nt=time.time()+{s}\nwhile time.time()<t: pass"


@contextmanager
def spinning_thread() -> Iterator[None]:
    """A thread of this process spinning while the block runs, stopped at its end: to kopt-mcp's load
    figures, the server's own work (never the benchmark's, never foreign load)."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            pass

    busy = threading.Thread(target=spin, daemon=True)
    busy.start()
    try:
        yield
    finally:
        stop.set()
        busy.join()


class ForeignLoad:
    """Busy loops on `processes` cores that are NOT in this process's tree (started by a shell that
    exits at once, so they are re-parented away): to kopt-mcp's load figures, another job on the
    cores. A context manager: on entry it waits until every loop has used CPU (a loaded machine may
    start them slowly), on exit it kills them. `pids`: the loops' process ids; `seconds`: how long
    each spins at most (a test killed midway leaves nothing running for long)."""

    def __init__(self, processes: int = 2, seconds: float = 300.0) -> None:
        self.processes, self.seconds = processes, seconds
        self.pids: list[int] = []

    def __enter__(self) -> ForeignLoad:
        loop = SPIN_LOOP.format(s=self.seconds)
        starts = " ".join(f'{sys.executable} -c "{loop}" >/dev/null 2>&1 & echo $!;' for _ in range(self.processes))
        out = subprocess.run(["bash", "-c", starts], capture_output=True, text=True, check=True)
        self.pids = [int(x) for x in out.stdout.split()]
        deadline = time.monotonic() + 30
        for pid in self.pids:
            while time.monotonic() < deadline:
                try:
                    if psutil.Process(pid).cpu_times().user >= 0.2:
                        break
                except psutil.NoSuchProcess:
                    break
                time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        procs = []
        for pid in self.pids:
            try:
                p = psutil.Process(pid)
                p.kill()
                procs.append(p)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, timeout=5)
