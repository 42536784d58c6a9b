"""A CUPTI profiler for tests without a GPU: it runs the toy benchmark as it is, then writes the
recorded H100 CUPTI trace (fixtures/cupti/h100_torch_matmul/cupti-438.json) where the injector
would, with the target kernel's GPU time set by the profiled tree's kernel.py:

- GPU_US: the sgemm kernel's total GPU time (us) over the run; a list gives profiled run k of that
  kernel.py (same content) item k (the last repeats), counted in `runs_dir` (every run happens in
  a fresh checkout), so BEST's successive profiles can differ exactly;
- CALLS: its launch count (default: the recording's 20);
- KERNEL_NAME: a new name for it (a compiler rename);
- PROFILE_FAIL_AT: the profiled run k that exits 3 instead (a profiler crash).

Only numbers and the name are changed; the format is the recorded one.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from kopt_mcp.profilers.cupti import CuptiProfiler

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "cupti" / "h100_torch_matmul" / "cupti-438.json"
SGEMM_PREFIX = "_ZN7cutlass7Kernel2I43cutlass_80_simt_sgemm"


class ReplayCupti(CuptiProfiler):
    """CuptiProfiler whose wrap replays the recorded trace (see the module docstring)."""

    def __init__(self, runs_dir: Path, **kw):
        super().__init__(**kw)
        self.runs_dir = Path(runs_dir)

    def available(self) -> bool:
        return True

    def wrap(self, command: str, out_dir: Path) -> str:
        args = " ".join(shlex.quote(str(a)) for a in (sys.executable, __file__, out_dir, self.runs_dir))
        return f"{command} && {args}"


def _write(out_dir: Path, runs_dir: Path) -> int:
    import hashlib
    import json
    import os

    sys.path.insert(0, os.getcwd())
    key = hashlib.sha256(Path("kernel.py").read_bytes()).hexdigest()[:16]
    import kernel  # the profiled tree's toy kernel.py

    counter = runs_dir / f"{key}.profiles"
    counter.parent.mkdir(parents=True, exist_ok=True)
    k = int(counter.read_text()) if counter.exists() else 0
    counter.write_text(str(k + 1))
    if getattr(kernel, "PROFILE_FAIL_AT", None) == k:
        print("replayed profiler crash", file=sys.stderr)
        return 3
    trace = json.loads(FIXTURE.read_text())
    name = next(n for n in trace["kernels"] if n.startswith(SGEMM_PREFIX))
    gpu = getattr(kernel, "GPU_US", None)
    if gpu is not None:
        us = gpu[min(k, len(gpu) - 1)] if isinstance(gpu, list) else gpu
        rec = trace["kernels"][name]
        rec["calls"] = getattr(kernel, "CALLS", rec["calls"])
        rec["total_ns"] = int(us * 1000)
        rec["min_ns"] = rec["max_ns"] = rec["total_ns"] // rec["calls"]
    if getattr(kernel, "KERNEL_NAME", None):
        trace["kernels"][kernel.KERNEL_NAME] = trace["kernels"].pop(name)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / f"cupti-{os.getpid()}.json").write_text(json.dumps(trace))
    return 0


if __name__ == "__main__":
    sys.exit(_write(Path(sys.argv[1]), Path(sys.argv[2])))
