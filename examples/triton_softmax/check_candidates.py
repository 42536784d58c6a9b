"""Replay scenario.toml on a real GPU and check that every candidate earns its expected verdict.

    python check_candidates.py OUT.json [--runs 3] [--small]

Needs only torch, triton and the standard library (and git on PATH). It copies this example
into a temporary git repo, commits it as the baseline and walks the steps of scenario.toml
the way the server does:

- each step's patch is applied with `git apply` to the working tree;
- a patch that touches a protected path ([protect] in kopt.toml) is `rejected` without a run;
- otherwise the last kept state (parent, a worktree at BEST) and the candidate are measured
  alternately, `--runs` times each (A B A B ...), after one untimed warm-up run of any tree not
  run before (Triton JIT);
- `then = "commit"` commits the candidate (BEST moves); an `incorrect` candidate stays in the
  tree for the next (repair) patch; every other step is reverted to BEST.

Per step it prints the per-class median us_per_call and err_count of parent and candidate, the
per-class change, and whether the expectation holds:

  improved   err_count 0 everywhere; target class >= 2% faster (global: every class), no class
             >= 2% slower; with then = "commit" also geomean over classes >= 3% faster
  divergent  err_count 0; target class >= 2% faster and some other class >= 2% slower
  regressed  err_count 0; target class >= 2% slower (global: the geomean)
  tie        err_count 0; every class within 1%
  incorrect  err_count > 0 in some class of the candidate
  rejected   the patch touches a protected path

All numbers (every run of every state) go to OUT.json. Exit status 0 when every expectation
holds, 1 otherwise.

--small runs the benchmark's small shapes (KOPT_EXAMPLE_SMALL=1), and with no CUDA device sets
TRITON_INTERPRET=1 so the kernels run on the CPU: the speed checks are then skipped and only
patch application, protected paths and err_count are checked.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
FASTER_PCT = 2.0  # "clearly" faster / slower
TIE_PCT = 1.0  # the server's noise_pct
KEEP_GEOMEAN_PCT = 3.0  # a committed improvement moves the geomean at least this much
SKIP_COPY = {"results", "__pycache__", ".git"}


def sh(args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess:
    cmd = ["git", "-c", "user.email=check@kopt.invalid", "-c", "user.name=check"] + args
    return subprocess.run(cmd, cwd=cwd, check=check, capture_output=True, text=True)


def class_key(row: dict, config_columns: list[str]) -> str:
    return ",".join(f"{c}={row[c]}" for c in config_columns)


def tree_digest(d: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(d.rglob("*.py")):
        if not SKIP_COPY.intersection(p.relative_to(d).parts):
            h.update(str(p.relative_to(d)).encode() + b"\0" + p.read_bytes())
    return h.hexdigest()[:12]


class Bench:
    def __init__(self, cfg: dict, env: dict, timeout_s: float):
        b = cfg["benchmark"]
        self.metric = b["metric"]
        self.err_cols = b["correctness_columns"]
        self.config_columns = b["config_columns"]
        self.csv_glob = b["csv"]
        self.env = env
        self.timeout_s = timeout_s
        self.warmed: set[str] = set()

    def run(self, d: Path) -> dict:
        """One run of bench.py in d: {class key: {"us": float, "err": int}} plus run info."""
        for old in d.glob(self.csv_glob):
            old.unlink()
        t0 = time.time()
        p = subprocess.run([sys.executable, "bench.py"], cwd=d, env=self.env, capture_output=True, text=True,
                           timeout=self.timeout_s)
        wall = time.time() - t0
        rec = {"rc": p.returncode, "wall_s": round(wall, 2), "classes": {}}
        if p.returncode != 0:
            rec["stderr_tail"] = p.stderr[-2000:]
            return rec
        files = [f for f in d.glob(self.csv_glob) if f.stat().st_mtime >= t0 - 1]
        if len(files) != 1:
            rec["rc"] = -1
            rec["stderr_tail"] = f"expected one fresh CSV matching {self.csv_glob}, found {files}"
            return rec
        with open(files[0], newline="") as f:
            for row in csv.DictReader(f):
                rec["classes"][class_key(row, self.config_columns)] = {
                    "us": float(row[self.metric]),
                    "err": sum(int(float(row[c])) for c in self.err_cols),
                }
        return rec

    def warm(self, d: Path) -> None:
        digest = tree_digest(d)
        if digest not in self.warmed:
            self.run(d)
            self.warmed.add(digest)


def summarize(runs: list[dict]) -> dict:
    """Per-class median us and max err_count over the successful runs."""
    out: dict[str, dict] = {}
    keys = [k for r in runs for k in r["classes"]]
    for k in dict.fromkeys(keys):
        us = [r["classes"][k]["us"] for r in runs if k in r["classes"]]
        err = [r["classes"][k]["err"] for r in runs if k in r["classes"]]
        out[k] = {"median_us": statistics.median(us), "err_count": max(err), "us_runs": us}
    return out


def pct(new: float, old: float) -> float:
    return (new - old) / old * 100.0


def evaluate(step: dict, parent: dict, cand: dict, speed: bool) -> list[tuple[bool, str]]:
    """(holds, description) for each part of the step's expectation."""
    expect, target = step["expect"], step.get("target", "global")
    checks: list[tuple[bool, str]] = []
    perr = {k: v["err_count"] for k, v in parent.items()}
    cerr = {k: v["err_count"] for k, v in cand.items()}
    checks.append((bool(perr) and all(e == 0 for e in perr.values()), "parent err_count 0 on every class"))
    if expect in ("incorrect", "abandoned"):
        checks.append((any(e > 0 for e in cerr.values()), "candidate err_count > 0 on some class"))
        return checks
    checks.append((set(cerr) == set(perr) and all(e == 0 for e in cerr.values()),
                   "candidate err_count 0 on every class"))
    if not speed:
        checks.append((True, "speed checks skipped (--small)"))
        return checks
    common = [k for k in parent if k in cand]
    d = {k: pct(cand[k]["median_us"], parent[k]["median_us"]) for k in common}
    geo = (math.exp(sum(math.log(cand[k]["median_us"] / parent[k]["median_us"]) for k in common) / len(common))
           - 1) * 100 if common else float("nan")
    if target != "global" and target not in d:
        checks.append((False, f"target class {target} is not among the measured classes {common}"))
        return checks
    if expect == "improved":
        if target == "global":
            checks.append((all(v <= -FASTER_PCT for v in d.values()), f"every class >= {FASTER_PCT}% faster"))
        else:
            checks.append((d[target] <= -FASTER_PCT, f"target >= {FASTER_PCT}% faster ({d[target]:+.1f}%)"))
            checks.append((all(v < FASTER_PCT for v in d.values()), f"no class >= {FASTER_PCT}% slower"))
        if step.get("then") == "commit":
            checks.append((geo <= -KEEP_GEOMEAN_PCT, f"geomean >= {KEEP_GEOMEAN_PCT}% faster ({geo:+.1f}%)"))
    elif expect == "divergent":
        others = {k: v for k, v in d.items() if k != target}
        checks.append((d[target] <= -FASTER_PCT, f"target >= {FASTER_PCT}% faster ({d[target]:+.1f}%)"))
        worse = [k for k, v in others.items() if v >= FASTER_PCT]
        checks.append((bool(worse), f"another class >= {FASTER_PCT}% slower ({', '.join(worse) or 'none'})"))
    elif expect == "regressed":
        v = geo if target == "global" else d[target]
        checks.append((v >= FASTER_PCT, f"{'geomean' if target == 'global' else 'target'} >= {FASTER_PCT}% slower "
                                        f"({v:+.1f}%)"))
    elif expect == "tie":
        checks.append((all(abs(v) < TIE_PCT for v in d.values()), f"every class within {TIE_PCT}%"))
    else:
        checks.append((False, f"no check for expect = {expect!r}"))
    return checks


def spread_pct(s: dict) -> float:
    """(max - min) / median of one state's runs, in percent."""
    return (max(s["us_runs"]) - min(s["us_runs"])) / s["median_us"] * 100.0


def print_table(parent: dict, cand: dict) -> None:
    print(f"  {'class':34s} {'parent us':>10s} {'cand us':>10s} {'change':>8s}  {'spread p/c':>13s}  err parent/cand")
    for k in parent:
        p = parent[k]
        c = cand.get(k)
        if c is None:
            print(f"  {k:34s} {p['median_us']:10.2f} {'-':>10s}")
            continue
        print(f"  {k:34s} {p['median_us']:10.2f} {c['median_us']:10.2f} "
              f"{pct(c['median_us'], p['median_us']):+7.1f}%  {spread_pct(p):5.1f}%/{spread_pct(c):5.1f}%  "
              f"{p['err_count']}/{c['err_count']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_json")
    ap.add_argument("--runs", type=int, default=None, help="measured runs per state per step (default 3; 1 with --small)")
    ap.add_argument("--small", action="store_true", help="small shapes; interpreter on CPU without CUDA")
    ap.add_argument("--keep", action="store_true", help="keep the temporary repo")
    a = ap.parse_args()
    runs = a.runs or (1 if a.small else 3)

    env = dict(os.environ)
    env.pop("KOPT_PROFILE", None)
    try:
        import torch

        has_cuda = torch.cuda.is_available()
        device = torch.cuda.get_device_name() if has_cuda else "cpu"
        versions = {"torch": torch.__version__}
        import triton

        versions["triton"] = triton.__version__
    except Exception as e:  # noqa: BLE001
        print(f"torch/triton not importable: {e}", file=sys.stderr)
        return 2
    if a.small:
        env["KOPT_EXAMPLE_SMALL"] = "1"
        if not has_cuda:
            env["TRITON_INTERPRET"] = "1"
    elif not has_cuda:
        print("no CUDA device: run on the GPU machine, or pass --small for a CPU correctness check", file=sys.stderr)
        return 2
    speed = has_cuda and not a.small

    cfg = tomllib.loads((HERE / "kopt.toml").read_text())
    scenario = tomllib.loads((HERE / "scenario.toml").read_text())["step"]
    protected = cfg.get("protect", {}).get("paths", [])
    bench = Bench(cfg, env, float(cfg["benchmark"].get("timeout_s", 300)))

    tmp = Path(tempfile.mkdtemp(prefix="kopt-softmax-check-"))
    repo, best_dir = tmp / "repo", tmp / "best"
    shutil.copytree(HERE, repo, ignore=lambda d, names: [n for n in names if n in SKIP_COPY])
    sh(["init", "-q"], repo)
    sh(["add", "-A"], repo)
    sh(["commit", "-qm", "baseline"], repo)
    best = sh(["rev-parse", "HEAD"], repo).stdout.strip()
    sh(["worktree", "add", "-q", "--detach", str(best_dir), best], repo)

    report = {"device": device, "versions": versions, "python": platform.python_version(), "runs_per_state": runs,
              "small": a.small, "speed_checked": speed, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "steps": []}
    print(f"device: {device}; torch {versions['torch']}, triton {versions['triton']}; {runs} run(s) per state; "
          f"repo {repo}")
    all_ok, pending_repair = True, False
    t_start = time.time()
    for i, step in enumerate(scenario, 1):
        name, expect, target = step["name"], step["expect"], step.get("target", "global")
        print(f"\n== step {i}: {name}  (target {target}, expect {expect})")
        rec: dict = {"step": i, "name": name, "patch": step.get("patch"), "target": target, "expect": expect,
                     "then": step.get("then"), "parent_commit": best}
        if not pending_repair:
            sh(["reset", "-q", "--hard", best], repo)
            sh(["clean", "-qfd"], repo)
        pending_repair = False
        checks: list[tuple[bool, str]] = []
        if step.get("patch"):
            patch = HERE / step["patch"]
            stat = sh(["apply", "--numstat", str(patch)], repo, check=False)
            touched = [ln.split("\t", 2)[2] for ln in stat.stdout.splitlines() if ln.count("\t") >= 2]
            rec["touched"] = touched
            applied = sh(["apply", str(patch)], repo, check=False)
            checks.append((applied.returncode == 0, f"{step['patch']} applies ({applied.stderr.strip()[:200]})"
                           if applied.returncode else f"{step['patch']} applies"))
            hit = [p for p in touched if any(p == q or p.startswith(q.rstrip('/') + '/') for q in protected)]
            rec["protected_touched"] = hit
            if expect == "rejected":
                checks.append((bool(hit), f"touches a protected path ({', '.join(hit) or 'none'})"))
            elif hit:
                checks.append((False, f"touches a protected path ({', '.join(hit)}) but expect = {expect}"))
        elif expect == "rejected":
            checks.append((False, "rejected expected but the step has no patch"))

        ran = expect != "rejected" and all(ok for ok, _ in checks)
        if ran:
            bench.warm(best_dir)
            bench.warm(repo)
            prs, crs = [], []
            for _ in range(runs):
                prs.append(bench.run(best_dir))
                crs.append(bench.run(repo))
            for label, rs in (("parent", prs), ("candidate", crs)):
                bad = [r for r in rs if r["rc"] != 0]
                if bad:
                    checks.append((False, f"{label} bench.py failed: {bad[0].get('stderr_tail', '')[-300:]}"))
            parent, cand = summarize([r for r in prs if r["rc"] == 0]), summarize([r for r in crs if r["rc"] == 0])
            rec.update(parent_runs=prs, candidate_runs=crs, parent=parent, candidate=cand)
            print_table(parent, cand)
            if parent and cand:
                common = [k for k in parent if k in cand]
                rec["change_pct"] = {k: pct(cand[k]["median_us"], parent[k]["median_us"]) for k in common}
                rec["geomean_change_pct"] = (math.exp(sum(math.log(cand[k]["median_us"] / parent[k]["median_us"])
                                                          for k in common) / len(common)) - 1) * 100
                print(f"  geomean change: {rec['geomean_change_pct']:+.1f}%")
                checks += evaluate(step, parent, cand, speed)
        ok = all(c for c, _ in checks)
        all_ok &= ok
        rec["checks"] = [{"ok": c, "what": w} for c, w in checks]
        rec["ok"] = ok
        for c, w in checks:
            print(f"  [{'ok' if c else 'FAIL'}] {w}")
        print(f"  => {'PASS' if ok else 'FAIL'}")

        # advance the scenario as the server would after the expected verdict
        if step.get("then") == "commit":
            sh(["add", "-A"], repo)
            sh(["commit", "-qm", f"step {i}: {name}"], repo)
            best = sh(["rev-parse", "HEAD"], repo).stdout.strip()
            sh(["checkout", "-q", "--detach", best], best_dir)
        elif expect in ("incorrect",):
            pending_repair = True
        report["steps"].append(rec)
        Path(a.out_json).write_text(json.dumps(report, indent=1))

    # the server also runs the benchmark under a profiler with KOPT_PROFILE=1: smoke-test that mode
    penv = dict(env, KOPT_PROFILE="1")
    prof = Bench(cfg, penv, bench.timeout_s).run(best_dir)
    pchecks = [(prof["rc"] == 0, f"KOPT_PROFILE=1 run exits 0 ({prof.get('stderr_tail', '')[-200:]})"
                if prof["rc"] else "KOPT_PROFILE=1 run exits 0")]
    if prof["rc"] == 0:
        n_classes = len(report["steps"][0].get("parent", {})) if report["steps"] else 0
        pchecks.append((len(prof["classes"]) == n_classes or not n_classes,
                        f"KOPT_PROFILE=1 writes every class ({len(prof['classes'])})"))
        pchecks.append((all(v["err"] == 0 and math.isfinite(v["us"]) for v in prof["classes"].values()),
                        "KOPT_PROFILE=1 rows: err_count 0, finite us_per_call"))
    print("\n== KOPT_PROFILE=1 smoke run on the final BEST tree")
    for c, w in pchecks:
        print(f"  [{'ok' if c else 'FAIL'}] {w}")
    report["profile_run"] = {"run": prof, "checks": [{"ok": c, "what": w} for c, w in pchecks]}
    all_ok &= all(c for c, _ in pchecks)

    report["all_ok"] = all_ok
    report["elapsed_s"] = round(time.time() - t_start, 1)
    Path(a.out_json).write_text(json.dumps(report, indent=1))
    print(f"\nsummary ({report['elapsed_s']} s):")
    for r in report["steps"]:
        print(f"  {r['step']}. {r['name']:34s} expect {r['expect']:10s} {'PASS' if r['ok'] else 'FAIL'}")
    print(f"{'ALL EXPECTATIONS HOLD' if all_ok else 'SOME EXPECTATIONS FAIL'}; numbers in {a.out_json}")
    if not a.keep:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
