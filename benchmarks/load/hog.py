"""A CPU hog on every core while a command runs, repeated: how kopt-mcp's CPU verdicts hold up
under load (issue 11 item 8).

    python benchmarks/load/hog.py --repeat 10 --out OUT -- python -m kopt_mcp.app.cli demo --example cpu --keep OUT/demo-{i}
    python benchmarks/load/hog.py --pattern bursty --repeat 1 --out OUT -- python benchmarks/decision_quality/run.py ...

One busy process per core (`--cores`, default every core the machine has), each pinned to its core
(os.sched_setaffinity) at the command's own priority, so that the benchmark's runs share every
core with a process that never yields. `--pattern steady`: busy all the time. `--pattern bursty`:
busy for 0.5-4 s, then idle for 0.5-4 s (seeded, uniform), so the load changes inside a paired
round: the pattern that makes one run of a pair look faster than the other. `{i}` in the command
is replaced by the repetition's number (0-based).

To load the machine once for several experiments run side by side: `--hogs-only` starts the hogs
and waits (until SIGTERM, Ctrl-C or `--max-seconds`); each experiment then runs with `--no-hogs`.

Writes OUT/runs.jsonl (one line per repetition: i, exit code, seconds, the load average at the end)
and OUT/summary.md; each repetition's stdout+stderr goes to OUT/run-{i}.log. The hogs are ended
(SIGKILL, by pid) when the command ends, on Ctrl-C and on SIGTERM; they also end by themselves after
`--max-seconds` (default 7200) so that a killed harness leaves nothing spinning. Exit 0 when every
repetition exited 0, else 1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

# the hog itself: spin (steady), or alternate spinning and sleeping (bursty); end after max_s
SPIN = r"""
import os, random, sys, time
core, pattern, seed, max_s = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
try:
    os.sched_setaffinity(0, {core})
except (AttributeError, OSError):
    pass
rng, end = random.Random(seed), time.monotonic() + max_s
while time.monotonic() < end:
    busy_until = time.monotonic() + (rng.uniform(0.5, 4.0) if pattern == "bursty" else 1.0)
    while time.monotonic() < busy_until:
        pass
    if pattern == "bursty":
        time.sleep(rng.uniform(0.5, 4.0))
"""


def start_hogs(cores: list[int], pattern: str, seed: int, max_s: float) -> list[subprocess.Popen]:
    """One hog process per core in `cores` (pinned); their Popen handles."""
    return [subprocess.Popen([sys.executable, "-c", SPIN, str(c), pattern, str(seed + c), str(max_s)],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            for c in cores]


def stop_hogs(hogs: list[subprocess.Popen]) -> None:
    """SIGKILL each hog by pid and reap it (no process left spinning)."""
    for p in hogs:
        try:
            psutil.Process(p.pid).kill()
        except psutil.Error:
            pass
    for p in hogs:
        p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cores", default=None, help="comma-separated core numbers to hog (default: all)")
    ap.add_argument("--pattern", choices=("steady", "bursty"), default="steady")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=7200.0, help="seconds per repetition (then killed: a failure)")
    ap.add_argument("--max-seconds", type=float, default=7200.0, help="the hogs end by themselves after this")
    ap.add_argument("--out", type=Path, default=None, help="where runs.jsonl, summary.md and the logs go")
    ap.add_argument("--hogs-only", action="store_true", help="start the hogs and wait; run no command")
    ap.add_argument("--no-hogs", action="store_true", help="run the command without hogs of its own "
                    "(another harness, started with --hogs-only, loads the machine)")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd and not a.hogs_only:
        ap.error("give the command after --")
    if cmd and (a.out is None or a.hogs_only):
        ap.error("a command needs --out, and --hogs-only runs none")
    cores = ([int(c) for c in a.cores.split(",")] if a.cores else
             sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1)))
    hogs = [] if a.no_hogs else start_hogs(cores, a.pattern, a.seed, a.max_seconds)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    if a.hogs_only:
        print(json.dumps({"hogs": [p.pid for p in hogs], "pattern": a.pattern, "cores": cores}), flush=True)
        try:
            time.sleep(a.max_seconds)
        except KeyboardInterrupt:
            pass
        finally:
            stop_hogs(hogs)
        return 0
    a.out.mkdir(parents=True, exist_ok=True)
    if a.no_hogs:
        cores = []
    results = []
    try:
        for i in range(a.repeat):
            argv = [x.replace("{i}", str(i)) for x in cmd]
            t0 = time.monotonic()
            with open(a.out / f"run-{i}.log", "wb") as log:
                p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                try:
                    rc = p.wait(timeout=a.timeout)
                except subprocess.TimeoutExpired:
                    for q in [*psutil.Process(p.pid).children(recursive=True), psutil.Process(p.pid)]:
                        try:
                            q.kill()
                        except psutil.Error:
                            pass
                    p.wait()
                    rc = 124
            row = {"i": i, "rc": rc, "seconds": round(time.monotonic() - t0, 1), "pattern": a.pattern,
                   "hogged_cores": cores, "loadavg_1m": round(os.getloadavg()[0], 2)}
            results.append(row)
            with open(a.out / "runs.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
            print(json.dumps(row), flush=True)
    finally:
        stop_hogs(hogs)
    ok = sum(r["rc"] == 0 for r in results)
    hog = f"hog: {a.pattern} on cores {cores}" if cores else "no hog of its own (see the experiment's notes)"
    (a.out / "summary.md").write_text(
        f"# {' '.join(cmd)}\n\n{hog}; {ok} of {len(results)} repetitions exited 0; "
        f"seconds {[r['seconds'] for r in results]}; load average (1 min) at the end of each "
        f"{[r['loadavg_1m'] for r in results]}\n")
    return 0 if ok == len(results) == a.repeat else 1


if __name__ == "__main__":
    sys.exit(main())
