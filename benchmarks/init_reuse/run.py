"""Issue 35 item 4 on a GPU: from a fresh copy of examples/triton_softmax through `kopt-mcp init
--write` (unedited proposal) to the baseline's end, with init's runs adopted, and the same without
(init's record removed: the baseline measures every run, as before item 4). Counts every benchmark
process (each appends a line to a counter file outside the tree) and kopt's records; wall times (s).
Writes init_reuse.json and init_reuse.md to $OUT (default: benchmarks/results/latest). Run on the GPU
host with scripts/gpu_suite.sh's setup (its wheels), e.g. `OUT=... python benchmarks/init_reuse/run.py`."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from kopt_mcp import init_runs
from kopt_mcp.app.cli import main
from kopt_mcp.commands.demo import prepare_repo
from kopt_mcp.referee import Referee
from kopt_mcp.referee.baseline_adopt import ADOPTED_FILE

#: the example (INIT_REUSE_EXAMPLE: another folder of examples/, e.g. cpu_softmax to try the script on a CPU)
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / os.environ.get("INIT_REUSE_EXAMPLE", "triton_softmax")


def flow(root: Path, adopt: bool) -> dict:
    repo = prepare_repo(EXAMPLE, root / "repo")
    counter = root / "processes.txt"
    t0 = time.time()
    assert main(["init", "--repo", str(repo), "--command", f"echo run >> {counter} && python bench.py",
                 "--write", "--force"]) == 0
    init_s = time.time() - t0
    rec, _ = init_runs.load(repo)
    init_processes = len(counter.read_text().splitlines())
    if not adopt:
        init_runs.where(repo).unlink()
    ref = Referee(repo, tag="t", lease_dir=root / "leases")
    t1 = time.time()
    base = ref.run_benchmark()
    base_s = time.time() - t1
    dirs = [d for d in ref.books.store.runs.iterdir() if d.name.startswith("0000-baseline")]
    b = [e for e in ref.books.store.ledger() if e["event"] == "baseline"][0]
    out = {"adopt": adopt, "init_s": round(init_s, 1), "baseline_s": round(base_s, 1),
           "init_plain_runs": len(rec.runs), "init_processes": init_processes,
           "baseline_processes": len(counter.read_text().splitlines()) - init_processes,
           "adopted": sum((d / ADOPTED_FILE).is_file() for d in dirs),
           "measured_plain": sum(not (d / ADOPTED_FILE).is_file() and "profile" not in d.name for d in dirs),
           "profiled": sum("profile" in d.name for d in dirs),
           "adoption_code": b.get("adoption_code"), "adopted_runs": b.get("adopted_runs"),
           "adopted_profiles": b.get("adopted_profiles"), "gpu_profiles_us": b.get("gpu_profiles_us"),
           "gpu_spreads_pct": ref.books.state.gpu_spreads_pct,
           "plain_run_s": ref.books.state.plain_run_s, "device": base.device.name if base.device else None,
           "recorded": base.baseline_recorded, "reason": base.reason, "metrics": b["metrics"], "runs": b["runs"]}
    ref.close()
    return out


def main_() -> int:
    out = Path(os.environ.get("OUT", "benchmarks/results/latest"))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for adopt in (True, False):
        root = Path(tempfile.mkdtemp(prefix="kopt-init-reuse-"))
        rows.append(flow(root, adopt))
        print(json.dumps(rows[-1], indent=1), flush=True)
        shutil.rmtree(root, ignore_errors=True)
    (out / "init_reuse.json").write_text(json.dumps(rows, indent=1) + "\n")
    lines = ["| init's runs | init s | baseline s | benchmark processes (init + baseline) | adopted | measured plain | "
             "profiled | init's trace as a profile | code |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {'adopted' if r['adopt'] else 'record removed'} | {r['init_s']} | {r['baseline_s']} | "
                     f"{r['init_processes']} + {r['baseline_processes']} | {r['adopted']} | {r['measured_plain']} | "
                     f"{r['profiled']} | {r['adopted_profiles'] or 0} | {r['adoption_code'] or '-'} |")
    (out / "init_reuse.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main_())
