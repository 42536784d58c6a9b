"""Does the target's GPU time follow the SM clock between processes? (issue 15, the do_bench floor)

Runs the do_bench decision-quality harness (benchmarks/decision_quality/repo_gpu_dobench: spin_kernel,
compute-bound) `--runs` times, each in a new process, while kopt_mcp's ClockSampler reads the GPU's
SM clock through NVML from this process (kopt_mcp/gpus/clocks.py), exactly as a profiled run is
sampled. Writes OUT/levels.json (per run: do_bench median us, the RunClock, every raw sample) and
prints one line per run and the spread of us x MHz (constant when time ~ 1/clock).

GPU machine: python benchmarks/clocks/levels.py --runs 12 --out $OUT/clocks   (about 5 s per run)
Never changes a clock.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.decision_quality.run import run_bench  # noqa: E402

HARNESS = Path(__file__).resolve().parents[1] / "decision_quality" / "repo_gpu_dobench"


def main() -> int:
    from kopt_mcp.gpus.clocks import ClockSampler, NvmlClockSource
    from kopt_mcp.gpus.nvml import NvmlProbe

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=12)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", type=int, default=0, help="NVML index of the GPU (the runs see only it)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    gpu = NvmlProbe().read()[args.device]
    source = NvmlClockSource(gpu.uuid)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "h"
        shutil.copytree(HARNESS, work)
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(args.device)}
        for i in range(args.runs):
            t0 = time.monotonic()
            try:
                with ClockSampler(source) as sampler:
                    us = run_bench(work, env)
            except RuntimeError as e:
                print(e, file=sys.stderr)
                return 1
            c = sampler.summary()
            rows.append({"run": i, "us": us, "seconds": round(time.monotonic() - t0, 2),
                         "clock": c.model_dump() if c else None, "error": sampler.error,
                         "samples": [s.model_dump() for s in sampler.samples]})
            print(f"run {i:2d}: {us:8.2f} us  clock {c.shown() if c else 'none'}  "
                  f"{len(sampler.samples)} samples ({c.busy_samples if c else 0} busy)", flush=True)
    prods = [r["us"] * r["clock"]["sm_mhz"] for r in rows if r["clock"]]
    summary = {"gpu": gpu.name, "runs": len(rows), "levels_mhz": sorted({r["clock"]["sm_mhz"] for r in rows if r["clock"]}),
               "us_range": [min(r["us"] for r in rows), max(r["us"] for r in rows)],
               "us_x_mhz_spread_pct": (100 * (max(prods) - min(prods)) / statistics.mean(prods)) if prods else None}
    print(json.dumps(summary))
    (args.out / "levels.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
