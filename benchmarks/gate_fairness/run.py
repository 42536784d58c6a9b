"""Fairness of the GPU gate between two kopt-mcp slots on one GPU (CPU only, real time).

Two processes (two `kopt-mcp serve --slot` servers) share one lease folder and one GPU: the
recorded idle H200 `nvidia-smi` output (tests/fixtures/nvidia_smi) replayed, so only the leases
decide. Each slot loops for `--seconds`: GpuGate.acquire (the real gate: poll_s 600, JOB_POLL_S while
the other slot's job lease holds the GPU), hold the GPU `--hold` s (its measuring call), release,
and ask again at once (the agent's next call). `--no-queue` replays the gate as it was before the
wait queue (no earlier waiter ever blocks, no wake-up when a job lease ends: a waiter polls every
JOB_POLL_S), for the comparison.

Measured per slot: grants, the longest wait (s; one still waiting at the end counts to the end), and the longest run of grants in a row by one slot.

    PYTHONPATH=$PWD python benchmarks/gate_fairness/run.py --seconds 30 --hold 1
    PYTHONPATH=$PWD python benchmarks/gate_fairness/run.py --seconds 30 --hold 1 --no-queue
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def slot(tag: str, lease_dir: str, until: float, hold_s: float, no_queue: bool, out: mp.Queue) -> None:
    """One slot's loop; puts [(tag, asked_at, granted_at)] on `out` (epoch s; granted_at None: the
    run ended during that wait)."""
    from kopt_mcp.gpus import waitqueue
    from kopt_mcp.gpus.gate import GpuGate
    from kopt_mcp.gpus.lease import LeaseManager
    from kopt_mcp.gpus.smi import NvidiaSmiProbe
    from tests.gpus.conftest import IDLE, SmiReplay

    if no_queue:  # the gate before the queue: nobody is ahead, and no wake-up on a lease's end
        waitqueue.WaitQueue.ahead = lambda self, uuid: []
        plain_wait = GpuGate._wait
        GpuGate._wait = lambda self, seconds, cancel, watch=None: plain_wait(self, seconds, cancel)
    grants = []
    while time.time() < until:
        gate = GpuGate(NvidiaSmiProbe(SmiReplay(IDLE)), LeaseManager(Path(lease_dir), tag),
                       wait_s=max(0.0, until - time.time()), poll_s=600.0)
        asked = time.time()
        got = gate.acquire()
        if got.lease is None:  # the run ended while this slot waited: that wait counts too
            grants.append((tag, asked, None))
            break
        grants.append((tag, asked, time.time()))
        time.sleep(hold_s)
        gate.release()
    out.put(grants)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--hold", type=float, default=1.0, help="s each measuring call holds the GPU")
    ap.add_argument("--no-queue", action="store_true", help="the gate without the wait queue (before)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as d:
        q = ctx.Queue()
        until = time.time() + a.seconds
        procs = [ctx.Process(target=slot, args=(t, d, until, a.hold, a.no_queue, q)) for t in ("a", "b")]
        for p in procs:
            p.start()
        asks = [g for _ in procs for g in q.get()]
        for p in procs:
            p.join()
    grants = sorted((g for g in asks if g[2] is not None), key=lambda g: g[2])
    streak, best = 0, 0
    for i, g in enumerate(grants):
        streak = streak + 1 if i and grants[i - 1][0] == g[0] else 1
        best = max(best, streak)
    result = {"seconds": a.seconds, "hold_s": a.hold, "queue": not a.no_queue,
              "grants": {t: sum(g[0] == t for g in grants) for t in ("a", "b")},
              "max_wait_s": {t: round(max(((g[2] or until) - g[1] for g in asks if g[0] == t), default=0.0), 2)
                             for t in ("a", "b")},
              "longest_run_of_one_slot": best, "order": "".join(g[0] for g in grants)}
    print(json.dumps(result, indent=1))
    if a.json:
        a.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
