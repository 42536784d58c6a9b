"""Does every run record another job's compute process on the leased GPU? (issue 27 item 2, the GPU side)

Runs the do_bench decision-quality harness (benchmarks/decision_quality/repo_gpu_dobench) `--runs`
times alone, then `--runs` times while a foreign CUDA job (a torch matmul loop started by a shell that
exits at once, so it is outside this process's tree) holds the same GPU. Each run is sampled exactly
as kopt-mcp samples a measured run: kopt_mcp.gpus.load.GpuLoadSampler over the NVML probe, in this
process, around the benchmark command only. Expected: no foreign process and rules.load.under_load
False alone; the foreign job's pid named and under_load True with it, every run. Also prints the
do_bench median per run (how much the foreign job moved it).

GPU machine: python benchmarks/load/gpu_foreign.py --runs 5 --out $OUT/gpu-load   (about 1 min)
Writes OUT/gpu_foreign.json; exit 0 when every run's figures are as expected. Kills the foreign job
(by pid) at the end, and it ends by itself after 300 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.decision_quality.run import run_bench  # noqa: E402

HARNESS = Path(__file__).resolve().parents[1] / "decision_quality" / "repo_gpu_dobench"
FOREIGN = ("import time, torch\nx = torch.randn(4096, 4096, device='cuda')\nt = time.time() + 300\n"
           "while time.time() < t:\n    y = x @ x\n    torch.cuda.synchronize()\n")


def _foreign(env: dict[str, str]) -> int:
    out = subprocess.run(["bash", "-c", f'{sys.executable} -c "{FOREIGN}" >/dev/null 2>&1 & echo $!'],
                         env=env, capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


def main() -> int:
    from kopt_mcp.gpus.load import GpuLoadSampler
    from kopt_mcp.gpus.nvml import NvmlProbe
    from kopt_mcp.rules.load import under_load
    from kopt_mcp.rules.policy import Policy

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", type=int, default=0, help="NVML index of the GPU (the runs see only it)")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    probe = NvmlProbe()
    gpu = probe.read()[args.device]
    policy = Policy(noise_pct=1.0)
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(args.device)}
    rows, ok, pid = [], True, None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp) / "h"
            shutil.copytree(HARNESS, work)
            for phase in ("alone", "foreign"):
                if phase == "foreign":
                    pid = _foreign(env)
                    time.sleep(10)  # CUDA context and the first matmuls
                for i in range(args.runs):
                    try:
                        with GpuLoadSampler(probe, gpu.uuid) as s:
                            us = run_bench(work, env)
                    except RuntimeError as e:
                        print(e, file=sys.stderr)
                        return 1
                    load = s.summary()
                    loaded = under_load(load, policy)
                    named = pid is not None and load is not None and pid in [q.pid for q in load.processes]
                    good = (not loaded) if phase == "alone" else (loaded and named)
                    ok = ok and good
                    rows.append({"phase": phase, "run": i, "us": us, "under_load": loaded, "foreign_pid": pid,
                                 "load": load.model_dump() if load else None, "error": s.error, "as_expected": good})
                    print(f"{phase:7s} run {i}: {us:8.2f} us  under_load={loaded}  "
                          f"{load.shown() if load else 'no figures'}", flush=True)
    finally:
        if pid is not None:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                pass
    summary = {"gpu": gpu.name, "runs": len(rows), "as_expected": sum(r["as_expected"] for r in rows)}
    print(json.dumps(summary))
    (args.out / "gpu_foreign.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1))
    return 0 if ok else 2


if __name__ == "__main__":
    sys.exit(main())
