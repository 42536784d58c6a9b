"""Real-repository check (issue 15 item 8): the refereed loop on a fetched public kernel project with
its own, unmodified benchmark command, driven in-process through kopt_mcp.referee.Referee by a
scripted agent that tries four candidates (projects.py): identical -> tie, a real win -> improved, a
slowdown -> regressed, a broken kernel -> incorrect.

    python benchmarks/real_repos/run.py --project liger --src DIR --commit SHA --out OUT [--deadline-s S]

DIR holds the project's files (a `git archive` of the snapshot, projects.Project.paths); the script
commits them to a fresh git repository, runs `kopt-mcp init --command` on it (the proposal and its
log go to OUT/<project>-init.toml / -init.log), commits the hand-finished kopt.toml (projects.py),
records the baseline, then each candidate through save_and_test. After every step it writes
OUT/<project>.json and OUT/<project>.md (verdicts, numbers, seconds) and copies the session's
ledger; no new step starts once --deadline-s seconds have passed. Exit 0 when every candidate that
ran got its expected verdict, 1 otherwise, 2 when the baseline failed.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from projects import PROJECTS, Project

GIT_ID = ["-c", "user.name=kopt-real", "-c", "user.email=kopt-real@localhost"]


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *GIT_ID, *args], cwd=repo, check=True, capture_output=True)


def make_repo(src: Path, dest: Path, project: Project, commit: str) -> Path:
    """`src` copied to `dest` and committed as the upstream snapshot (one commit)."""
    shutil.copytree(src, dest)
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", f"{project.github} at {commit} (unmodified)")
    if project.compat:  # what the snapshot needs to run on the machine's versions, as a commit of its own
        for fix in project.compat:
            fix.apply(dest)
        git(dest, "commit", "-q", "-am", "compat: " + "; ".join(f.hypothesis for f in project.compat))
    return dest


def run_init(repo: Path, project: Project, out: Path) -> dict:
    """`kopt-mcp init --command` on the unmodified repository; its proposal and log saved to OUT."""
    t = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "kopt_mcp.app.cli", "init", "--repo", str(repo), "--command",
                        project.init_command, *project.init_flags], capture_output=True, text=True, timeout=900, check=False)
    secs = time.perf_counter() - t
    (out / f"{project.name}-init.toml").write_text(p.stdout)
    (out / f"{project.name}-init.log").write_text(p.stderr)
    return {"exit_code": p.returncode, "seconds": round(secs, 1)}


def keep_runs(state_dir: Path, dest: Path) -> None:
    """The session folder as `kopt-mcp rejudge` reads it: state.json, the ledger, and each run
    folder's traces, manifests and result copies (logs left out), as one tar.gz."""
    keep = (".json", ".jsonl", ".csv")
    with tarfile.open(dest, "w:gz") as tar:
        for f in sorted(state_dir.rglob("*")):
            if f.is_file() and f.suffix in keep and "attempts" not in f.parts:
                tar.add(f, arcname=str(f.relative_to(state_dir.parent)))


def verdict_record(cand, v, secs: float) -> dict:
    """The numbers of one verdict (VerdictResult) for the results file."""
    return {"candidate": cand.name, "target": cand.target, "expected": cand.expected, "verdict": v.verdict,
            "code": v.code, "right": v.verdict == cand.expected, "hypothesis": cand.hypothesis, "reason": v.reason,
            "seconds": round(secs, 1), "rounds": v.rounds, "benchmark_runs": len(v.run_dirs),
            "run_labels": [Path(d).name for d in v.run_dirs], "gpu_floor_pct": v.gpu_floor_pct,
            "gpu_best_us": v.gpu_best_us,
            "gpu_candidate_us": v.gpu_candidate_us, "gpu_delta_pct": v.gpu_delta_pct,
            "target_deltas_pct": v.target_deltas_pct, "divergent_classes": v.divergent_classes,
            "class_errors": v.class_errors, "warnings": v.warnings,
            "classes": [{"key": c.key, "best": c.best, "candidate": c.candidate, "mean_pct": c.mean_pct}
                        for c in v.classes],
            "cost": v.cost.model_dump() if getattr(v, "cost", None) is not None else None}


def commit_record(c, secs: float) -> dict:
    """The numbers of one commit_improvement (CommitResult) for the results file."""
    return {"committed": c.committed, "code": str(c.code), "reason": c.reason, "seconds": round(secs, 1),
            "commit": c.commit, "cost": c.cost.model_dump() if c.cost is not None else None}


def write(out: Path, project: Project, result: dict) -> None:
    (out / f"{project.name}.json").write_text(json.dumps(result, indent=1, default=str))
    lines = [f"# {project.github} at {result['commit']}: the refereed loop with its own benchmark", "",
             f"Documented command: `{project.command}`. Command (kopt.toml): `{result.get('toml_command', '(not written)')}`. "
             f"Device: {result.get('device')}. "
             f"Versions: {result.get('versions')}.", ""]
    init = result.get("init")
    if init:
        lines += [f"`kopt-mcp init --command '{project.init_command}'`: exit {init['exit_code']}, {init['seconds']} s "
                  f"(proposal: {project.name}-init.toml).", ""]
    b = result.get("baseline")
    if b and b.get("resumed"):
        lines += ["Baseline: recorded by an earlier call on this machine (`--work`); this call went on with "
                  "that session.", ""]
    elif b:
        lines += [f"Baseline: ok={b['ok']}, {b['seconds']} s, {len(b['classes'])} config classes, "
                  f"reason: {b['reason'][:300]}", ""]
    plain = (result.get("baseline") or {}).get("plain_run_s")
    if plain:
        lines += [f"One plain run of the benchmark: {plain} s (the baseline's first run).", ""]
    lines += ["| candidate | expected | verdict | code | right | GPU time BEST -> candidate (us) | GPU delta | floor | "
              "mean script delta over classes | benchmark runs | s | x plain run |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["verdicts"]:
        ds = [d for d in r["target_deltas_pct"] if d is not None]
        mean = f"{sum(ds) / len(ds):+.2f}%" if ds else "n/a"
        gpu = (f"{r['gpu_best_us']:.1f} -> {r['gpu_candidate_us']:.1f}"  # GPU-only fields: absent on a CPU
               if r.get("gpu_best_us") is not None and r.get("gpu_candidate_us") is not None else "n/a")
        gd = f"{r['gpu_delta_pct']:+.2f}%" if r.get("gpu_delta_pct") is not None else "n/a"
        fl = f"{r['gpu_floor_pct']:.2f}%" if r.get("gpu_floor_pct") is not None else "n/a"
        times = f"{r['seconds'] / plain:.1f}" if plain else "n/a"
        lines.append(f"| {r['candidate']} | {r['expected']} | {r['verdict']} | {r.get('code')} | "
                     f"{'yes' if r['right'] else 'NO'} | {gpu} | {gd} | {fl} | {mean} | {r.get('benchmark_runs')} | "
                     f"{r['seconds']} | {times} |")
    for r in result["verdicts"]:
        c = r.get("commit")
        if c:
            cost = c.get("cost") or {}
            lines.append(f"| {r['candidate']}: commit | committed | {'committed' if c['committed'] else 'refused'} | "
                         f"{c['code']} | {'yes' if c['committed'] else 'NO'} | | | | | {cost.get('runs')} | "
                         f"{c['seconds']} | {cost.get('x_plain_run')} |")
    lines += [""] + [f"- {r['candidate']}: {r['reason']}" + (f" COMMIT: {r['commit']['reason']}" if r.get("commit") else "")
                     for r in result["verdicts"]]
    if result.get("skipped"):
        lines += ["", f"Not run (deadline): {', '.join(result['skipped'])}"]
    (out / f"{project.name}.md").write_text("\n".join(lines) + "\n")


def versions() -> str:
    code = ("import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, "
            "torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    return (p.stdout.strip() or p.stderr.strip()[-300:]) + f", Python {platform.python_version()}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--project", choices=sorted(PROJECTS), required=True)
    ap.add_argument("--src", type=Path, required=True, help="the project's files (git archive of the snapshot)")
    ap.add_argument("--commit", required=True, help="the snapshot's commit sha (recorded)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--deadline-s", type=float, default=None, help="start no step after this many seconds")
    ap.add_argument("--skip-init", action="store_true", help="do not run `kopt-mcp init --command` first")
    ap.add_argument("--init-only", action="store_true",
                    help="run `kopt-mcp init --command` and stop (exit 0 when init exits 0): no baseline, no candidates")
    ap.add_argument("--use-init-toml", action="store_true",
                    help="commit init's proposal, unedited, as kopt.toml (instead of the hand-finished one of projects.py)")
    ap.add_argument("--toml", type=Path, default=None,
                    help="commit this file as kopt.toml (e.g. a recorded init proposal); implies --skip-init")
    ap.add_argument("--commit-wins", action="store_true",
                    help="commit an `improved` candidate (commit_improvement: the re-measure and the out-of-process "
                         "confirmation) instead of reverting it")
    ap.add_argument("--only", default=None, help="comma-separated candidate names (in this order; default: all, in projects.py order)")
    ap.add_argument("--lease-dir", type=Path, default=None,
                    help="the GPU lease files (default: a folder of this run's own); sessions that share a host "
                         "must share it, so each measuring call gets a GPU of its own")
    ap.add_argument("--poll-s", type=float, default=None,
                    help="[gates] gpu_poll_s for this run (a busy GPU is checked again after this many seconds)")
    ap.add_argument("--keep-runs", action="store_true",
                    help="write OUT/<project>-runs.tar.gz: every run folder's traces and result copies (for "
                         "`kopt-mcp rejudge`), with state.json and the ledger")
    ap.add_argument("--work", type=Path, default=None,
                    help="keep the repository and session here (default: a fresh temporary folder); when it "
                         "already holds them (an earlier call on the same machine), go on with that session: "
                         "its recorded baseline stands and only the --only candidates are tried")
    a = ap.parse_args()
    project = PROJECTS[a.project]
    # a `timeout` (SIGTERM) still runs the finally below: the ledger and the first run are kept
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    a.out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    left = lambda: None if a.deadline_s is None else a.deadline_s - (time.perf_counter() - t0)
    tmp = a.work or Path(tempfile.mkdtemp(prefix=f"kopt-real-{project.name}-"))
    resumed = (tmp / "repo" / "kopt.toml").exists()
    result: dict = {"project": project.github, "commit": a.commit, "command": project.command,
                    "versions": versions(), "verdicts": [], "skipped": [], "resumed": resumed}
    repo = tmp / "repo"
    if not resumed:
        make_repo(a.src, repo, project, a.commit)
        if not a.skip_init and a.toml is None:
            result["init"] = run_init(repo, project, a.out)
            print(f"init: {result['init']}", flush=True)
            if a.init_only:
                write(a.out, project, result)
                return 0 if result["init"]["exit_code"] == 0 else 1
        proposal = a.out / f"{project.name}-init.toml"
        if a.toml:
            toml, result["toml_from"] = a.toml.read_text(), f"{a.toml.name}, unedited"
        elif a.use_init_toml:
            if result.get("init", {}).get("exit_code") != 0 or not proposal.is_file():
                print("--use-init-toml: init did not write a proposal", flush=True)
                write(a.out, project, result)
                return 1
            toml, result["toml_from"] = proposal.read_text(), "init, unedited"
        else:
            toml, result["toml_from"] = project.toml, "projects.py, finished by hand"
        if a.poll_s is not None and "[gates]" not in toml:
            toml += f"\n[gates]\ngpu_poll_s = {a.poll_s}\n"
        (repo / "kopt.toml").write_text(toml)
        git(repo, "add", "kopt.toml")
        git(repo, "commit", "-q", "-m", f"kopt.toml ({result['toml_from']})")
    result["toml_command"] = tomllib.loads((repo / "kopt.toml").read_text())["benchmark"]["command"]
    write(a.out, project, result)

    from kopt_mcp.referee import Referee

    ref = Referee(repo, tag="real", lease_dir=a.lease_dir or tmp / "leases")
    code = 0
    try:
        t = time.perf_counter()
        phase = ref.status().phase
        if resumed and phase != "needs_baseline":
            print(f"resumed the session in {tmp}: phase {phase}", flush=True)
            ref.revert_to_best("real-repository check: resumed")  # whatever the last call left in the workspace
            result["baseline"] = {"ok": True, "resumed": True, "reason": "recorded by an earlier call"}
        else:
            b = ref.run_benchmark()
            result["device"] = b.device.model_dump() if b.device else None
            result["baseline"] = {"ok": b.ok and b.baseline_recorded, "reason": b.reason,
                                  "seconds": round(time.perf_counter() - t, 1),
                                  "plain_run_s": round(b.duration_s, 1),
                                  "classes": [c.model_dump() for c in b.classes], "log_tail": b.log_tail[-2000:]}
            print(f"baseline: ok={b.ok} recorded={b.baseline_recorded} {result['baseline']['seconds']} s: "
                  f"{b.reason[:300]}", flush=True)
            write(a.out, project, result)
            if not b.baseline_recorded:
                return 2
        wanted = a.only.split(",") if a.only else [c.name for c in project.candidates]
        by_name = {c.name: c for c in project.candidates}
        for cand in (by_name[n] for n in wanted if n in by_name):  # in --only's order
            if left() is not None and left() <= 0:
                result["skipped"].append(cand.name)
                continue
            cand.apply(ref.where.workspace_path)
            t = time.perf_counter()
            v = ref.save_and_test(cand.target, cand.hypothesis)
            rec = verdict_record(cand, v, time.perf_counter() - t)
            result["verdicts"].append(rec)
            code |= 0 if rec["right"] else 1
            print(f"{cand.name}: {v.verdict} (expected {cand.expected}) in {rec['seconds']} s: {v.reason[:400]}", flush=True)
            if v.verdict == "improved" and a.commit_wins:  # the keep stands from verdict to commit (issue 34)
                t = time.perf_counter()
                c = ref.commit_improvement(cand.hypothesis)
                rec["commit"] = commit_record(c, time.perf_counter() - t)
                print(f"{cand.name}: commit {c.committed} ({c.code}) in {rec['commit']['seconds']} s: {c.reason[:400]}",
                      flush=True)
            elif v.verdict in ("improved", "incorrect", "divergent"):
                ref.revert_to_best(f"real-repository check: {cand.name} done")
            write(a.out, project, result)
    finally:
        runs = sorted((ref.where.state_dir / "runs").glob("*"))
        if runs:  # the baseline's first run: its log and result files, as the benchmark wrote them
            with tarfile.open(a.out / f"{project.name}-first-run.tar.gz", "w:gz") as tar:
                tar.add(runs[0], arcname=runs[0].name)
        ledger = ref.where.state_dir / "ledger.jsonl"
        if ledger.exists():
            shutil.copy(ledger, a.out / f"{project.name}-ledger.jsonl")
        if a.keep_runs:
            keep_runs(ref.where.state_dir, a.out / f"{project.name}-runs.tar.gz")
        write(a.out, project, result)
        ref.close()
    return code


if __name__ == "__main__":
    sys.exit(main())
