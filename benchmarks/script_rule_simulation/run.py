"""How often the script-metric rule (no profiler: the CPU, or a GPU without a per-launch profiler)
keeps a candidate, by planted effect, under simulated run-to-run noise (CPU only, seconds).

Each trial is one verdict as the referee reaches it: paired rounds of BEST and a candidate that is
`effect`% faster, every run 100 * exp(N(0, sd%)) (log-normal), `rules.script.decide` asked after
each round until it stops asking; the earlier BEST groups of the session (`--history`, e.g. "" =
right after a commit, no group at the new level; "5" = one group of 5 runs; "3,3,3") are drawn the
same way. The [gates] are the defaults but for `--noise` (the threshold, %).

    PYTHONPATH=$PWD python benchmarks/script_rule_simulation/run.py --trials 8000 --sd 1.0 --noise 7

Prints a markdown table: history, then the % of verdicts `improved` per effect. An identical
candidate (effect 0) should be kept at most 1 - confidence (0.5%) of the time.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kopt_mcp.rules.policy import Policy  # noqa: E402
from kopt_mcp.rules.script import Round, decide


def verdict(rng: random.Random, effect_pct: float, history: list[int], sd_pct: float, policy: Policy) -> str:
    """One simulated verdict: its outcome."""
    def run_value() -> float:
        return 100.0 * math.exp(rng.gauss(0.0, sd_pct / 100.0))

    hist = [[{"a": run_value()} for _ in range(n)] for n in history]
    rounds: list[Round] = []
    while True:
        rounds.append(Round(best={"a": run_value()}, candidate={"a": run_value() * math.exp(-effect_pct / 100.0)}))
        d = decide(rounds, "a", False, policy, hist)
        if not d.needs_round:
            return d.outcome


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=8000, help="verdicts per effect and history")
    ap.add_argument("--sd", type=float, default=1.0, help="run-to-run SD of one run (%% of its value, log scale)")
    ap.add_argument("--noise", type=float, default=7.0, help="[gates] noise_pct (%%)")
    ap.add_argument("--effects", default="0,1,2,3,5,10", help="planted effects (%% faster), comma-separated")
    ap.add_argument("--histories", default=";2;5;3,3,3",
                    help="earlier BEST groups, ';' between cases, run counts comma-separated ('' = none)")
    ap.add_argument("--seed", type=int, default=3)
    a = ap.parse_args(argv)
    effects = [float(x) for x in a.effects.split(",")]
    policy = Policy(noise_pct=a.noise)
    look = getattr(policy, "keep_confidence", policy.confidence)  # rules before 2026-11-24: no share per look
    print(f"sd {a.sd}% per run, noise threshold {a.noise}%, {a.trials} verdicts per cell, seed {a.seed}, "
          f"confidence {policy.confidence} (each keep look at {look:.5f})\n")
    print("| earlier BEST groups | " + " | ".join(f"{e:g}% faster" for e in effects) + " |")
    print("|---|" + "---|" * len(effects))
    rng = random.Random(a.seed)
    for case in a.histories.split(";"):
        history = [int(x) for x in case.split(",") if x]
        kept = [sum(verdict(rng, e, history, a.sd, policy) == "improved" for _ in range(a.trials)) for e in effects]
        print(f"| {case or 'none'} | " + " | ".join(f"{100.0 * k / a.trials:.2f}%" for k in kept) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
