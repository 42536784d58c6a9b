"""Chaos test: a real `kopt-mcp serve` (stdio) driven through a scripted optimization loop on the toy
repository, SIGKILLed at random times and at every fault point, restarted each time; after every
restart the session's invariants are checked.

    python benchmarks/chaos/run.py --random 200 --aimed 50 --out benchmarks/results/DATE-chaos.json

Each episode starts the server (with KOPT_FAULT set for an aimed kill), calls `status`, checks the
invariants (`check_invariants`), then plays the loop (baseline, faster / slower / identical-ish /
incorrect / failing candidates, repairs, commits, reverts; stops after 2 regressions in a row and a
new session tag follows) until the server dies: at a random delay (random kill, SIGKILL of the
server process read from `<git-common-dir>/kopt/server.json`) or at its fault point (aimed kill).
The fault points are listed by a traced run first (KOPT_FAULT_TRACE); aimed kills take each point's
first hit (`name`), then later hits (`name#2`, ...) until the count is reached.

Invariants: state.json valid; the ledger's hash chain verifies against the state's anchor; every
attempt number has exactly one final record (no contradictions) and a keep at most one commit record;
every patch the ledger names exists; the branch holds only the baseline, keeps (each with its ledger
commit record) and the Stop Summary; BEST_COMMIT is the branch head (or the Stop Summary's parent);
performance.md at the branch head equals `ledger.render_performance` of the ledger; no stale git lock
in the session's worktrees; `status.problems` empty; no benchmark process left running (psutil: a
process whose working directory lies in the chaos folder, found after the restart; such processes
are reported, then killed so the run goes on).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import psutil
from mcp import Client, StdioServerParameters

from kopt_mcp.ledger import TIME_COLUMN_CPU, Store, render_performance
from kopt_mcp.paths import kopt_dir
from kopt_mcp.session import SessionState
from kopt_mcp.testing.toy import kernel_source, make_toy_repo

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import git  # noqa: E402
#: fault points passed only while a session begins (its creation and its baseline)
SESSION_START = {"ledger.after_append:session_started", "baseline.after_perf_written", "baseline.after_git_commit",
                 "baseline.after_best_worktree", "ledger.after_append:baseline"}
FINAL = {"improved", "tie", "regressed", "divergent", "incorrect", "abandoned", "failed", "rejected", "interrupted",
         "cancelled"}


@dataclass
class Chaos:
    """One chaos run's repository, current session tag, random source and tallies."""

    root: Path
    rng: random.Random
    trace: Path
    repo: Path = field(init=False)
    tag_no: int = 1
    #: the benchmark's sleep (s) in a slow candidate (about 1 move in 8), so a random kill can land
    #: mid-run; 0 where no random kill comes (the traced pre-run, aimed kills): only time there
    sleep_s: float = 2.5
    episodes: list[dict] = field(default_factory=list)
    leftovers: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.repo = make_toy_repo(self.root / "repo", {"1": 100.0, "2": 200.0},
                                  extra_gates="max_consecutive_regressions = 2")

    @property
    def tag(self) -> str:
        return f"c{self.tag_no}"

    def params(self, fault: str | None) -> StdioServerParameters:
        env = {k: v for k, v in os.environ.items() if k not in ("KOPT_FAULT", "KOPT_FAULT_TRACE")}
        env.update(KOPT_FAULT_TRACE=str(self.trace), KOPT_LEASE_DIR=str(self.root / "leases"),
                   PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
        if fault:
            env["KOPT_FAULT"] = fault
        return StdioServerParameters(command=sys.executable, args=["-m", "kopt_mcp.app.cli", "serve", "--repo",
                                     str(self.repo), "--tag", self.tag], env=env, cwd=str(ROOT))

    def server_pid(self) -> int | None:
        try:
            holder = json.loads((kopt_dir(self.repo) / "server.json").read_text())
            p = psutil.Process(int(holder["pid"]))
            return p.pid if "kopt_mcp.app.cli" in " ".join(p.cmdline()) and p.status() != psutil.STATUS_ZOMBIE else None
        except (OSError, ValueError, KeyError, psutil.Error):
            return None


def _data(r) -> dict:
    return r.structured_content or {}


def check_invariants(ch: Chaos, st: dict) -> list[str]:
    """Every invariant of the module docstring for the session `status` `st` describes; the
    violations found (empty: all hold)."""
    bad: list[str] = [f"status problem: {p}" for p in st.get("problems", [])]
    sd, ws = Path(st["state_dir"]), Path(st["workspace"])
    store = Store(sd)
    try:
        state = SessionState.model_validate(store.load_state_json())
    except Exception as e:  # noqa: BLE001 -- any failure to read it is the finding
        return bad + [f"state.json invalid: {e}"]
    bad += [f"ledger: {p}" for p in store.verify()]
    events = store.ledger()
    finals: dict[int, list[str]] = {}
    for e in events:
        if e.get("event") == "attempt" and e.get("verdict") in FINAL:
            finals.setdefault(e["attempt"], []).append(e["verdict"])
        elif e.get("event") == "revert" and e.get("attempt"):
            finals.setdefault(e["attempt"], []).append("reverted")
    for n in range(1, state.next_attempt):
        if len(finals.get(n, [])) != 1:
            bad.append(f"attempt {n} has {len(finals.get(n, []))} final records: {finals.get(n)}")
        if store.find_patch(n) is None:
            bad.append(f"attempt {n} has no archived patch")
    commits = [e for e in events if e.get("event") == "commit"]
    if len({e["attempt"] for e in commits}) != len(commits):
        bad.append(f"an attempt was committed twice: {[e['attempt'] for e in commits]}")
    for e in events:
        for key in ("patch", "archived"):
            if e.get(key) and not Path(e[key]).exists():
                bad.append(f"{e['event']} record of attempt {e.get('attempt')} names a missing patch {e[key]}")
    start = next((e["best_commit"] for e in events if e.get("event") == "session_started"), None)
    branch = f"refs/heads/{st['branch']}"
    shas = git(ch.repo, "rev-list", "--reverse", f"{start}..{branch}").split() if start else []
    kept = {e["commit"]: e for e in commits}
    base = [e["best_commit"] for e in events if e.get("event") == "baseline"]
    for sha in shas:
        subject, body = git(ch.repo, "log", "-1", "--format=%s%n%b", sha).split("\n", 1)
        if subject == "kopt: baseline":
            if sha not in base:
                bad.append(f"baseline commit {sha[:12]} has no baseline record")
        elif subject.startswith("kopt: stop summary"):
            if not any(e.get("event") == "stopped" for e in events):
                bad.append(f"stop summary commit {sha[:12]} without a stopped record")
        elif "kopt-mcp attempt " in body:
            if sha not in kept:
                bad.append(f"keep commit {sha[:12]} has no commit record")
        else:
            bad.append(f"commit {sha[:12]} ({subject!r}) is neither baseline, keep nor stop summary")
    if len([s for s in shas if s in kept]) != len(kept):
        bad.append("a commit record names a commit that is not on the branch")
    head = git(ch.repo, "rev-parse", branch).strip()
    if head != state.best.commit and not (state.phase.value == "stopped"
                                          and git(ch.repo, "rev-parse", f"{head}^").strip() == state.best.commit):
        bad.append(f"BEST_COMMIT {state.best.commit[:12]} is not the branch head {head[:12]}")
    if base:
        committed = git(ch.repo, "show", f"{head}:performance.md")
        if committed != render_performance(events, "us_per_call", TIME_COLUMN_CPU):  # the toy measures on the CPU
            bad.append("performance.md at the branch head differs from the ledger's rendering")
        if (ws / "performance.md").read_text() != committed:
            bad.append("the workspace's performance.md differs from the committed one")
    for wt in (ws, Path(state.best_worktree)):
        gitfile = wt / ".git"
        if gitfile.is_file():
            gd = Path(gitfile.read_text().split(":", 1)[1].strip())
            bad += [f"stale lock {gd / n}" for n in ("index.lock", "HEAD.lock") if (gd / n).exists()]
    ref_lock = kopt_dir(ch.repo).parent / "refs" / "heads" / f"{st['branch']}.lock"
    if ref_lock.exists():
        bad.append(f"stale lock {ref_lock}")
    if state.in_progress:
        bad.append(f"after a restart the state still has a job marker: {state.in_progress}")
    missing = [r.get("event") for r in state.outbox if not store.has_record(r.get("id", ""))]
    if missing:
        bad.append(f"committed records missing from the ledger after a restart: {missing}")
    return bad


def leftover_processes(ch: Chaos, server: int | None) -> list[dict]:
    """Processes whose working directory lies in the chaos folder, other than the running server
    `server` and its descendants (GitPython's `git cat-file` helpers)."""
    exclude: set[int] = set()
    if server:
        try:
            exclude = {server, *(c.pid for c in psutil.Process(server).children(recursive=True))}
        except psutil.Error:
            exclude = {server}
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.pid in exclude or p.pid == os.getpid():
            continue
        try:
            cwd = p.cwd()
        except (psutil.Error, OSError):
            continue
        if cwd.startswith(str(ch.root)):
            out.append({"pid": p.pid, "cmdline": " ".join(p.info.get("cmdline") or [])[:200], "cwd": cwd})
    return out


def _candidate(best: dict[str, float], factor: float, **flags) -> str:
    return kernel_source({k.split("=", 1)[1]: round(v * factor, 4) for k, v in best.items()}, **flags)


async def _step(ch: Chaos, c: Client, bias: str) -> str:
    """One agent move chosen from the phase (and, for aimed kills, biased toward the target)."""
    st = _data(await c.call_tool("status", {}))
    phase, ws, rng = st["phase"], Path(st["workspace"]), ch.rng
    if phase == "needs_baseline":
        await c.call_tool("run_benchmark", {})
        return "run_benchmark"
    if phase == "stopped":
        return "stopped"
    best = st["best_metrics"]
    flags = {"SLEEP_S": ch.sleep_s} if rng.random() < 0.12 and ch.sleep_s else {}
    if phase == "improved":
        if rng.random() < (0.95 if bias.startswith("commit") else 0.2 if bias.startswith("revert") else 0.8):
            await c.call_tool("commit_improvement", {"message": "chaos keep"})
            return "commit_improvement"
        await c.call_tool("revert_to_best", {"reason": "chaos"})
        return "revert_to_best"
    if phase == "repairing":
        if rng.random() < 0.5:
            (ws / "kernel.py").write_text(_candidate(best, 0.8, **flags))
            await c.call_tool("save_and_test", {"target": "global", "hypothesis": "repair"})
            return "save_and_test(repair)"
        await c.call_tool("revert_to_best", {"reason": "give up"})
        return "revert_to_best"
    weights = {"faster": 0.35, "slower": 0.3, "same": 0.1, "incorrect": 0.1, "failing": 0.05, "revert": 0.1}
    if bias.startswith(("commit", "ledger.after_append:commit")):
        weights["faster"] = 2.0
    elif bias.startswith("stop"):
        weights["slower"] = 2.0
    elif bias.startswith("revert"):
        weights["revert"] = 2.0
    kind = rng.choices(list(weights), list(weights.values()))[0]
    src = {"faster": lambda: _candidate(best, 0.8, **flags), "slower": lambda: _candidate(best, 1.25, **flags),
           "same": lambda: _candidate(best, 1.0002, **flags), "revert": lambda: _candidate(best, 1.1),
           "incorrect": lambda: kernel_source({k.split("=", 1)[1]: v for k, v in best.items()},
                                              {k.split("=", 1)[1]: 1 for k in best}),
           "failing": lambda: _candidate(best, 0.9, EXIT=3)}[kind]()
    (ws / "kernel.py").write_text(src)
    if kind == "revert":
        await c.call_tool("revert_to_best", {"reason": "chaos"})
        return "revert_to_best"
    await c.call_tool("save_and_test", {"target": "global", "hypothesis": kind})
    return f"save_and_test({kind})"


async def episode(ch: Chaos, fault: str | None, kill_after: float | None, max_steps: int = 12,
                  timeout_s: float = 240) -> dict:
    """Start the server, check the invariants, play until it dies (or `max_steps`); one record."""
    rec: dict = {"tag": ch.tag, "fault": fault, "kill_after_s": kill_after, "started": False, "steps": [],
                 "violations": [], "killed": False, "error": None, "died": False}
    pid = None
    t0 = time.monotonic()
    try:
        with anyio.fail_after(timeout_s):
            async with Client(ch.params(fault)) as c:
                st = _data(await c.call_tool("status", {}))
                rec["started"], pid = True, ch.server_pid()
                rec["violations"] = check_invariants(ch, st)
                left = leftover_processes(ch, pid)
                if left:
                    rec["leftovers"] = left
                    ch.leftovers += left
                    for p in left:
                        try:
                            os.killpg(os.getpgid(p["pid"]), signal.SIGKILL)
                        except OSError:
                            pass
                if st["phase"] == "stopped":
                    rec["steps"].append("stopped: next session")
                    ch.tag_no += 1
                    return rec

                async def killer():
                    await anyio.sleep(kill_after)
                    if pid:
                        os.kill(pid, signal.SIGKILL)
                        rec["killed"] = True

                async with anyio.create_task_group() as tg:
                    if kill_after is not None:
                        tg.start_soon(killer)
                    for _ in range(max_steps):
                        move = await _step(ch, c, fault or "")
                        rec["steps"].append(move)
                        if move == "stopped":
                            break
                    tg.cancel_scope.cancel()
    except TimeoutError:
        rec["error"] = f"timed out after {timeout_s} s"
    except BaseException as e:  # noqa: BLE001 -- the connection closes under the client when the server dies
        rec["error"] = f"{type(e).__name__}: {_leaf(e)}"[:300]
    if pid and psutil.pid_exists(pid):
        try:
            p = psutil.Process(pid)
            if p.status() != psutil.STATUS_ZOMBIE:
                p.wait(timeout=10)
        except (psutil.Error, psutil.TimeoutExpired):
            pass
    # killed = the connection broke under a call: by the killer (random), or with the trace ending at
    # the fault point (aimed; also while starting, in recovery or session creation). A server that
    # ends because the client closed after its last move was not killed.
    last = ch.trace.read_text().splitlines()[-1:] if ch.trace.exists() else []
    rec["died"] = rec["error"] is not None and (rec["killed"] if not fault else last == [fault.split("#")[0]])
    rec["seconds"] = round(time.monotonic() - t0, 2)
    return rec


def _leaf(e: BaseException) -> str:
    """The first leaf exception of a (nested) exception group, as text."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return f"{type(e).__name__}: {e}"


def traced_points(trace: Path) -> list[str]:
    """Distinct fault point names in the order first reached."""
    seen: dict[str, None] = {}
    for line in trace.read_text().splitlines() if trace.exists() else []:
        seen.setdefault(line.strip(), None)
    return [s for s in seen if s]


def aimed_targets(ch: Chaos, trace: Path, count: int) -> list[str]:
    """`count` targets: every point's first hit, then its later hits, from the trace."""
    lines = [x.strip() for x in trace.read_text().splitlines() if x.strip()] if trace.exists() else []
    hits: dict[str, int] = {}
    for x in lines:
        hits[x] = hits.get(x, 0) + 1
    names = list(hits)
    out: list[str] = list(names)
    k = 2
    while len(out) < count and any(h >= k for h in hits.values()):
        out += [f"{n}#{k}" for n in names if hits[n] >= k]
        k += 1
    while len(out) < count:  # repeat first hits where the trace is short
        out += names
    return out[:max(count, len(names))]


async def run_chaos(workdir: Path, random_kills: int, aimed: int, seed: int, max_delay_s: float = 6.0,
                    log=print, checkpoint: Path | None = None) -> dict:
    """The whole chaos run (see module docstring); returns the result record. With `checkpoint`,
    the result so far is written there after every episode (a long run can be read while it goes)."""
    ch = Chaos(workdir, random.Random(seed), workdir / "trace.txt")
    t0 = time.monotonic()
    # 1. a traced pre-run without kills lists the fault points the loop passes
    pre = Chaos(workdir / "pre", random.Random(seed + 1), workdir / "pre-trace.txt", sleep_s=0.0)
    for _ in range(3):
        r = await episode(pre, None, None, max_steps=14)
        ch.episodes.append({**r, "phase": "trace"})
    targets = aimed_targets(pre, pre.trace, aimed)
    log(f"traced {len(traced_points(pre.trace))} distinct fault points; {len(targets)} aimed targets")
    plan = [("aimed", t) for t in targets] + [("random", None)] * random_kills
    ch.rng.shuffle(plan)
    done = {"aimed": 0, "random": 0}
    for i, (kind, target) in enumerate(plan):
        delay = None if kind == "aimed" else round(ch.rng.uniform(0.05, max_delay_s), 3)
        ch.sleep_s = 0.0 if kind == "aimed" else 2.5
        if kind == "aimed" and target.split("#")[0] in SESSION_START:
            ch.tag_no += 1  # reached only while a session begins: start a fresh one (the old one stays checked)
        for _ in range(4 if kind == "aimed" else 2):
            r = await episode(ch, target, delay, max_steps=30 if kind == "aimed" else 60)
            if r["died"] or kind == "random" and r["steps"] != ["stopped: next session"]:
                break
            # not reached in this server's life (the session stopped, a new one starts): checked, go on
            r["kind"] = "retry"
            ch.episodes.append(r)
        r["kind"] = kind
        ch.episodes.append(r)
        done[kind] += bool(r["died"])
        if checkpoint:
            checkpoint.write_text(json.dumps(_result(ch, pre, targets, random_kills, seed, done, t0), indent=1) + "\n")
        if r["violations"] or (i % 10 == 0):
            log(f"[{i + 1}/{len(plan)}] {kind} {target or delay}: died={r['died']} steps={r['steps'][-3:]} "
                f"violations={r['violations'][:3]}")
    ch.sleep_s = 2.5
    while done["random"] < random_kills and len(ch.episodes) < 3 * len(plan) + 10:  # random delays that missed
        delay = round(ch.rng.uniform(0.05, max_delay_s), 3)
        r = await episode(ch, None, delay, max_steps=60)
        r["kind"] = "random"
        ch.episodes.append(r)
        done["random"] += bool(r["died"])
        if checkpoint:
            checkpoint.write_text(json.dumps(_result(ch, pre, targets, random_kills, seed, done, t0), indent=1) + "\n")
    final = await episode(ch, None, None, max_steps=0)  # the last restart's check
    final["kind"] = "final-check"
    ch.episodes.append(final)
    return _result(ch, pre, targets, random_kills, seed, done, t0)


def killed(e: dict) -> bool:
    """Whether episode record `e` ended in a SIGKILL (see `episode`)."""
    return bool(e["died"] and e["error"] is not None and (e.get("killed") or e.get("fault")))


def _result(ch: Chaos, pre: Chaos, targets: list[str], random_kills: int, seed: int, done: dict, t0: float) -> dict:
    runs = [e for e in ch.episodes if e.get("kind") in ("aimed", "random", "final-check", "retry")]
    done = {k: sum(1 for e in runs if e["kind"] == k and killed(e)) for k in ("aimed", "random")}
    not_started = [e for e in runs if not e["started"] and not (e["kind"] == "aimed" and killed(e))]
    violations = [v for e in runs for v in e["violations"]]
    aimed_runs = [e for e in runs if e["kind"] == "aimed"]
    return {
        "seed": seed, "random_kills_planned": random_kills, "aimed_kills_planned": len(targets),
        "random_kills": done["random"], "aimed_kills": done["aimed"],
        "aimed_not_reached": sorted({e["fault"] for e in aimed_runs if not killed(e)}),
        "fault_points": traced_points(pre.trace), "fault_points_reached_in_run": traced_points(ch.trace),
        "restarts_checked": sum(1 for e in runs if e["started"]), "sessions": ch.tag_no,
        "invariant_violations": violations, "leftover_processes": ch.leftovers,
        "episodes_not_started": not_started,
        "wall_s": round(time.monotonic() - t0, 1),
        "episodes": ch.episodes,
    }


def markdown(r: dict, title: str, machine: str) -> str:
    """A short report of result `r` (from run_chaos, or a checkpoint of one)."""
    from collections import Counter

    eps = [e for e in r["episodes"] if e.get("kind") in ("aimed", "random")]
    r = {**r, **{f"{k}_kills": sum(1 for e in eps if e["kind"] == k and killed(e)) for k in ("aimed", "random")}}
    moves = Counter(m.split("(")[0] for e in r["episodes"] for m in e["steps"])
    aimed_points = Counter(e["fault"].split("#")[0] for e in eps if e["kind"] == "aimed" and killed(e))
    lines = [
        f"# {title}", "", f"Machine: {machine}. Command: `python benchmarks/chaos/run.py --random "
        f"{r['random_kills_planned']} --aimed {r['aimed_kills_planned']} --seed {r['seed']}`"
        + (f" (checkpoint after {len(eps)} of {r['random_kills_planned'] + r['aimed_kills_planned']} planned "
           "episodes: the run's time budget ended here)" if r.get("partial") else "") + ".", "",
        "| figure | value |", "|---|---|",
        f"| random SIGKILLs (server killed at a random delay) | {r['random_kills']} |",
        f"| aimed SIGKILLs (at a fault point between two writes) | {r['aimed_kills']} |",
        f"| distinct fault points traced / killed at | {len(r['fault_points'])} / {len(aimed_points)} |",
        f"| restarts with every invariant checked | {r['restarts_checked']} |",
        f"| sessions (a stop starts a new tag) | {r['sessions']} |",
        f"| invariant violations | {len(r['invariant_violations'])} |",
        f"| benchmark processes left running after a restart | {len(r['leftover_processes'])} |",
        f"| servers that did not start | {len(r['episodes_not_started'])} |",
        f"| agent moves played | {sum(moves.values())} ({', '.join(f'{k} {v}' for k, v in moves.most_common())}) |",
        f"| wall time | {r['wall_s'] / 60:.1f} min |", "",
        "Fault points killed at (first hit, or the k-th hit `#k`): "
        + ", ".join(f"`{k}` {v}" for k, v in sorted(aimed_points.items())) + ".", "",
    ]
    if r["aimed_not_reached"]:
        lines += [f"Aimed targets the loop did not reach in its episodes: {', '.join(r['aimed_not_reached'])}.", ""]
    if r["invariant_violations"]:
        lines += ["Violations:", ""] + [f"- {v}" for v in r["invariant_violations"][:50]] + [""]
    if r["leftover_processes"]:
        lines += ["Processes left running by a killed server (found after the restart, then killed by the "
                  "driver):", ""] + [f"- {x['cmdline']} (cwd {x['cwd']})" for x in r["leftover_processes"][:20]] + [""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--random", type=int, default=200, help="random SIGKILLs (default 200)")
    ap.add_argument("--aimed", type=int, default=50, help="aimed kills at fault points (at least every point once)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--max-delay", type=float, default=6.0, help="random kill delay upper bound (s)")
    ap.add_argument("--workdir", type=Path, default=None, help="keep the repositories here (default: temp)")
    ap.add_argument("--out", type=Path, default=None, help="write the result JSON here")
    ap.add_argument("--markdown", nargs=3, metavar=("RESULT_JSON", "TITLE", "MACHINE"), default=None,
                    help="only print the markdown report of a result (or checkpoint) file")
    a = ap.parse_args()
    if a.markdown:
        r = json.loads(Path(a.markdown[0]).read_text())
        r.setdefault("partial", ".partial." in a.markdown[0])
        print(markdown(r, a.markdown[1], a.markdown[2]))
        return 0
    work = a.workdir or Path(tempfile.mkdtemp(prefix="kopt-chaos-"))
    result = anyio.run(run_chaos, work, a.random, a.aimed, a.seed, a.max_delay, print,
                       a.out.with_suffix(".partial.json") if a.out else None)
    result["machine"] = {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    summary = {k: v for k, v in result.items() if k != "episodes"}
    print(json.dumps(summary, indent=1))
    if a.out:
        a.out.write_text(json.dumps(result, indent=1) + "\n")
    ok = not result["invariant_violations"] and not result["episodes_not_started"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
