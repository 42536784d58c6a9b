"""Decision quality of the keep metric by harness unit, replayed on recorded real units of
Liger-Kernel's own RMSNorm benchmark (tests/fixtures/cupti/h200_liger_units: 12 profiled runs of
unchanged BEST on an H200, with the A/A pairs the session took).

    python benchmarks/decision_quality/replay_units.py [--out DIR]

Each trial is an A/A pair of BEST's runs taken around a candidate in the session (the baseline's
adjacent profiles, each attempt's BEST before and after), and as the candidate another recorded run
of unchanged BEST, its target kernels' per-invocation GPU times multiplied by the planted effect's
factor (a 2% win: x 1/1.02; a 5% slowdown: x 1.05). The session's other A/A spreads are the recent
spreads. Every (pair, candidate) combination is one trial: 7 pairs x 10 candidates = 70 per effect,
not independent (they share runs). What this shows: the false-keep and miss rates the recorded A/A
variation gives the rule; what it does not: effects planted in the kernel itself (extra work whose
cost varies by config and run), which need GPU time. Writes replay_units.md and .json to --out.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from kopt_mcp.evidence.units import HarnessUnit  # noqa: E402
from kopt_mcp.rules.floor import KEEP_RULES  # noqa: E402
from kopt_mcp.rules.policy import Policy  # noqa: E402
from kopt_mcp.rules.units import judge_units, unit_spread_pct  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "cupti" / "h200_liger_units" / "units.json.gz"
TARGET = "_rms_norm_(forward|backward)_kernel"
#: name -> factor on the candidate's target GPU time (< 1: faster)
EFFECTS = {"identical": 1.0, "-1% (slower)": 1.01, "+2% (win)": 1 / 1.02, "+5% (win)": 1 / 1.05,
           "-5% (slower)": 1.05}
TARGETS = {"identical": "never kept", "-1% (slower)": "never kept", "+2% (win)": "kept >= 90%",
           "+5% (win)": "kept >= 95%", "-5% (slower)": "regressed >= 95%"}


def planted(units: list[HarnessUnit], factor: float, target: str = TARGET) -> list[HarnessUnit]:
    """`units` with the target kernels' per-invocation GPU times multiplied by `factor`."""
    import re

    pat = re.compile(target)
    return [u.model_copy(update={"per_invocation": {
        k: ({i: v * factor for i, v in per.items()} if pat.search(k) else per) for k, per in u.per_invocation.items()}})
        for u in units]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "latest")
    a = ap.parse_args()
    runs = {k: [HarnessUnit.model_validate(u) for u in v]
            for k, v in json.loads(gzip.decompress(FIXTURE.read_bytes())).items()}
    base = ["0000-baseline-profile", "0000-baseline-profile-2", "0000-baseline-profile-3", "0000-baseline-profile-4"]
    pairs = list(zip(base, base[1:])) + [(f"000{n}-best-1", f"000{n}-best-2") for n in (1, 2, 3, 5)]
    bests = base + [f"000{n}-best-{k}" for n in (1, 2, 3, 5) for k in (1, 2)]
    spreads = {p: unit_spread_pct(runs[p[0]], runs[p[1]], TARGET) for p in pairs}
    policy = Policy(noise_pct=1.0)
    rows = {}
    for name, factor in EFFECTS.items():
        outcomes: Counter = Counter()
        for pair in pairs:
            recent = [s for p, s in spreads.items() if p != pair]
            for cand in (b for b in bests if b not in pair):
                d = judge_units(runs[pair[0]], planted(runs[cand], factor), runs[pair[1]], TARGET, policy, recent)
                outcomes[d.outcome] += 1
        n = sum(outcomes.values())
        rows[name] = {"n": n, **{k: outcomes[k] for k in ("improved", "tie", "regressed", "divergent")},
                      "target": TARGETS[name]}
    a.out.mkdir(parents=True, exist_ok=True)
    doc = {"keep_rules": KEEP_RULES, "fixture": str(FIXTURE.relative_to(ROOT)), "rows": rows,
           "spreads_pct": {f"{p[0]}/{p[1]}": s for p, s in spreads.items()}}
    (a.out / "replay_units.json").write_text(json.dumps(doc, indent=1))
    lines = ["| planted effect | N | improved | tie | regressed | divergent | target |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {k} | {r['n']} | {r['improved']} | {r['tie']} | {r['regressed']} | {r['divergent']} | {r['target']} |"
              for k, r in rows.items()]
    (a.out / "replay_units.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
