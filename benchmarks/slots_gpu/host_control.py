"""The host's own slowdown with N GPUs busy at once, without kopt-mcp (the control for many.py).

Runs the planted repository's benchmark (`python bench.py`, benchmarks/decision_quality/repo_gpu or
repo_gpu_dobench) K times in a row on GPU 0 alone, then K times in a row on each of the N GPUs at
once (one process per GPU, `CUDA_VISIBLE_DEVICES`), and reports the mean wall seconds per run of
each. A run is a whole process: Python start, imports, CUDA context, compile cache, timed loop.
If runs are slower with N GPUs busy, N slots cannot reach N times one slot's verdicts per minute
whatever the referee does. Writes host_control.json to OUT.

    python benchmarks/slots_gpu/host_control.py OUT [--repo gpu|gpu-dobench] [--runs 8]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.decision_quality.run import make_repo, run_bench  # noqa: E402
from benchmarks.common import gpu_uuids  # noqa: E402


def runs_on(gpu: int, repo: Path, k: int) -> list[float]:
    """Wall seconds of `k` runs of `python bench.py` in a row on GPU `gpu`. Raises RuntimeError on a
    failed run."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu)}
    out = []
    for _ in range(k):
        t = time.perf_counter()
        run_bench(repo, env)
        out.append(time.perf_counter() - t)
    return out


def measure(repo_kind: str, n: int, runs: int, work: Path) -> dict:
    """The control on `n` GPUs: `runs` runs alone on GPU 0, then `runs` on each GPU at once; mean
    wall seconds per run of each and their ratio (`slowdown`). Raises on a failed run."""
    repos = [make_repo(repo_kind, work / f"r{g}") for g in range(n)]  # one copy per GPU: no shared results/
    runs_on(0, repos[0], 1)  # warm: compile caches
    alone = runs_on(0, repos[0], runs)
    with ThreadPoolExecutor(n) as pool:
        together = list(pool.map(lambda g: runs_on(g, repos[g], runs), range(n)))
    flat = [x for xs in together for x in xs]
    return {"gpus": n, "repo": repo_kind, "runs": runs, "alone_mean_s": round(statistics.mean(alone), 3),
            "together_mean_s": round(statistics.mean(flat), 3),
            "slowdown": round(statistics.mean(flat) / statistics.mean(alone), 3),
            "alone_s": [round(x, 3) for x in alone], "together_s": [[round(x, 3) for x in xs] for xs in together]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--repo", choices=("gpu", "gpu-dobench"), default="gpu")
    ap.add_argument("--runs", type=int, default=8)
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    res = measure(a.repo, len(gpu_uuids()), a.runs, Path(tempfile.mkdtemp(prefix="kopt-host-")))
    (a.out / "host_control.json").write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if not k.endswith("_s") or k.endswith("mean_s")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
