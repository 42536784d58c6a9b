"""The end of the loop on the GPU (issue 27 items 3 and 8): `kopt-mcp demo` on the Triton example
RUNS times in a row (no stall: each run's wall time, exit code, and every "next check in N s" gate
wait its log shows), then `kopt-mcp compare` on the first run's session (the session's baseline commit
against BEST_COMMIT in one paired run: per class the change with its bounds, GPU time). Writes
end_of_loop.json and end_of_loop.md to OUT.

    python benchmarks/end_of_loop/run.py OUT [--runs 5] [--first 1] [--example cpu] [--no-compare]

One device call allows 10 minutes: split the runs (`--runs 2 --first 1`, then `--runs 3 --first 3`);
compare runs after the call's first demo.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

STALL_S = 600  # a demo that waited the gate's foreign-job poll at least once


def _cli(*args: str, log: Path, timeout_s: float) -> tuple[int, float, str]:
    t0 = time.monotonic()
    try:
        r = subprocess.run([sys.executable, "-m", "kopt_mcp.app.cli", *args], capture_output=True, text=True,
                           timeout=timeout_s)
        rc, out = r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = 124, (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
    log.write_text(out)
    return rc, time.monotonic() - t0, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--first", type=int, default=1, help="number of the first run (for split calls)")
    ap.add_argument("--timeout-s", type=float, default=900.0)
    ap.add_argument("--example", choices=["triton", "cpu"], default="triton", help="cpu: a dry run of this script")
    ap.add_argument("--no-compare", action="store_true", help="demos only (a call that runs several at once)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    runs, compare = [], None
    for i in range(a.first, a.first + a.runs):
        keep = a.out / f"demo-{i}"
        rc, wall, out = _cli("demo", "--example", a.example, "--keep", str(keep), log=a.out / f"demo-{i}.log",
                             timeout_s=a.timeout_s)
        waits = [int(x) for x in re.findall(r"next check in (\d+) s", out)]
        runs.append({"run": i, "rc": rc, "wall_s": round(wall, 1), "gate_waits_s": waits,
                     "stalled": any(w >= STALL_S for w in waits) or wall >= STALL_S})
        print(json.dumps(runs[-1]), flush=True)
        if compare is None and not a.no_compare:
            repo = keep / {"triton": "triton_softmax", "cpu": "cpu_softmax"}[a.example]
            rc_c, wall_c, out_c = _cli("compare", "--repo", str(repo), "--json",
                                       log=a.out / f"compare-{i}.log", timeout_s=a.timeout_s)
            try:
                result = json.loads(out_c[out_c.index("{"):out_c.rindex("}") + 1])
            except ValueError:
                result = None
            compare = {"run": i, "rc": rc_c, "wall_s": round(wall_c, 1), "result": result}
            print(json.dumps({k: v for k, v in compare.items() if k != "result"}),
                  result.get("headline") if result else out_c[-800:], flush=True)
    summary = {"runs": runs, "passed": sum(r["rc"] == 0 for r in runs), "stalls": sum(r["stalled"] for r in runs),
               "compare": compare}
    (a.out / "end_of_loop.json").write_text(json.dumps(summary, indent=1) + "\n")
    lines = ["# End of the loop on the GPU", "", f"demo: {summary['passed']} of {len(runs)} passed, "
             f"{summary['stalls']} stalled (a gate wait >= {STALL_S} s)", "", "| run | rc | wall s | gate waits s |",
             "|---|---|---|---|"]
    lines += [f"| {r['run']} | {r['rc']} | {r['wall_s']} | {r['gate_waits_s'] or '-'} |" for r in runs]
    res = (compare or {}).get("result") or {}
    lines += ["", f"compare (run {(compare or {}).get('run')}): rc {(compare or {}).get('rc')}, "
              f"{(compare or {}).get('wall_s')} s", "", res.get("headline", "(no result)"), ""]
    (a.out / "end_of_loop.md").write_text("\n".join(lines))
    return 0 if summary["passed"] == len(runs) and not summary["stalls"] and (res or a.no_compare) else 1


if __name__ == "__main__":
    sys.exit(main())
