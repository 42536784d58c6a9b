"""A CUPTI profiler for tests without a GPU: it runs the toy benchmark as it is, then writes the
recorded H100 CUPTI trace (fixtures/cupti/h100_torch_matmul/cupti-438.json) where the injector
would, with the target kernel's GPU time set by the profiled tree's kernel.py:

- GPU_US: the sgemm kernel's total GPU time (us) over the run; a list gives profiled run k of that
  kernel.py (same content) item k (the last repeats), counted in `runs_dir` (every run happens in
  a fresh checkout), so BEST's successive profiles can differ exactly;
- CALLS: its launch count (default: the recording's 20); a list: per profiled run, as GPU_US;
- KERNEL_NAME: a new name for it (a compiler rename);
- PROFILE_FAIL_AT: the profiled run k that exits 3 instead (a profiler crash).

Only numbers and the name are changed; the recorded format-1 file gets the injector's format-2
launch groups (one shape per kernel, every launch at its mean time: `_add_groups`).
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from kopt_mcp.profilers.cupti import CuptiProfiler

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "cupti" / "h100_torch_matmul" / "cupti-438.json"
SGEMM_PREFIX = "_ZN7cutlass7Kernel2I43cutlass_80_simt_sgemm"


class ReplayCupti(CuptiProfiler):
    """CuptiProfiler whose wrap replays the recorded trace (see the module docstring); file mode
    (it writes the trace file itself, no collector)."""

    stream = False
    #: these tests cover the screen-then-profile flow (ncu's); tests/referee/test_profiled.py the other
    measures_script = False
    #: the script the wrapped command runs after the benchmark to write the trace
    script = __file__

    def __init__(self, runs_dir: Path, **kw):
        super().__init__(**kw)
        self.runs_dir = Path(runs_dir)

    def available(self) -> bool:
        return True

    def wrap(self, command: str, out_dir: Path) -> str:
        args = " ".join(shlex.quote(str(a)) for a in (sys.executable, self.script, out_dir, self.runs_dir))
        return f"{command} && {args}"


def profiled_run(runs_dir: Path, suffix: str):
    """(the profiled tree's toy kernel module, its content key, k): k = how many profiled runs of this
    kernel.py content came before this one (counted in `runs_dir/<key>.<suffix>`). Run in the tree."""
    import hashlib
    import os

    sys.path.insert(0, os.getcwd())
    key = hashlib.sha256(Path("kernel.py").read_bytes()).hexdigest()[:16]
    import kernel  # the profiled tree's toy kernel.py

    counter = runs_dir / f"{key}.{suffix}"
    counter.parent.mkdir(parents=True, exist_ok=True)
    k = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(k + 1))
    return kernel, key, k


def _write(out_dir: Path, runs_dir: Path) -> int:
    import json
    import os

    kernel, _, k = profiled_run(runs_dir, "profiles")
    if getattr(kernel, "PROFILE_FAIL_AT", None) == k:
        print("replayed profiler crash", file=sys.stderr)
        return 3
    trace = json.loads(FIXTURE.read_text())
    name = next(n for n in trace["kernels"] if n.startswith(SGEMM_PREFIX))
    gpu = getattr(kernel, "GPU_US", None)
    if gpu is not None:
        us = gpu[min(k, len(gpu) - 1)] if isinstance(gpu, list) else gpu
        rec = trace["kernels"][name]
        calls = getattr(kernel, "CALLS", rec["calls"])
        rec["calls"] = calls[min(k, len(calls) - 1)] if isinstance(calls, list) else calls
        rec["total_ns"] = int(us * 1000)
        rec["min_ns"] = rec["max_ns"] = rec["total_ns"] // rec["calls"]
    if getattr(kernel, "KERNEL_NAME", None):
        trace["kernels"][kernel.KERNEL_NAME] = trace["kernels"].pop(name)
    _add_groups(trace)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / f"cupti-{os.getpid()}.json").write_text(json.dumps(trace))
    return 0


def _add_groups(trace: dict) -> None:
    """Give each kernel of a format-1 trace the injector's format-2 launch group: one shape (the
    recorded grid size along x, the recorded block size), each launch at the kernel's mean time."""
    trace["format"] = 2
    t = trace["first_start_ns"]
    for k in trace["kernels"].values():
        dur = k["total_ns"] // k["calls"]
        starts = [t + i * (dur + 1000) for i in range(k["calls"])]
        t = starts[-1] + dur + 1000
        k["groups"] = [{"grid": [k["grid_size"], 1, 1], "block": [k["block_size"], 1, 1],
                        "registers_per_thread": k["registers_per_thread"],
                        "shared_mem_bytes": k["shared_mem_per_block_bytes"], "calls": k["calls"],
                        "total_ns": k["total_ns"], "durations_ns": [dur] * k["calls"], "starts_ns": starts}]


# --- replayed time-driven harness (triton.testing.do_bench style), injector format 2 -------------------------

UTILITY_PREFIX = "_ZN2at6native54_GLOBAL__N__d8ceb000_21_DistributionNormal_cu"


def dobench_doc(seed: int, configs: list[dict], utility_calls: int = 8000, shift_pct: float = 0.0,
                pid: int = 438) -> dict:
    """A format-2 CUPTI trace file (sitecustomize.py's layout) replaying the recorded H100 run as a
    time-driven harness: the recorded sgemm kernel (name, registers, shared memory, block of 256
    threads) launched once per repetition of each config, every config a launch group; the
    recorded torch randn kernel (an input-generation kernel) launched `utility_calls` times at its
    recorded GPU time, made the hottest kernel so that target selection must skip it.

    `configs`: dicts with `grid` (3-tuple), `scale` (per-launch GPU time / the recorded sgemm's
    mean launch), `calls` (an int, or a (lo, hi) range drawn per process, as do_bench's repetition
    count varies), optional `warmup` (first launches at 1.5x time, default 5), `name` (a
    renamed kernel) and `block` (another block, as a candidate with other num_warps launches). Two
    configs with one grid and block are one launch group visited twice (two runs). Per-launch times are drawn uniformly between the recording's min_ns and
    max_ns, scaled; `shift_pct` moves the whole process (clock state). Deterministic in `seed`.
    Only numbers, shapes and names change; the recorded trace's fields and names are kept.
    """
    import json
    import random

    rec = json.loads(FIXTURE.read_text())
    sgemm = next(n for n in rec["kernels"] if n.startswith(SGEMM_PREFIX))
    util = next(n for n in rec["kernels"] if n.startswith(UTILITY_PREFIX))
    s, u = rec["kernels"][sgemm], rec["kernels"][util]
    rng = random.Random(seed)
    shift = 1.0 + shift_pct / 100.0
    t = rec["first_start_ns"]
    kernels: dict[str, dict] = {}

    def launch(name: str, src: dict, grid, block, dur: int) -> None:
        nonlocal t
        k = kernels.setdefault(name, {"calls": 0, "total_ns": 0, "min_ns": dur, "max_ns": dur,
                                      "registers_per_thread": src["registers_per_thread"],
                                      "shared_mem_per_block_bytes": src["shared_mem_per_block_bytes"],
                                      "block_size": src["block_size"], "grid_size": None, "groups": []})
        g = next((g for g in k["groups"] if g["grid"] == list(grid) and g["block"] == list(block)), None)
        if g is None:
            g = {"grid": list(grid), "block": list(block), "registers_per_thread": src["registers_per_thread"],
                 "shared_mem_bytes": src["shared_mem_per_block_bytes"], "calls": 0, "total_ns": 0,
                 "durations_ns": [], "starts_ns": []}
            k["groups"].append(g)
        for obj in (k, g):
            obj["calls"] += 1
            obj["total_ns"] += dur
        k["min_ns"], k["max_ns"] = min(k["min_ns"], dur), max(k["max_ns"], dur)
        k["grid_size"] = max(k["grid_size"] or 0, grid[0] * grid[1] * grid[2])
        g["durations_ns"].append(dur)
        g["starts_ns"].append(t)
        t += dur + 2000

    for _ in range(utility_calls):
        launch(util, u, (u["grid_size"], 1, 1), (u["block_size"], 1, 1), u["total_ns"] // u["calls"])
    for cfg in configs:
        calls = cfg["calls"] if isinstance(cfg["calls"], int) else rng.randint(*cfg["calls"])
        for i in range(calls):
            dur = rng.uniform(s["min_ns"], s["max_ns"]) * cfg["scale"] * shift
            if i < cfg.get("warmup", 5):
                dur *= 1.5
            launch(cfg.get("name", sgemm), s, cfg["grid"], cfg.get("block", (s["block_size"], 1, 1)), int(dur))
    return {"format": 2, "pid": pid, "argv": rec["argv"], "status": "ok", "error": None,
            "records": sum(k["calls"] for k in kernels.values()), "kernels": kernels,
            "first_start_ns": rec["first_start_ns"], "last_end_ns": t}


def dobench_trace(out_dir: Path, seed: int, configs: list[dict], **kw):
    """`dobench_doc` written where the injector writes it and parsed by the real parser (KernelTrace)."""
    import json

    from kopt_mcp.profilers.cupti import parse_cupti_dir

    out_dir.mkdir(parents=True, exist_ok=True)
    doc = dobench_doc(seed, configs, **kw)
    (out_dir / f"cupti-{doc['pid']}.json").write_text(json.dumps(doc))
    return parse_cupti_dir(out_dir)


# --- a `cupti` package that replays the recorded trace through the real injector (no GPU) ---------------------

_FAKE_CUPTI = '''"""Replays {fixture} as CUPTI kernel activity records (written by tests/replay_cupti.py)."""
import json
from types import SimpleNamespace


class ActivityKind:
    CONCURRENT_KERNEL = 10


_callbacks = []


def activity_register_callbacks(requested, completed):
    _callbacks[:] = [requested, completed]


def activity_enable(kind):
    pass


def activity_disable(kind):
    pass


def activity_flush_all(flag):
    trace = json.load(open({fixture!r}))
    records, t = [], trace["first_start_ns"]
    for name, k in trace["kernels"].items():
        dur = k["total_ns"] // k["calls"]
        for _ in range(k["calls"]):
            records.append(SimpleNamespace(
                kind=ActivityKind.CONCURRENT_KERNEL, name=name, start=t, end=t + dur,
                registers_per_thread=k["registers_per_thread"], static_shared_memory=k["shared_mem_per_block_bytes"],
                dynamic_shared_memory=0, grid_x=k["grid_size"], grid_y=1, grid_z=1, block_x=k["block_size"],
                block_y=1, block_z=1))
            t += dur + 1000
    if _callbacks:
        _callbacks[1](records)
'''


def write_fake_cupti(folder: Path) -> Path:
    """Write a `cupti` package into `folder` (put it on the benchmark's PYTHONPATH) whose
    `cupti.activity_flush_all` hands the injector the recorded trace's launches as activity records
    (each kernel's recorded calls at its mean recorded time, grid = recorded grid size along x).
    Only the API the injector uses is there. Returns `folder`."""
    pkg = folder / "cupti"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "cupti.py").write_text(_FAKE_CUPTI.format(fixture=str(FIXTURE)))
    return folder


if __name__ == "__main__":
    sys.exit(_write(Path(sys.argv[1]), Path(sys.argv[2])))
