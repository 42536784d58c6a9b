"""A CUPTI profiler for tests without a GPU whose traces carry harness units (format 3), as the
injector writes them when it marks a do_bench harness: it runs the toy benchmark as it is, then
writes one trace file with one unit per config class of the profiled tree's kernel.py:

- UNIT_US: class key -> the target kernel's GPU time per invocation (us); a list gives profiled
  run k of that kernel.py (same content) item k (the last repeats);
- OTHER_US: class key -> the GPU time per invocation of a second kernel of the operation (a torch
  reduction, `torch_sum`), 1.0 us by default;
- EMPTY_SHARE: the share of invocations that launch nothing (results cached across calls);
- NOISE_PCT: per-invocation noise (%, seeded by the run), 0.3 by default;
- CODE: the compiled code's text (its SHA-256 is the module hash of the target kernel).

Each unit has 400 invocations. The file's layout is exactly the collector's (kopt_cupti_trace.Trace
over rows and external correlation pairs), so the parser under test is the real one.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kopt_mcp.profilers.cupti import INJECT_DIR
from tests.replay_cupti import ReplayCupti, profiled_run

INVOCATIONS = 400
TARGET = "fwd_kernel"


class ReplayUnits(ReplayCupti):
    """ReplayCupti writing a planted format-3 trace (module docstring) for the flow where every run
    is profiled."""

    measures_script = True
    script = __file__


def _write(out_dir: Path, runs_dir: Path) -> int:
    import hashlib
    import importlib.util
    import json
    import os
    import random

    kernel, key, k = profiled_run(runs_dir, "units")
    spec = importlib.util.spec_from_file_location("kopt_trace", Path(INJECT_DIR) / "kopt_cupti_trace.py")
    agg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(agg)
    trace = agg.Trace()
    rnd = random.Random(f"{key}-{k}")
    noise = getattr(kernel, "NOISE_PCT", 0.3) / 100.0
    t, corr = 1000, 1
    for u, cls in enumerate(kernel.TIMES, start=1):
        us = kernel.UNIT_US[cls]
        us = us[min(k, len(us) - 1)] if isinstance(us, list) else us
        other = getattr(kernel, "OTHER_US", {}).get(cls, 1.0)
        pairs = []
        for i in range(INVOCATIONS):
            if rnd.random() < getattr(kernel, "EMPTY_SHARE", 0.0):
                continue
            for name, dur in ((TARGET, us), ("torch_sum", other)):
                ns = int(dur * (1.0 + rnd.gauss(0.0, noise)) * 1000)
                trace.add_row([name, t, t + ns, [132, 1, 1], [256, 1, 1], 32, 0, corr])
                pairs.append([corr, (u << agg.INV_BITS) | i])
                t, corr = t + ns + 100, corr + 1
        trace.add_ext(pairs)
        trace.add_unit({"k": u, "harness": "do_bench", "label": f"bench[{cls}]", "invocations": INVOCATIONS})
    code = getattr(kernel, "CODE", "v1")
    trace.add_code(TARGET, [hashlib.sha256(code.encode()).hexdigest()])
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    (Path(out_dir) / f"cupti-{os.getpid()}.json").write_text(json.dumps(trace.doc()))
    return 0


if __name__ == "__main__":
    sys.exit(_write(Path(sys.argv[1]), Path(sys.argv[2])))
