"""Decision quality on Liger-Kernel's own RMSNorm benchmark with effects planted in its Triton kernel
(issue 24 item 6): how often save_and_test keeps, or calls regressed, a GPU-time change of known size.

The forward kernel `_rms_norm_forward_kernel` gets planted work: `_KOPT_DQ_WORK` dependent FMAs per
program on a scalar folded into an offset that is always 0 (the output is unchanged). BEST carries
W0 of it; a candidate differs from BEST only in that constant, so it does exactly that much more or
less work. The benchmark, its correctness tests and kopt.toml are Liger's and projects.py's, as in
run.py. Effects are sized on the session's own measurement: a calibration verdict at 2 x W0 gives
the target kernels' GPU time per unit of work (us per invocation summed over the harness's units,
the keep metric's quantity) and BEST's total, so an effect of p % is W0 + p/100 x total / slope.
Where W0's share of BEST's GPU time is outside [MIN_SHARE, MAX_SHARE], the repository is planted
again once, with the W0 that the slope says gives TARGET_SHARE, then baseline and calibration again.

    python liger_dq.py --src STAGE/src/liger --commit SHA --out OUT [--trials 20] [--effects ...]
        [--work DIR] [--lease-dir DIR] [--deadline-s S] [--seed-work 2048]

`--work DIR` keeps the repository, the session and dq_state.json (W0, the slope, the next trial) in
DIR: a later call on a warm machine goes on with no baseline and no calibration. Several lanes on one
host (benchmarks/real_repos/device_lanes.sh) each run their own session on their own GPU; `--merge A.json B.json`
pools their trials into one table. Writes OUT/liger_dq.json and OUT/liger_dq.md after every verdict.
Exit 1 while a target is missed (or too few trials), 2 when the session could not start.

Targets (issue 24): identical and +1% never kept; -2% kept >= 90%; -5% kept >= 95%; +5% regressed >= 95%.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from projects import LIGER, LIGER_OPS
from run import git, make_repo, versions

#: effect name -> (% change of the target kernels' GPU time, + = slower; target, what it is checked on)
EFFECTS = {"identical": (0.0, ("kept", 0.0)), "+1%": (1.0, ("kept", 0.0)), "-2%": (-2.0, ("kept", 0.90)),
           "-5%": (-5.0, ("kept", 0.95)), "+5%": (5.0, ("regressed", 0.95))}
MIN_SHARE, MAX_SHARE, TARGET_SHARE = 0.06, 0.5, 0.15
CONST = "_KOPT_DQ_WORK"
GLOBAL_ANCHOR = "_CASTING_MODE_GEMMA: tl.constexpr = tl.constexpr(1)\n"
KERNEL_ANCHOR = ("    x_base = X_ptr + row_idx * X_row_stride\n"
                 "    rstd_base = RSTD_ptr + row_idx * RSTD_row_stride\n")
# the chain starts from `eps` (a runtime argument, > 0 in practice): from a value the compiler can bound
# (row_idx) LLVM proves the chain never below -1 and drops the loop (seen compiling for sm_90)
PLANT = (f"    # kopt-mcp decision quality: {CONST} dependent FMAs per program, folded into an offset that is 0\n"
         "    _dq = eps * 1.0\n"
         f"    for _ in range({CONST}):\n"
         "        _dq = _dq * 0.999 + 1.0\n"
         "    rstd_base += (_dq < -1.0).to(tl.int64)\n")


def plant(source: str, work: int) -> str:
    """`source` (Liger's ops/rms_norm.py) with the planted work: the module constant after the
    casting-mode constants, the loop after the forward kernel's row pointers. Raises ValueError
    where an anchor is not found exactly once (another Liger version)."""
    for anchor in (GLOBAL_ANCHOR, KERNEL_ANCHOR):
        if source.count(anchor) != 1:
            raise ValueError(f"{LIGER_OPS}: anchor found {source.count(anchor)} times, need 1: {anchor!r}")
    source = source.replace(GLOBAL_ANCHOR, GLOBAL_ANCHOR + f"{CONST}: tl.constexpr = tl.constexpr({work})\n")
    return source.replace(KERNEL_ANCHOR, KERNEL_ANCHOR + PLANT)


def set_work(source: str, work: int) -> str:
    """The planted source with `work` as the constant. Raises ValueError where it is not planted."""
    new, n = re.subn(rf"^{CONST}: tl\.constexpr = tl\.constexpr\(\d+\)$",
                     f"{CONST}: tl.constexpr = tl.constexpr({work})", source, flags=re.M)
    if n != 1:
        raise ValueError(f"{CONST} is not planted once in {LIGER_OPS}")
    return new


def effect_work(w0: int, pct: float, best_us: float, slope_us: float) -> int:
    """The planted work of a candidate whose target GPU time differs from BEST's by `pct` % (+ =
    slower): w0 + pct/100 x best_us / slope_us, rounded. Raises ValueError where that is below 0
    or the slope is not positive."""
    if slope_us <= 0:
        raise ValueError(f"the calibration measured no GPU time per unit of work ({slope_us} us)")
    w = round(w0 + pct / 100.0 * best_us / slope_us)
    if w < 0:
        raise ValueError(f"{pct:+g}% needs {w} units of planted work: BEST's W0 = {w0} is too small")
    return w


def calibrate(w0: int, best_us: float, cand_us: float) -> dict:
    """From a verdict at 2 x w0: the slope (us of target GPU time per unit of work), BEST's total
    GPU time with w0 planted, the planted share of it, and the w0 that would give TARGET_SHARE."""
    slope = (cand_us - best_us) / w0
    share = w0 * slope / best_us if best_us > 0 else 0.0
    plain = best_us - w0 * slope  # BEST's time without planted work
    retarget = max(1, round(TARGET_SHARE * plain / ((1 - TARGET_SHARE) * slope))) if slope > 0 else None
    return {"w0": w0, "slope_us": slope, "best_us": best_us, "share": share, "retarget_w0": retarget}


def summary(rows: dict[str, list[dict]]) -> dict[str, dict]:
    """Per effect: trials, kept (improved), regressed, the verdicts, and whether its target is met
    (None: no trial yet)."""
    out = {}
    for name, trials in rows.items():
        n = len(trials)
        kept = sum(t["verdict"] == "improved" for t in trials)
        regressed = sum(t["verdict"] == "regressed" for t in trials)
        what, share = EFFECTS[name][1]
        got = (kept if what == "kept" else regressed) / n if n else None
        met = None if got is None else (got <= share if what == "kept" and share == 0.0 else got >= share)
        verdicts: dict[str, int] = {}
        for t in trials:
            verdicts[t["verdict"]] = verdicts.get(t["verdict"], 0) + 1
        out[name] = {"trials": n, "kept": kept, "regressed": regressed, "verdicts": verdicts, "met": met,
                     "target": f"{what} {'never' if share == 0.0 else f'>= {share:.0%}'}"}
    return out


def write(out: Path, rows: dict[str, list[dict]], meta: dict) -> int:
    """OUT/liger_dq.json and .md; 0 when every effect has trials and meets its target."""
    s = summary(rows)
    (out / "liger_dq.json").write_text(json.dumps({"meta": meta, "rows": rows, "summary": s}, indent=1) + "\n")
    lines = ["# Decision quality on Liger-Kernel's own RMSNorm benchmark, effects planted in its Triton kernel", "",
             f"{meta.get('versions', '')}; commit {meta.get('commit', '')}; rules {meta.get('rules', '')}", "",
             f"calibration: {json.dumps(meta.get('calibration'))}", "",
             "| effect | trials | kept | regressed | verdicts | target | met |", "|---|---|---|---|---|---|---|"]
    for name, r in s.items():
        lines.append(f"| {name} | {r['trials']} | {r['kept']} | {r['regressed']} | {r['verdicts']} | {r['target']} | "
                     f"{'-' if r['met'] is None else 'yes' if r['met'] else 'NO'} |")
    secs = [t["seconds"] for ts in rows.values() for t in ts]
    if secs:
        lines += ["", f"seconds per verdict: median {sorted(secs)[len(secs) // 2]:.1f}, {len(secs)} verdicts"]
    (out / "liger_dq.md").write_text("\n".join(lines) + "\n")
    return 0 if all(r["met"] for r in s.values()) else 1


def _repo(src: Path, dest: Path, commit: str, w0: int) -> Path:
    """A fresh repository: the snapshot, the planted work (W0) and kopt.toml, one commit each."""
    if dest.exists():
        shutil.rmtree(dest)
    repo = make_repo(src, dest, LIGER, commit)
    ops = repo / LIGER_OPS
    ops.write_text(plant(ops.read_text(), w0))
    git(repo, "commit", "-q", "-am", f"kopt-mcp decision quality: {w0} units of planted work in the forward kernel")
    (repo / "kopt.toml").write_text(LIGER.toml)
    git(repo, "add", "kopt.toml")
    git(repo, "commit", "-q", "-m", "kopt.toml (projects.py, finished by hand)")
    return repo


def _start(a, work: Path, ref_of) -> tuple[object, dict] | None:
    """The session of a new run: repository, baseline, calibration (planted again once where the
    share is off). None when the baseline could not be recorded."""
    w0 = a.seed_work
    for attempt in (1, 2):
        repo = _repo(a.src, work / "repo", a.commit, w0)
        ref = ref_of(repo)
        b = ref.run_benchmark()
        print(f"baseline (W0 = {w0}): recorded={b.baseline_recorded} {b.reason[:200]}", flush=True)
        if not b.baseline_recorded:
            ref.close()
            return None
        ops = ref.where.workspace_path / LIGER_OPS
        ops.write_text(set_work(ops.read_text(), 2 * w0))
        v = ref.save_and_test("global", f"calibration: {2 * w0} units of planted work instead of {w0}")
        if v.verdict == "improved":
            ref.revert_to_best("calibration done")
        cal = calibrate(w0, v.gpu_best_us or 0.0, v.gpu_candidate_us or 0.0)
        cal.update(verdict=v.verdict, code=v.code, attempt=attempt)
        print(f"calibration: {json.dumps(cal)}", flush=True)
        if MIN_SHARE <= cal["share"] <= MAX_SHARE or attempt == 2 or not cal["retarget_w0"]:
            return ref, cal  # a second planting out of range too: the effects are sized on it anyway
        ref.close()
        w0 = cal["retarget_w0"]
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", type=Path)
    ap.add_argument("--commit", default="unknown")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--trials", type=int, default=20, help="trials per effect (this call, at most)")
    ap.add_argument("--effects", default=",".join(EFFECTS))
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--lease-dir", type=Path, default=None)
    ap.add_argument("--deadline-s", type=float, default=None, help="start no verdict that would end past this")
    ap.add_argument("--seed-work", type=int, default=2048, help="W0 of the first planting")
    ap.add_argument("--merge", type=Path, nargs="+", default=None, help="liger_dq.json files: one pooled table")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    names = [n for n in a.effects.split(",") if n]
    if any(n not in EFFECTS for n in names):
        ap.error(f"--effects: from {list(EFFECTS)}")
    if a.merge:
        docs = [json.loads(p.read_text()) for p in a.merge]
        rows = {n: [t for d in docs for t in d["rows"].get(n, [])] for n in names}
        return write(a.out, rows, {**docs[0]["meta"], "merged": [str(p) for p in a.merge]})
    if a.src is None:
        ap.error("--src is required (or --merge)")

    from kopt_mcp.referee import Referee
    from kopt_mcp.rules.floor import KEEP_RULES

    t0 = time.monotonic()
    work = a.work or Path(tempfile.mkdtemp(prefix="kopt-liger-dq-"))
    work.mkdir(parents=True, exist_ok=True)
    state_file = work / "dq_state.json"

    def ref_of(repo: Path):
        return Referee(repo, tag="dq", lease_dir=a.lease_dir or work / "leases")

    if state_file.exists():
        state = json.loads(state_file.read_text())
        ref = ref_of(work / "repo")
        ref.revert_to_best("decision-quality run resumed")
        print(f"resumed: next trial {state['next']}, calibration {state['calibration']}", flush=True)
    else:
        started = _start(a, work, ref_of)
        if started is None:
            return 2
        ref, cal = started
        state = {"calibration": cal, "next": 0, "rows": {n: [] for n in names}}
        state_file.write_text(json.dumps(state))
    cal = state["calibration"]
    meta = {"commit": a.commit, "versions": versions(), "rules": KEEP_RULES, "calibration": cal,
            "benchmark": LIGER.command}
    rows = {n: state["rows"].get(n, []) for n in names}
    code, longest = write(a.out, rows, meta), 0.0
    ops = ref.where.workspace_path / LIGER_OPS
    try:
        for k in range(state["next"], state["next"] + a.trials * len(names)):
            name = names[k % len(names)]
            if a.deadline_s is not None and time.monotonic() - t0 + 1.2 * longest > a.deadline_s:
                print(f"deadline: stopping before trial {k} ({name})", flush=True)
                break
            pct = EFFECTS[name][0]
            w = effect_work(cal["w0"], pct, cal["best_us"], cal["slope_us"])
            text = set_work(ops.read_text(), w)
            ops.write_text(text if pct else text + f"\n# kopt-mcp decision quality: trial {k}, identical\n")
            t = time.monotonic()
            v = ref.save_and_test("global", f"{name} (planted work {w}) trial {k}")
            secs = time.monotonic() - t
            longest = max(longest, secs)
            rows[name].append({"trial": k, "work": w, "verdict": v.verdict, "code": v.code, "rounds": v.rounds,
                               "benchmark_runs": len(v.run_dirs), "seconds": round(secs, 1),
                               "gpu_delta_pct": v.gpu_delta_pct, "gpu_floor_pct": v.gpu_floor_pct})
            if v.verdict in ("improved", "incorrect", "divergent"):
                ref.revert_to_best(f"decision-quality trial {k} ({name}) done")
            print(f"trial {k} {name} (work {w}): {v.verdict} {v.code} {v.gpu_delta_pct} in {secs:.1f} s", flush=True)
            state.update(next=k + 1, rows=rows)
            state_file.write_text(json.dumps(state))
            code = write(a.out, rows, meta)
    finally:
        ref.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
