"""Decision-quality benchmark: how often save_and_test keeps planted effects of known size.

Each planted candidate changes only `WORK` in the example's kernel.py, i.e. exactly that much extra
(slower) or removed (faster) work; BEST is never committed over, so every trial faces the same
BEST_COMMIT. Trials run round-robin over the effects (drift hits all alike). Per effect it records
how often the candidate was kept (verdict `improved`), the verdicts, the paired rounds and
candidate runs per verdict, and the wall seconds of the GPU lease per verdict.

    python benchmarks/decision_quality/run.py --device gpu --trials 20 --out OUT_DIR   (NVIDIA GPU, cupy)
    python benchmarks/decision_quality/run.py --device gpu-dobench --trials 20 --out OUT_DIR
        (NVIDIA GPU, torch + Triton: the same planted kernel timed by triton.testing.do_bench, a
        time-driven harness whose launch count differs from run to run; --effects picks a subset)
    python benchmarks/decision_quality/run.py --device cpu --trials 3 --out OUT_DIR    (CI: NumPy)
    python benchmarks/decision_quality/run.py --merge A.json B.json --out OUT_DIR       (one table of several runs)
    ... --work DIR: keep the planted repository and its session in DIR; a later run with the same DIR
        (a warm GPU machine) resumes that session (same BEST, no new baseline) at the next verdict

Writes OUT_DIR/decision_quality.md and OUT_DIR/decision_quality.json ({"meta": ..., "rows": effect ->
trials}) after every verdict, so a run cut off by a time limit keeps what it measured;
`--max-seconds S` starts no new verdict once it would likely end past S seconds (1.5x the longest so far). Exit 1 if
a target is missed.
Targets (issue 4): identical and slower never kept; -1% and -2% kept >= 95%; -0.5% >= 80%;
at most 3 candidate runs per verdict. The CPU version plants larger effects (a shared 2-core VM
is noisier) and checks the same "never keep a non-improvement" rule; -75% must be kept every time.
"""

from __future__ import annotations

import argparse
import csv
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

from benchmarks.common import git, init_repo  # noqa: E402

# effect: % change of work (- = less work = faster); target: minimum kept share, or None = never kept
GPU_EFFECTS = {"identical": (0.0, None), "-0.5%": (-0.5, 0.80), "-1%": (-1.0, 0.95), "-2%": (-2.0, 0.95),
               "-5%": (-5.0, 0.95), "+1%": (1.0, None), "+2%": (2.0, None)}
# -75% (4x less work): so large that no load seen on the 2-core VM hides it (kept every time);
# -30%: how much of a moderate win survives the load (recorded; 8 of 18 kept under load average 9)
CPU_EFFECTS = {"identical": (0.0, None), "-30%": (-30.0, 0.66), "-75%": (-75.0, 1.0), "+20%": (20.0, None)}
MAX_CANDIDATE_RUNS = 3


def effects_for(device: str, names: str | None = None) -> dict[str, tuple[float, float | None]]:
    """The planted effects of `device` (gpu and gpu-dobench share GPU_EFFECTS), or the subset
    `names` (comma-separated, in the device's order). Raises SystemExit naming the valid effects."""
    effects = CPU_EFFECTS if device == "cpu" else GPU_EFFECTS
    if not names:
        return effects
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in effects]
    if unknown:
        raise SystemExit(f"unknown effect(s) {unknown}: choose from {list(effects)}")
    return {k: v for k, v in effects.items() if k in wanted}


def make_repo(kind: str, dest: Path, confidence: float | None = None) -> Path:
    """A fresh git repository holding the planted-effect example (repo_gpu, repo_gpu_dobench or repo_cpu),
    with [gates] confidence set to `confidence` where given (else the example's own)."""
    shutil.copytree(HERE / f"repo_{kind.replace('-', '_')}", dest)
    if confidence is not None:
        toml = dest / "kopt.toml"
        toml.write_text(toml.read_text().replace("[gates]\n", f"[gates]\nconfidence = {confidence!r}\n", 1))
    (dest / ".gitignore").write_text("results/\n__pycache__/\n")
    return init_repo(dest, "planted")


def best_work(repo: Path) -> int:
    """BEST's WORK, read from the committed kernel.py of a planted repository (an arithmetic literal such
    as 64 * 2**20)."""
    expr = re.search(r"^WORK = (.*)$", git(repo, "show", "HEAD:kernel.py"), re.M).group(1)
    return int(eval(expr, {"__builtins__": {}}))


def run_bench(work: Path, env: dict[str, str]) -> float:
    """Run a planted repository's `python bench.py` once in `work` (a copy of repo_gpu, repo_gpu_dobench
    or repo_cpu) with `env`; its us_per_call (us). Raises RuntimeError holding the end of its stderr
    when it exits non-zero."""
    p = subprocess.run([sys.executable, "bench.py"], cwd=work, env=env, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        raise RuntimeError(p.stderr[-2000:])
    with open(work / "results" / "bench.csv") as f:
        return float(next(r for r in csv.DictReader(f))["us_per_call"])


def set_work(workspace: Path, base: int, pct: float) -> None:
    path = workspace / "kernel.py"
    work = round(base * (1.0 + pct / 100.0))
    path.write_text(re.sub(r"^WORK = .*$", f"WORK = {work}", path.read_text(), flags=re.M))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("gpu", "gpu-dobench", "cpu"))
    ap.add_argument("--effects", default=None,
                    help="comma-separated subset of the device's planted effects (e.g. 'identical,-1%%,+1%%')")
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--lease-dir", type=Path, default=None)
    ap.add_argument("--max-seconds", type=float, default=None,
                    help="start no new verdict that would likely end past this many seconds (1.5x the longest so far)")
    ap.add_argument("--work", type=Path, default=None,
                    help="folder of the planted repository and its session; an existing one is resumed "
                         "(no new baseline; it goes on at the next verdict)")
    ap.add_argument("--confidence", type=float, default=None,
                    help="[gates] confidence of a new planted repository (default: the example's, 0.995)")
    ap.add_argument("--merge", type=Path, nargs="+", default=None,
                    help="decision_quality.json files of earlier runs: write one table of all their trials")
    a = ap.parse_args()
    if a.merge:
        return merge(a.merge, a.out)
    if a.device is None:
        ap.error("--device is required (or --merge)")

    from kopt_mcp.referee import Referee
    from kopt_mcp.rules.floor import KEEP_RULES

    effects = effects_for(a.device, a.effects)
    a.out.mkdir(parents=True, exist_ok=True)
    tmp = a.work or Path(tempfile.mkdtemp(prefix="kopt-dq-"))
    resumed = (tmp / "repo" / ".git").is_dir()
    repo = tmp / "repo" if resumed else make_repo(a.device, tmp / "repo", a.confidence)
    # BEST's WORK, read from the committed kernel (a resumed workspace holds the last candidate's)
    base = best_work(repo)
    ref = Referee(repo, tag="dq", lease_dir=a.lease_dir or tmp / "leases")
    # where a resumed run goes on: "TRIAL EFFECT_INDEX" of the next verdict, and the profiler the
    # baseline resolved (a resumed session holds no device lease until its first run)
    counter, profiler_file = tmp / "next_verdict", tmp / "profiler"
    trial0, index0 = map(int, counter.read_text().split()) if resumed and counter.exists() else (0, 0)
    t0 = time.perf_counter()
    if resumed and ref.books.state.phase.value != "needs_baseline":
        ref.revert_to_best("decision-quality run resumed")  # a run cut off mid-trial left a candidate
        print(f"resumed the session in {tmp} at trial {trial0}, effect {index0} (no new baseline)", flush=True)
    else:
        baseline = ref.run_benchmark()
        assert baseline.baseline_recorded, baseline.reason
        profiler_file.write_text(ref.profiler().name)
    baseline_s = time.perf_counter() - t0
    g = ref.what.cfg.gates
    meta = {"device": a.device, "effects": list(effects), "baseline_s": round(baseline_s, 2), "baseline_runs": g.baseline_runs,
            "noise_pct": g.noise_pct, "confirmations": g.confirmations, "confidence": g.confidence,
            "screen_confidence": g.screen_confidence, "max_rounds": g.max_rounds,
            "min_gpu_gain_pct": g.min_gpu_gain_pct, "profiler": profiler_file.read_text(), "rules": KEEP_RULES}
    rows: dict[str, list[dict]] = {name: [] for name in effects}
    names = list(effects)
    # round-robin over the effects, one verdict at a time, so a time limit cuts at a verdict, not a round
    order = [(t, i) for t in range(trial0, trial0 + a.trials) for i in range(len(names))][index0:]
    code, longest = 0, 0.0
    for n_done, (trial, i) in enumerate(order):
        spent = time.perf_counter() - t0
        if a.max_seconds is not None and n_done and spent + 1.5 * longest > a.max_seconds:
            print(f"stopping before trial {trial} {names[i]}: another verdict would likely end past "
                  f"--max-seconds {a.max_seconds:g}", flush=True)
            break
        name, (pct, _) = names[i], effects[names[i]]
        set_work(ref.where.workspace_path, base, pct)
        if pct == 0.0:  # identical work, but a changed file (save_and_test refuses an empty diff)
            kp = ref.where.workspace_path / "kernel.py"
            kp.write_text(kp.read_text() + f"# trial {trial}\n")
        t = time.perf_counter()
        v = ref.save_and_test("global", f"{name} trial {trial}")
        secs = time.perf_counter() - t
        longest = max(longest, secs)
        # every run of the candidate: script rounds and the keep metric's profiled run
        cand_runs = sum(1 for d in v.run_dirs if re.search(r"-candidate(-profile)?(-\d+)?$", d))
        rows[name].append({"trial": trial, "verdict": v.verdict, "rounds": v.rounds, "candidate_runs": cand_runs,
                           "seconds": round(secs, 2), "target_deltas_pct": v.target_deltas_pct,
                           "gpu_delta_pct": v.gpu_delta_pct, "reason": v.reason})
        if v.verdict == "improved":
            ref.revert_to_best(f"decision-quality trial {trial}: {name} discarded")
        print(f"trial {trial} {name}: {v.verdict} rounds={v.rounds} {secs:.1f}s", flush=True)
        code = report(a.out, effects, rows, meta)
        nxt = (trial, i + 1) if i + 1 < len(names) else (trial + 1, 0)
        counter.write_text(f"{nxt[0]} {nxt[1]}")
    ref.close()
    return code


def merge(files: list[Path], out: Path) -> int:
    """One report of the trials of several runs' decision_quality.json (same device and gates)."""
    runs = [json.loads(f.read_text()) for f in files]
    for f, r in zip(files, runs):
        if "meta" not in r:
            raise SystemExit(f"{f}: no \"meta\" (written before 2026-11-23, gates not recorded): cannot merge")
    metas = [r["meta"] for r in runs]
    differ = {k for m in metas for k in m if k != "baseline_s" and m.get(k) != metas[0].get(k)}
    if differ:
        raise SystemExit(f"cannot merge runs whose {', '.join(sorted(differ))} differ")
    effects = effects_for(metas[0]["device"], ",".join(metas[0].get("effects", [])) or None)
    rows = {name: [t for r in runs for t in r["rows"].get(name, [])] for name in effects}
    meta = {**metas[0], "baseline_s": max(m["baseline_s"] for m in metas), "merged_runs": len(runs)}
    out.mkdir(parents=True, exist_ok=True)
    return report(out, effects, rows, meta)


def report(out: Path, effects, rows: dict[str, list[dict]], meta: dict) -> int:
    """Write decision_quality.md (the table) and .json ({"meta", "rows"}) into `out`; 0 when every
    target is met, else 1. Effects with no trial yet are left out."""
    n = min((len(v) for v in rows.values() if v), default=0)
    runs = f", {meta['merged_runs']} runs merged" if meta.get("merged_runs") else ""
    lines = [f"# Decision quality ({meta['device']}, {n} trials per effect{runs})", "",
             f"Baseline ({meta['baseline_runs']} runs + profiles): {meta['baseline_s']:.1f} s. Profiler: "
             f"{meta['profiler']}. Gates: noise {meta['noise_pct']:g}%, confirmations {meta['confirmations']}, "
             f"confidence {meta['confidence']:g} (screen {meta['screen_confidence']:g}), max_rounds "
             f"{meta['max_rounds']}, min_gpu_gain_pct {meta['min_gpu_gain_pct']:g}. Keep rules: "
             f"{meta.get('rules', 'not recorded')}.", "",
             "| planted effect (work) | kept | target | verdicts | mean paired rounds | max candidate runs (script + profiled) | "
             "wall s per verdict (mean) | mean measured delta | met |",
             "|---|---|---|---|---|---|---|---|---|"]
    ok_all = True
    for name, (_pct, target) in effects.items():
        rs = rows[name]
        if not rs:
            continue
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
    (out / "decision_quality.md").write_text(text)
    (out / "decision_quality.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(text)
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
