"""Extract the measured rounds of a kopt-mcp session (its run folders' CSVs) as JSON: the real
numbers a verdict under load was made of, to replay through the rules (tests/rules/test_verdict_replay.py).

    python benchmarks/load/extract.py SESSION_STATE_DIR --device "..." --load "..." > tests/fixtures/load/NAME.json

SESSION_STATE_DIR is the folder holding ledger.jsonl and runs/ (a demo's `--keep DIR` puts it at
DIR/<repo>/.git/kopt/<tag>/). Output: {"device", "load", "expect", "metric", "higher_is_better", "baseline":
[run...], "attempts": [{"attempt", "verdict", "target", "rounds": [{"best": run, "candidate": run}],
"committed": bool}]} where a run is {class key: metric}. Rounds are read from the run folders
NNNN-candidate[-k] and NNNN-best[-k] (round k); the verdict and target from the ledger.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path


def read_run(run_dir: Path, metric: str, config_columns: list[str]) -> dict[str, float] | None:
    """class key -> metric of one run folder's CSV (key as kopt-mcp forms it: 'col=value,...'), or None."""
    csvs = sorted(run_dir.rglob("*.csv"))
    if not csvs:
        return None
    out = {}
    with open(csvs[0], newline="") as f:
        for row in csv.DictReader(f):
            key = ",".join(f"{c}={row[c]}" for c in config_columns)
            out[key] = float(row[metric])
    return out


def extract(state_dir: Path, metric: str, config_columns: list[str]) -> dict:
    """The session's baseline runs and each attempt's rounds (see the module docstring)."""
    runs = state_dir / "runs"
    events = [json.loads(x) for x in (state_dir / "ledger.jsonl").read_text().splitlines()]
    committed = {e["attempt"] for e in events if e.get("event") == "commit"}
    baseline = [r for d in sorted(runs.glob("0000-baseline*"), key=lambda p: (len(p.name), p.name))
                if (r := read_run(d, metric, config_columns)) is not None]
    attempts = []
    for e in events:
        if e.get("event") != "attempt":
            continue
        n = e["attempt"]
        rounds = []
        for k in range(1, 100):
            suffix = "" if k == 1 else f"-{k}"
            b, c = runs / f"{n:04d}-best{suffix}", runs / f"{n:04d}-candidate{suffix}"
            if not (b.is_dir() and c.is_dir()):
                break
            rb, rc = read_run(b, metric, config_columns), read_run(c, metric, config_columns)
            if rb is None or rc is None:
                break
            rounds.append({"best": rb, "candidate": rc})
        attempts.append({"attempt": n, "verdict": e["verdict"], "target": e.get("target", "global"),
                         "rounds": rounds, "committed": n in committed})
    return {"baseline": baseline, "attempts": attempts}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("state_dir", type=Path)
    ap.add_argument("--metric", default="us_per_call")
    ap.add_argument("--config-columns", default="rows,cols")
    ap.add_argument("--higher-is-better", action="store_true")
    ap.add_argument("--device", required=True, help="the machine, in words")
    ap.add_argument("--load", required=True, help="the load during the session, in words")
    ap.add_argument("--expect", choices=("exact", "safe"), default="exact",
                    help="what a replay asserts: every verdict as the scenario expects (exact), or only that "
                    "nothing is kept or counted as a regression that should not be (safe: a load beyond the "
                    "one the rules promise to handle)")
    a = ap.parse_args()
    data = extract(a.state_dir, a.metric, a.config_columns.split(","))
    print(json.dumps({"device": a.device, "load": a.load, "expect": a.expect, "metric": a.metric,
                      "higher_is_better": a.higher_is_better, **data}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
