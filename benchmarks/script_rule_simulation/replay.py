"""How often the script-metric rule keeps an identical candidate on RECORDED runs of a real harness,
with the runs' own distribution and their order in time (CPU only, seconds).

`--record`: a JSON-lines file of runs of one unchanged tree, one line per run in time order, each
{"i": index, "t": unix start time (s), "v": {config class: metric}}; `record` writes one from a
benchmark command (the example's repository, `--overwrite` runs). `replay` slides a window over the
runs and reads them as the referee's order does (rules applied through `rules.script.decide`): 3
baseline runs (one earlier lease), then round 1 candidate, BEST, rounds 2.. BEST, candidate, asking
`decide` after each round until it stops asking. Both "trees" are the same tree: every keep is false.

    PYTHONPATH=$PWD python benchmarks/script_rule_simulation/replay.py record --runs 500 --out runs.jsonl
    PYTHONPATH=$PWD python benchmarks/script_rule_simulation/replay.py replay --record runs.jsonl

`replay` prints the windows, the keeps (code, deltas) and the refusals by BEST's record check
(rules/best_record.py; code script_within_best_record at the end, or needs_round along the way).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kopt_mcp.commands.demo import prepare_repo
from kopt_mcp.config import load_config
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.script import Round, decide

EXAMPLE = ROOT / "examples" / "appended_harness"
#: the referee's order (referee/attempt.py _script_rounds): which tree runs first in each round
ORDER = (("candidate", "best"), ("best", "candidate"), ("best", "candidate"), ("best", "candidate"))
BASELINE_RUNS = 3


def record(runs: int, out: Path, gap_s: float) -> None:
    """`runs` runs of the appended harness's benchmark (its example repository, copied to a temporary
    folder), one JSON line each: the `ours` forward speed rows (median ms per class). `gap_s`: the
    pause between runs (the referee's own work between two runs takes about as long)."""
    repo = prepare_repo(EXAMPLE, Path(tempfile.mkdtemp()) / "repo")
    with out.open("w") as f:
        for i in range(runs):
            t0 = time.time()
            subprocess.run([sys.executable, "benchmark/benchmark_rms_norm.py", "--overwrite"], cwd=repo, check=True,
                           capture_output=True)
            with (repo / "data" / "all_benchmark_data.csv").open() as c:
                rows = [r for r in csv.DictReader(c) if r["kernel_provider"] == "ours" and r["metric_name"] == "speed"
                        and r["kernel_operation_mode"] == "forward"]
            f.write(json.dumps({"i": i, "t": round(t0, 3), "v": {f"x_value={r['x_value']}": float(r["y_value_50"])
                                                                  for r in rows}}) + "\n")
            f.flush()
            time.sleep(gap_s)


def replay(runs: list[dict[str, float]], policy: Policy, target: str = "global") -> dict:
    """Every window of `runs` as one identical candidate's verdict (module docstring): {"windows",
    "kept": [(start, code, deltas)], "refused_by_record": [(start, final code)]}. Pure."""
    out: dict = {"windows": 0, "kept": [], "refused_by_record": []}
    need = BASELINE_RUNS + 2 * len(ORDER)
    for s in range(len(runs) - need + 1):
        history, i, rounds, refused = [runs[s:s + BASELINE_RUNS]], s + BASELINE_RUNS, [], False
        for first, second in ORDER:
            got = {first: runs[i], second: runs[i + 1]}
            i += 2
            rounds.append(Round(best=got["best"], candidate=got["candidate"]))
            d = decide(rounds, target, False, policy, history)
            rec = getattr(d, "record", None)  # rules before 2026-12-04 have no record check
            refused = refused or (rec is not None and not rec.passed)
            if not d.needs_round:
                break
        out["windows"] += 1
        if d.outcome == "improved":
            out["kept"].append((s, d.code.value, [round(x, 2) for x in d.target_deltas_pct]))
        elif refused:
            out["refused_by_record"].append((s, d.code.value))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record", help="record runs of the appended harness")
    r.add_argument("--runs", type=int, default=500)
    r.add_argument("--gap", type=float, default=1.0, help="seconds between runs")
    r.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("replay", help="replay the rule on a record")
    p.add_argument("--record", type=Path, required=True)
    p.add_argument("--config", type=Path, default=EXAMPLE / "kopt.toml", help="kopt.toml whose [gates] apply")
    p.add_argument("--confidence", type=float, default=None, help="[gates] confidence (default: the config's)")
    a = ap.parse_args(argv)
    if a.cmd == "record":
        record(a.runs, a.out, a.gap)
        return 0
    policy = Policy.from_gates(load_config(a.config).target.gates)
    if a.confidence is not None:
        policy = policy.model_copy(update={"confidence": a.confidence})
    runs = [json.loads(line)["v"] for line in a.record.read_text().splitlines() if line.strip()]
    res = replay(runs, policy)
    n, k = res["windows"], len(res["kept"])
    print(f"{len(runs)} runs, {n} windows, confidence {policy.confidence}: kept {k} ({100.0 * k / max(n, 1):.2f}%), "
          f"refused by BEST's record check {len(res['refused_by_record'])}")
    for row in res["kept"]:
        print("  kept", *row)
    for row in res["refused_by_record"]:
        print("  refused by the record", *row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
