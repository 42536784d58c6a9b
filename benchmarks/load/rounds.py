"""Print every attempt of kopt-mcp session ledgers with its per-round, per-class deltas: what a
verdict under load was made of.

    python benchmarks/load/rounds.py DIR_OR_LEDGER...

A directory is searched for `ledger.jsonl` files (a demo's `--keep` folder holds one under
`<repo>/.git/kopt/<tag>/`). One line per attempt: number, verdict, target, then one line per class
with its deltas (%, + = candidate faster) in round order; `--json` prints the same as JSON lines.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def attempts(ledger: Path) -> list[dict]:
    """The ledger's attempt records: {attempt, verdict, target, classes: {key: [delta %...]}, reason}."""
    out = []
    for line in ledger.read_text().splitlines():
        e = json.loads(line)
        if "verdict" not in e or "attempt" not in e:
            continue
        out.append({"attempt": e["attempt"], "verdict": e["verdict"], "target": e.get("target"),
                    "classes": {c["key"]: c["deltas_pct"] for c in e.get("classes") or []},
                    "reason": e.get("reason", "")})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", type=Path, nargs="+")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    ledgers = [q for p in a.paths for q in ([p] if p.is_file() else sorted(p.rglob("ledger.jsonl")))]
    if not ledgers:
        print("no ledger.jsonl found", file=sys.stderr)
        return 1
    for led in ledgers:
        rows = attempts(led)
        if a.json:
            for r in rows:
                print(json.dumps({"ledger": str(led), **r}))
            continue
        print(f"# {led}")
        for r in rows:
            print(f"{r['attempt']:>3} {r['verdict']:<10} {r['target']}")
            for k, ds in r["classes"].items():
                print(f"      {k:<22} " + " ".join(f"{d:+7.1f}%" for d in ds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
