"""Throughput of candidate slots on one host (issue 13 item 3): N slots on N fake GPUs.

Each slot is a `Referee(slot=...)` in a process of its own (as `kopt-mcp serve --slot` would be),
all on one session of a toy repository, sharing one lease folder and one fake GPU probe that
replays the recorded `nvidia-smi` output of an 8 x H200 host (tests/fixtures/nvidia_smi), cut to
its first N GPUs. The toy benchmark is dominated by `time.sleep(SLEEP_S)`: it models a GPU-bound
run, where the device, not this host's CPU, does the work (on this CPU-only VM the "GPUs" are
lease files and `CUDA_VISIBLE_DEVICES` values; nothing runs on a GPU).

Every slot plays the same scripted sequence, `rounds` times: a regression of its own config class
(2x slower: `regressed`), an identical value with an edited comment (`tie`), a 2x faster value
(`improved`) and `commit_improvement` (the serialized commit step: re-applied onto the newest BEST
and re-measured when another slot committed first). Each slot edits only its own line of
kernel.py, so re-applies merge cleanly.

Measured: verdicts (save_and_test answers) per minute for N = 1..4, and the ratio to N = 1.
Checked: every verdict as scripted, every commit kept, and zero double bookings: every benchmark
run is recorded (device from its `CUDA_VISIBLE_DEVICES`, start and end, epoch s) by a recording
runner in each slot process, matched to the ledger's attempts (each attempt's `device` and `runs`),
and no two runs on one device overlap in time.

    PYTHONPATH=$PWD python benchmarks/throughput/run.py --slots 1 2 3 4 --rounds 2 --sleep 2
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import multiprocessing as mp
import os
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import git  # noqa: E402

SPACER = "#\n#\n#\n"  # three lines between two classes' lines: git merges edits of two classes cleanly
TAG = "t"


def base_us(k: int) -> float:
    """BEST's metric of class n=k at the start (us)."""
    return 100.0 * k


def kernel_text(n: int, sleep_s: float) -> str:
    """The toy kernel.py of an N-class session: one line per class, spaced for clean merges."""
    lines = ["TIMES = {}", "ERRORS = {}", f"SLEEP_S = {sleep_s!r}"]
    body = SPACER.join(f'TIMES["{k}"] = {base_us(k)}\n' for k in range(1, n + 1))
    return "\n".join(lines) + "\n" + SPACER + body


def make_repo(path: Path, n: int, sleep_s: float) -> Path:
    """A committed toy repository with classes n=1..N and a sleep-dominated benchmark."""
    from kopt_mcp.testing.toy import make_toy_repo

    repo = make_toy_repo(path, {"1": 1.0}, timeout_s=120,
                         extra_gates="gpu_wait_s = 300.0\ngpu_poll_s = 0.5")
    (repo / "kernel.py").write_text(kernel_text(n, sleep_s))
    git(repo, "commit", "-qam", "N classes")
    return repo


class FirstGpus:
    """A GpuProbe: the first `n` readings of another probe (the recorded 8-GPU host cut to N GPUs)."""

    def __init__(self, probe, n: int) -> None:
        self.probe, self.n = probe, n
        self.vendor = getattr(probe, "vendor", "nvidia")

    def __getattr__(self, name):
        return getattr(self.probe, name)

    def read(self):
        return self.probe.read()[: self.n]


class SpanRunner:
    """A runner (Services.run) that runs each command for real and appends one JSON line per run
    to `path`: slot, device (`CUDA_VISIBLE_DEVICES`), start and end (epoch s), its run folder."""

    def __init__(self, path: Path, slot: str) -> None:
        self.path, self.slot = path, slot

    def __call__(self, command, cwd, env, timeout_s, log_path, **kw):
        from kopt_mcp.bench.runner import run_command

        r = run_command(command, cwd, env, timeout_s, log_path, **kw)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"slot": self.slot, "device": env.get("CUDA_VISIBLE_DEVICES"), "start": r.started_at,
                                "end": r.started_at + r.duration_s, "run_dir": str(Path(log_path).parent),
                                "command": command}) + "\n")
        return r


def services(n_gpus: int, lease_dir: Path, spans: Path, slot: str):
    """Services of one slot process: the fake N-GPU probe (recorded 8 x H200 nvidia-smi output with
    no compute process; its recorded utilisation is ignored: only the leases decide), the shared
    lease folder and the span-recording runner."""
    from kopt_mcp.gpus.gate import IdleThresholds
    from kopt_mcp.gpus.smi import NvidiaSmiProbe
    from kopt_mcp.referee.opening import local_executor
    from kopt_mcp.referee.services import Services
    from tests.gpus.conftest import IDLE, SmiReplay

    x8_idle = ("h200x8_query_gpu_index_uuid_mem_util_before.csv", IDLE[1])
    probe = FirstGpus(NvidiaSmiProbe(SmiReplay(x8_idle)), n_gpus)
    any_load = IdleThresholds(util_pct=101.0, mem_mib=1e9, cpu_pct=100.0)
    return Services(probe=probe, run=SpanRunner(spans, slot), lease_dir=lease_dir,
                    executor=lambda sess: dataclasses.replace(local_executor(sess), thresholds=any_load))


def set_line(ws: Path, k: int, value: float, note: str = "") -> None:
    """Rewrite class n=k's line of the workspace's kernel.py (the other lines as they are)."""
    p = ws / "kernel.py"
    line = f'TIMES["{k}"] = {value}' + (f"  # {note}" if note else "")
    p.write_text(re.sub(rf'^TIMES\["{k}"\] = .*$', line, p.read_text(), flags=re.MULTILINE))


def script(k: int, rounds: int, stagger: bool = False) -> list[tuple[str, float, str, str]]:
    """Slot k's steps: (name, factor of its current BEST value, comment, expected verdict).
    `stagger`: slot k starts (k - 1) steps into the cycle (the same steps, rotated), so that the
    slots' commits do not all fall in the same moment, as with agents that are not in lockstep."""
    steps = []
    for r in range(rounds):
        steps += [(f"r{r} slower", 2.0, "", "regressed"), (f"r{r} same", 1.0, f"same {r}", "tie"),
                  (f"r{r} faster", 0.5, "", "improved")]
    shift = (k - 1) % 3 if stagger else 0
    return steps[shift:] + steps[:shift]


def worker(repo: str, slot: str, k: int, n_gpus: int, lease_dir: str, spans: str, rounds: int,
           barrier, out: str, commit: bool = True, stagger: bool = False) -> None:
    """One slot process: open the slot, wait for the others, play its script, write its results."""
    from kopt_mcp.referee import Referee

    ref = Referee(Path(repo), tag=TAG, slot=slot, lease_dir=Path(lease_dir),
                  services=services(n_gpus, Path(lease_dir), Path(spans), slot))
    results, best = [], base_us(k)
    try:
        ref.run_benchmark()  # joins the session (adopts its baseline; no run)
        barrier.wait()
        t0 = time.time()
        for name, factor, note, expect in script(k, rounds, stagger):
            set_line(ref.where.workspace_path, k, best * factor, note)
            ts = time.time()
            v = ref.save_and_test(f"n={k}", name)
            row = {"step": name, "expect": expect, "verdict": v.verdict, "t": time.time()}
            row["test_s"] = row["t"] - ts
            if v.verdict == "improved" and not commit:
                ref.revert_to_best("throughput benchmark without commits")
            elif v.verdict == "improved":
                c = ref.commit_improvement()
                row.update(committed=c.committed, commit_reason=c.reason, t=time.time(),
                           commit_s=time.time() - row["t"], reapplied="re-appl" in c.reason,
                           overtaken=c.overtaken_rounds)
                if c.committed:
                    best *= factor
            results.append(row)
        Path(out).write_text(json.dumps({"slot": slot, "t0": t0, "t1": time.time(), "steps": results}))
    finally:
        ref.close()


def double_bookings(spans: list[dict]) -> list[str]:
    """Pairs of runs on one device whose time spans overlap (from different jobs), as text."""
    bad = []
    by_dev: dict[str, list[dict]] = {}
    for s in spans:
        by_dev.setdefault(str(s["device"]), []).append(s)
    for dev, runs in by_dev.items():
        runs.sort(key=lambda s: s["start"])
        for a, b in itertools.pairwise(runs):
            if b["start"] < a["end"] and a["slot"] != b["slot"]:
                bad.append(f"device {dev}: {a['slot']} {a['start']:.3f}-{a['end']:.3f} overlaps "
                           f"{b['slot']} {b['start']:.3f}-{b['end']:.3f}")
    return bad


def ledger_check(repo: Path, slots: list[str], spans: list[dict]) -> list[str]:
    """Every run of every ledger attempt was recorded on the device that attempt names."""
    from kopt_mcp.ledger import Store

    dev_of_run = {s["run_dir"]: s["device"] for s in spans}
    problems, n = [], 0
    for slot in slots:
        for e in Store(repo / ".git" / "kopt" / TAG / "slots" / slot).ledger():
            if e.get("event") not in ("attempt", "commit") or not e.get("device"):
                continue
            want = e["device"].split(":")[1]  # nvidia:<index>:<uuid>
            for run in e.get("runs", []):
                n += 1
                got = dev_of_run.get(run)
                if got != want:
                    problems.append(f"{slot} attempt {e.get('attempt')}: run {run} on {got}, ledger says {want}")
    if n == 0:
        problems.append("no ledger attempt lists its runs: nothing to match")
    return problems


def one(n: int, rounds: int, sleep_s: float, base: Path, commit: bool = True, shared_leases: bool = True,
        stagger: bool = False) -> dict:
    """Run N slots on N fake GPUs; their numbers and checks. `shared_leases` False: each slot gets a
    lease folder of its own (the negative control: the double-booking check must then fire).
    `stagger`: see `script`."""
    from kopt_mcp.referee import Referee

    d = base / f"n{n}"
    repo = make_repo(d / "repo", n, sleep_s)
    lease_dir, spans = d / "leases", d / "spans.jsonl"
    main = Referee(repo, tag=TAG, lease_dir=lease_dir, services=services(n, lease_dir, spans, "main"))
    assert main.run_benchmark().ok, "baseline failed"
    main.close()
    spans.write_text("")  # the baseline's runs are not part of the timed work
    slots = [f"s{k}" for k in range(1, n + 1)]
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(n)
    procs = [ctx.Process(target=worker, args=(str(repo), s, k, n, str(lease_dir if shared_leases else lease_dir / s),
                                              str(spans), rounds, barrier,
                                              str(d / f"{s}.json"), commit, stagger)) for k, s in enumerate(slots, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    res = [json.loads((d / f"{s}.json").read_text()) for s in slots if (d / f"{s}.json").exists()]
    if len(res) != n:
        raise SystemExit(f"N={n}: {n - len(res)} slot process(es) failed (exit codes {[p.exitcode for p in procs]})")
    t0, t1 = min(r["t0"] for r in res), max(r["t1"] for r in res)
    steps = [s for r in res for s in r["steps"]]
    wrong = [f"{r['slot']} {s['step']}: {s['verdict']} (expected {s['expect']})" for r in res for s in r["steps"]
             if s["verdict"] != s["expect"] or s.get("committed") is False]
    if commit and sum(bool(s.get("committed")) for s in steps) != n * rounds:
        wrong.append(f"{sum(bool(s.get('committed')) for s in steps)} commits, expected {n * rounds}")
    run_spans = [json.loads(line) for line in spans.read_text().splitlines() if line.strip()]
    line = git(repo, "log", "--format=%s", f"kernel-opt/{TAG}").splitlines()
    busy = sum(s["end"] - s["start"] for s in run_spans)
    # time a commit waited for the best lock (or did git work) beyond its own re-measure runs
    commit_runs = sum(s["end"] - s["start"] for s in run_spans if "commit-" in Path(s["run_dir"]).name)
    tests, commits = [s["test_s"] for s in steps], [s["commit_s"] for s in steps if "commit_s" in s]
    return {"n": n, "wall_s": t1 - t0, "verdicts": len(steps), "commits": sum(bool(s.get("committed")) for s in steps),
            "verdicts_per_min": len(steps) / (t1 - t0) * 60, "runs": len(run_spans),
            "device_busy_pct": 100 * busy / (n * (t1 - t0)), "wrong": wrong,
            "double_bookings": double_bookings(run_spans), "ledger": ledger_check(repo, slots, run_spans),
            "best_line_commits": len(line), "save_and_test_s_mean": sum(tests) / len(tests),
            "commit_s_mean": sum(commits) / len(commits) if commits else None,
            "commit_s_share_pct": 100 * sum(commits) / (sum(tests) + sum(commits)),
            "runs_per_verdict": len(run_spans) / len(steps),
            "commit_rounds_overtaken": sum(s.get("overtaken", 0) for s in steps), "stagger": stagger,
            "commit_beyond_runs_s_mean": (sum(commits) - commit_runs) / len(commits) if commits else None,
            "loadavg_1min_after": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--slots", type=int, nargs="+", default=[1, 2, 3, 4])
    ap.add_argument("--rounds", type=int, default=2, help="script repetitions per slot (3 verdicts each)")
    ap.add_argument("--sleep", type=float, default=2.0, help="seconds each benchmark run sleeps (the 'GPU' work)")
    ap.add_argument("--no-commit", action="store_true",
                    help="revert `improved` candidates instead of committing them (no serialized commit step)")
    ap.add_argument("--unshared-leases", action="store_true",
                    help="negative control: a lease folder per slot, so slots do not see each other's leases "
                    "(the double-booking check must fail)")
    ap.add_argument("--stagger", action="store_true",
                    help="slot k starts k-1 steps into its cycle (agents not in lockstep; see script())")
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kopt-throughput-") as tmp:
        for n in a.slots:
            r = one(n, a.rounds, a.sleep, Path(tmp), commit=not a.no_commit, shared_leases=not a.unshared_leases,
                    stagger=a.stagger)
            rows.append(r)
            one_rate = rows[0]["verdicts_per_min"] / rows[0]["n"]
            r["ratio_vs_one"] = r["verdicts_per_min"] / one_rate
            print(f"N={n}: {r['verdicts']} verdicts, {r['commits']} commits in {r['wall_s']:.1f} s = "
                  f"{r['verdicts_per_min']:.2f}/min, {r['ratio_vs_one']:.2f} x one slot (target >= {0.9 * n:.1f}); "
                  f"{r['runs']} runs, devices busy {r['device_busy_pct']:.0f}%; wrong verdicts {len(r['wrong'])}; "
                  f"double bookings {len(r['double_bookings'])}; ledger mismatches {len(r['ledger'])}; "
                  f"save_and_test {r['save_and_test_s_mean']:.1f} s, commit {r['commit_s_mean'] or 0:.1f} s "
                  f"({r['commit_s_share_pct']:.0f}% of slot time; {r['commit_beyond_runs_s_mean'] or 0:.1f} s of it beyond its "
                  f"runs; {r['commit_rounds_overtaken']} commit rounds overtaken); load average {r['loadavg_1min_after']:.1f}", flush=True)
            for msg in r["wrong"] + r["double_bookings"] + r["ledger"]:
                print("   ", msg, flush=True)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))
    ok = all(not (r["wrong"] or r["double_bookings"] or r["ledger"]) for r in rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
