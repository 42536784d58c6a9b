"""Decision quality of the launch-group keep metric (kopt_mcp/rules/keep.py judge_groups) on REPLAYED
CUPTI traces of a time-driven harness, CPU only. Not a GPU measurement: the traces are
tests/replay_cupti.py `dobench_doc` (the recorded H100 sgemm trace replayed with do_bench-like
launch counts: 200-380 and 50-95 launches of two config classes per process, 5 slower warm-up
launches, per-launch times uniform within the recording's min/max) plus a per-process shift of
SD `--shift-sd` % (clock state). Each trial: BEST, candidate (planted effect), BEST again;
the session's recent spreads accumulate as in a session (last 9 + this attempt's own).

    PYTHONPATH=$PWD python benchmarks/keep_groups_replay/run.py --trials 40 --shift-sd 0.03
"""

from __future__ import annotations

import argparse
import random
import tempfile
from pathlib import Path

from kopt_mcp.rules.keep import judge_groups
from tests.replay_cupti import dobench_trace

EFFECTS = (0.0, 1.0, -0.5, -1.0, -2.0)  # % change of the candidate's per-launch time (- = faster)


def run(trials: int, shift_sd: float, seed: int = 1) -> dict[float, int]:
    """Kept count per planted effect over `trials` A/B/A trials each."""
    rng = random.Random(seed)
    scratch = Path(tempfile.mkdtemp(prefix="kopt-keep-replay-"))
    n = 0

    def trace(scale: float):
        nonlocal n
        n += 1
        cfg = [{"grid": (128, 1, 1), "scale": scale, "calls": (200, 380)},
               {"grid": (512, 1, 1), "scale": 4 * scale, "calls": (50, 95)}]
        return dobench_trace(scratch / str(n), n, cfg, shift_pct=rng.gauss(0, shift_sd))

    kept: dict[float, int] = {}
    for effect in EFFECTS:
        spreads: list[float] = []
        kept[effect] = 0
        for _ in range(trials):
            d = judge_groups(trace(1.0), trace(1 + effect / 100), trace(1.0), recent_spreads_pct=spreads[-9:])
            spreads.append(d.spread_pct)
            kept[effect] += d.kept
    return kept


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--shift-sd", type=float, default=0.03)
    a = ap.parse_args()
    res = run(a.trials, a.shift_sd)
    print(f"| planted effect | kept (of {a.trials}), process shift SD {a.shift_sd}% |")
    print("|---|---|")
    for effect, k in res.items():
        print(f"| {effect:+g}% | {k} |")
