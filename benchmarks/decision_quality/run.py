"""Decision-quality benchmark: how often save_and_test keeps planted effects of known size.

Each planted candidate changes only `WORK` in the example's kernel.py, i.e. exactly that much extra
(slower) or removed (faster) work; BEST is never committed over, so every trial faces the same
BEST_COMMIT. Trials run round-robin over the effects (drift hits all alike). Per effect it records
how often the candidate was kept (verdict `improved`), the verdicts, the paired rounds and
candidate runs per verdict, and the wall seconds of the GPU lease per verdict.

    python benchmarks/decision_quality/run.py --device gpu --trials 20 --out OUT_DIR   (NVIDIA GPU, cupy)
    python benchmarks/decision_quality/run.py --device cpu --trials 3 --out OUT_DIR    (CI: NumPy)

Writes OUT_DIR/decision_quality.md and OUT_DIR/decision_quality.json; exit 1 if a target is missed.
Targets (issue 4): identical and slower never kept; -1% and -2% kept >= 95%; -0.5% >= 80%;
at most 3 candidate runs per verdict. The CPU version plants larger effects (a shared 2-core VM
is noisier) and checks the same "never keep a non-improvement" rule.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

# effect: % change of work (- = less work = faster); target: minimum kept share, or None = never kept
GPU_EFFECTS = {"identical": (0.0, None), "-0.5%": (-0.5, 0.80), "-1%": (-1.0, 0.95), "-2%": (-2.0, 0.95),
               "-5%": (-5.0, 0.95), "+1%": (1.0, None), "+2%": (2.0, None)}
CPU_EFFECTS = {"identical": (0.0, None), "-30%": (-30.0, 0.66), "+20%": (20.0, None)}
MAX_CANDIDATE_RUNS = 3


def make_repo(kind: str, dest: Path) -> Path:
    """A fresh git repository holding the planted-effect example (repo_gpu or repo_cpu)."""
    shutil.copytree(HERE / f"repo_{kind}", dest)
    (dest / ".gitignore").write_text("results/\n__pycache__/\n")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-q", "-m", "planted"]):
        subprocess.run(["git", *args], cwd=dest, check=True)
    return dest


def set_work(workspace: Path, base: int, pct: float) -> None:
    path = workspace / "kernel.py"
    work = round(base * (1.0 + pct / 100.0))
    path.write_text(re.sub(r"^WORK = .*$", f"WORK = {work}", path.read_text(), flags=re.M))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("gpu", "cpu"), required=True)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--lease-dir", type=Path, default=None)
    a = ap.parse_args()

    from kopt_mcp.referee import Referee

    effects = GPU_EFFECTS if a.device == "gpu" else CPU_EFFECTS
    a.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="kopt-dq-"))
    repo = make_repo(a.device, tmp / "repo")
    expr = re.search(r"^WORK = (.*)$", (repo / "kernel.py").read_text(), re.M).group(1)
    base = int(eval(expr, {"__builtins__": {}}))  # an arithmetic literal such as 64 * 2**20
    ref = Referee(repo, tag="dq", lease_dir=a.lease_dir or tmp / "leases")
    t0 = time.perf_counter()
    baseline = ref.run_benchmark()
    baseline_s = time.perf_counter() - t0
    assert baseline.baseline_recorded, baseline.reason
    rows: dict[str, list[dict]] = {name: [] for name in effects}
    for trial in range(a.trials):
        for name, (pct, _) in effects.items():
            set_work(ref.workspace_path, base, pct)
            if pct == 0.0:  # identical work, but a changed file (save_and_test refuses an empty diff)
                kp = ref.workspace_path / "kernel.py"
                kp.write_text(kp.read_text() + f"# trial {trial}\n")
            t = time.perf_counter()
            v = ref.save_and_test("global", f"{name} trial {trial}")
            secs = time.perf_counter() - t
            # every run of the candidate: script rounds and the keep metric's profiled run
            cand_runs = sum(1 for d in v.run_dirs if re.search(r"-candidate(-profile)?(-\d+)?$", d))
            rows[name].append({"verdict": v.verdict, "rounds": v.rounds, "candidate_runs": cand_runs,
                               "seconds": round(secs, 2), "target_deltas_pct": v.target_deltas_pct,
                               "gpu_delta_pct": v.gpu_delta_pct, "reason": v.reason})
            if v.verdict == "improved":
                ref.revert_to_best(f"decision-quality trial {trial}: {name} discarded")
            print(f"trial {trial} {name}: {v.verdict} rounds={v.rounds} {secs:.1f}s", flush=True)
    ref.close()
    return report(a, effects, rows, baseline_s, ref)


def report(a, effects, rows, baseline_s: float, ref) -> int:
    lines = [f"# Decision quality ({a.device}, {a.trials} trials per effect)", "",
             f"Baseline ({ref.cfg.gates.baseline_runs} runs + profile): {baseline_s:.1f} s. Gates: noise "
             f"{ref.cfg.gates.noise_pct:g}%, confirmations {ref.cfg.gates.confirmations}, confidence "
             f"{ref.cfg.gates.confidence:g}, max_rounds {ref.cfg.gates.max_rounds}.", "",
             "| planted effect (work) | kept | target | verdicts | mean paired rounds | max candidate runs (script + profiled) | "
             "wall s per verdict (mean) | mean measured delta | met |",
             "|---|---|---|---|---|---|---|---|---|"]
    ok_all = True
    for name, (_pct, target) in effects.items():
        rs = rows[name]
        kept = sum(r["verdict"] == "improved" for r in rs)
        share = kept / len(rs)
        met = (kept == 0) if target is None else share >= target
        runs_ok = max(r["candidate_runs"] for r in rs) <= MAX_CANDIDATE_RUNS
        ok_all &= met and runs_ok
        deltas = [d for r in rs for d in r["target_deltas_pct"]]
        verdicts = ", ".join(f"{k} {n}" for k, n in Counter(r["verdict"] for r in rs).most_common())
        lines.append(
            f"| {name} | {kept}/{len(rs)} ({share:.0%}) | {'never' if target is None else f'>= {target:.0%}'} | "
            f"{verdicts} | {sum(r['rounds'] for r in rs) / len(rs):.2f} | {max(r['candidate_runs'] for r in rs)} | "
            f"{sum(r['seconds'] for r in rs) / len(rs):.1f} | "
            f"{(sum(deltas) / len(deltas)) if deltas else float('nan'):+.3f}% | {'yes' if met and runs_ok else 'NO'} |")
    text = "\n".join(lines) + "\n"
    (a.out / "decision_quality.md").write_text(text)
    (a.out / "decision_quality.json").write_text(json.dumps(rows, indent=1))
    print(text)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
