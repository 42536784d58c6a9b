"""`kopt-mcp init` on fresh clones, unedited (issue 25 item 4; issue 35 item 6: seven real kernels): per
project, a fresh repository from the staged snapshot, `kopt-mcp init --command "<its documented command,
plus the PYTHONPATH init asks for>" --write` with no other flag, then the session through the in-process
Referee on that proposal: the baseline, and an identical candidate (a comment) that must be `tie`.

    python benchmarks/real_repos/init_fresh.py --project liger --src DIR --out OUT [--work W] [--deadline-s S] [--end-s E]
    python benchmarks/real_repos/init_fresh.py --project all --src .devstage/src --out OUT
    python benchmarks/real_repos/fresh_table.py --out OUT      # OUT/issue35-table.md from OUT/<name>-fresh.json

DIR: the project's files (a `git archive` of the snapshot; its commit in DIR.sha when there), or the
staging folder that holds them as liger/, tk/, fg/, p5/. With `--project all`, --src is the staging
folder and every staged project there runs in turn: first the seven of issue 35 item 6 in its order
(liger = RMSNorm, liger-layer-norm, liger-swiglu, liger-cross-entropy, liger-flce = fused linear cross
entropy (heavy), fg = FlagGems RMSNorm, fla-ln = flash-linear-attention's LayerNorm backward), then p5
(flash-linear-attention's chunk_gla) and tk; those whose folder is missing are skipped, and the run ends
by writing OUT/issue35-table.md (fresh_table.py). `--project cpu-providers --src examples/cpu_providers`
checks the driver on the CPU. Per project it writes
OUT/<name>-fresh.json and OUT/<name>-fresh.md after every step: the proposal, every key in which it
differs from the hand-finished kopt.toml of projects.py (none for projects without one), init's
exit code, wall time and stderr tail, what init dropped from the correctness command and why (its
`# dropped:` lines), the baseline's verdict and one plain run's seconds (`baseline.plain_run_s`, the
session's cost unit), and the identical candidate's verdict, code and cost. `--work W` keeps the
repository in W/<name>: a later call (GPU machine still warm) skips init and goes on with the
session; the session's ledger (every verdict, its units and whole operation) goes to OUT/<name>-ledger.jsonl. Exit 0 when every project's init wrote a proposal, its baseline was recorded and the
identical candidate tied; 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parents[1]))

from fla import FLA_LN
from fresh_table import ISSUE35, init_test_s, write_table
from projects import PROJECTS, Candidate, Project
from run import make_repo, versions

SRC_FIRST = "PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} "
IDENTICAL = "\n# kopt-mcp init on a fresh clone: a comment, no code change\n"


@dataclass
class Fresh:
    """One fresh-clone check: the staged folder, the init command, the hand-finished project (or
    None), and the file the identical candidate appends a comment to."""

    name: str
    staged: str
    github: str
    command: str
    hand: Project | None
    kernel_file: str

    @property
    def snapshot(self) -> Project:
        """What run.make_repo needs (the compat edits of the hand-finished project, if any)."""
        return self.hand or Project(self.name, self.github, [], self.command, [], "")


LIGER_OPS = "src/liger_kernel/ops/"


def liger(name: str, script: str, op: str) -> Fresh:
    """One Liger-Kernel kernel: its benchmark script with --overwrite (src/ first: the script imports
    liger_kernel), the staged liger/ snapshot, no hand-finished kopt.toml."""
    return Fresh(name, "liger", "linkedin/Liger-Kernel",
                 f"{SRC_FIRST}python benchmark/scripts/{script} --overwrite", None, LIGER_OPS + op)


FRESH = {f.name: f for f in (
    # issue 35 item 6's seven, in its order (`--project all` runs them first)
    # the documented command imports an installed liger_kernel, not src/: init says to put src first
    Fresh("liger", "liger", "linkedin/Liger-Kernel", SRC_FIRST + PROJECTS["liger"].command, PROJECTS["liger"],
          LIGER_OPS + "rms_norm.py"),
    liger("liger-layer-norm", "benchmark_layer_norm.py", "layer_norm.py"),
    liger("liger-swiglu", "benchmark_swiglu.py", "swiglu.py"),
    liger("liger-cross-entropy", "benchmark_cross_entropy.py", "cross_entropy.py"),
    # heavy: the lm_head matmul and the cross entropy fused, vocabulary-sized chunks
    liger("liger-flce", "benchmark_fused_linear_cross_entropy.py", "fused_linear_cross_entropy.py"),
    Fresh("fg", "fg", "FlagOpen/FlagGems", PROJECTS["flaggems"].command, PROJECTS["flaggems"],
          "src/flag_gems/ops/rms_norm.py"),
    # flash-linear-attention's LayerNorm backward (fla_ln.py): the documented command runs all 16 providers
    # (281 s on the H200): init gets the command narrowed to fused_ln_bwd, as fla_ln's Project does
    Fresh("fla-ln", "p5", "fla-org/flash-linear-attention", PROJECTS["fla-ln"].init_command, PROJECTS["fla-ln"],
          FLA_LN),
    # flash-linear-attention's op runner (benchmarks/ops/run.py docstring), the sources first
    Fresh("p5", "p5", "fla-org/flash-linear-attention",
          "PYTHONPATH=.${PYTHONPATH:+:$PYTHONPATH} python -m benchmarks.ops.run --op chunk_gla --json results.json",
          None, "fla/ops/gla/chunk.py"),
    # documented: PYTHONPATH=. python benchmarks/rms_norm.py; on torch 2.11 its torch_compile provider
    # needs donated buffers off: the finished command (projects.py init_command)
    Fresh("tk", "tk", "ai-compiler-study/triton-kernels", PROJECTS["triton-kernels"].init_command,
          PROJECTS["triton-kernels"], "triton_kernels/kernels/normalization.py"),
    # the bundled CPU example (examples/cpu_providers): the driver's own check, no GPU
    Fresh("cpu-providers", "cpu_providers", "kopt-mcp/examples/cpu_providers",
          SRC_FIRST + "python benchmark/scripts/benchmark_rms_norm.py --overwrite", None, "src/tinynorm/rms_norm.py"),
)}
ALIASES = {"triton-kernels": "tk", "flaggems": "fg", "fla": "p5"}


def flatten(doc: dict, prefix: str = "") -> dict[str, object]:
    """{"benchmark": {"rows": ...}} -> {"benchmark.rows": ...}."""
    out: dict[str, object] = {}
    for k, v in doc.items():
        if isinstance(v, dict):
            out |= flatten(v, f"{prefix}{k}.")
        else:
            out[f"{prefix}{k}"] = v
    return out


def key_diff(proposal: str, hand: str | None) -> list[dict]:
    """Every key whose value differs between init's proposal and the hand-finished toml (absent: None)."""
    if not hand:
        return []
    a, b = flatten(tomllib.loads(proposal)), flatten(tomllib.loads(hand))
    return [{"key": k, "init": a.get(k), "hand": b.get(k)} for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def comment_lines(proposal: str, prefix: str) -> list[str]:
    """The proposal's comment lines that start with `prefix` ("# dropped: "), without it."""
    return [line[len(prefix):] for line in proposal.splitlines() if line.startswith(prefix)]


_STEP_DONE = re.compile(r"^\[init (\d+)s\] (.+): done in ([0-9.]+) s$")


def tests_ran(proposal: str) -> list[str]:
    """The proposal's line on init's run of the tests: of the command as written, or of one wider run
    that stands for it (kopt_mcp/commands/init/correctness.py `Checked.within`)."""
    return (comment_lines(proposal, "# init ran this command on the unmodified tree: ")
            + comment_lines(proposal, "# init ran these tests on the unmodified tree: "))


def init_steps(stderr: str) -> list[dict]:
    """Init's timed steps from its progress lines (kopt_mcp/commands/init/progress.py: "[init 12s] LABEL: done in
    3.4 s"): [{"step": LABEL, "s": 3.4, "ended_at_s": 12}] in order, so the table can say where init's wall went."""
    return [{"step": m[2], "s": float(m[3]), "ended_at_s": int(m[1])}
            for m in map(_STEP_DONE.match, stderr.splitlines()) if m]


def progress_lines(stderr: str, limit: int = 300) -> list[str]:
    """Init's own progress lines ("[init Ns] ..."), the heartbeats left out, at most `limit`."""
    return [ln for ln in stderr.splitlines() if ln.startswith("[init ")][:limit]


def run_init(repo: Path, fresh: Fresh, log: Path, budget_s: float | None = None) -> dict:
    """`kopt-mcp init --command C --write` in `repo`, no other flag (but `--budget budget_s` where the call
    has less than init's default budget left: `budget_s` in the result); exit code, wall time, stderr tail.
    Init's stderr goes to `log` as it runs (OUT/<name>-init.log): a call cut by its time limit still
    shows how far init got (2026-12-03: SwiGLU's init was cut at 220 s with nothing to show)."""
    t = time.perf_counter()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as err:
        p = subprocess.run([sys.executable, "-m", "kopt_mcp.app.cli", "init", "--repo", str(repo), "--command",
                            fresh.command, "--write", *(["--budget", f"{budget_s:.0f}"] if budget_s else [])],
                           stdout=subprocess.DEVNULL, stderr=err, text=True, timeout=1800,
                           check=False, env={**os.environ, "NO_COLOR": "1"})  # plain progress lines for init_steps
    stderr = log.read_text(errors="replace")
    out = {"exit_code": p.returncode, "seconds": round(time.perf_counter() - t, 1), "stderr_tail": stderr[-3000:],
           **({"budget_s": round(budget_s)} if budget_s else {}),
           "steps": init_steps(stderr), "progress": progress_lines(stderr)}
    from kopt_mcp import init_runs

    rec, _ = init_runs.load(repo)  # init's record: each run's wall time and profiler
    if rec is not None:
        out |= {"runs_s": [r.seconds for r in rec.runs], "runs_profiler": [r.profiler for r in rec.runs]}
    toml = repo / "kopt.toml"
    if p.returncode == 0 and toml.is_file():
        text = toml.read_text()
        hand = fresh.hand.toml if fresh.hand else None
        out |= {"proposal": text, "diff": key_diff(text, hand),
                "dropped": comment_lines(text, "# dropped: "), "notes": comment_lines(text, "# note: "),
                "tests_ran": tests_ran(text),
                "found": comment_lines(text, "# found: ")}
    return out


def write(out: Path, fresh: Fresh, result: dict, work: Path | None = None) -> None:
    """OUT/<name>-fresh.json and .md; the json also as WORK/<name>-fresh.json with --work (a later call on
    the warm machine may get a new, empty OUT: it resumes from, and the table may be written from, WORK)."""
    text = json.dumps(result, indent=1, default=str)
    for folder in (out, work) if work else (out,):
        (folder / f"{fresh.name}-fresh.json").write_text(text)
    init = result.get("init", {})
    lines = [f"# {fresh.github} at {result['commit']}: `kopt-mcp init --write` on a fresh clone, unedited", "",
             f"Command: `{fresh.command}`. Versions: {result.get('versions')}.", "",
             f"init: exit {init.get('exit_code')}, {init.get('seconds')} s" + (" (resumed: not run again)" if
                                                                               result.get("resumed") else ""), ""]
    if init.get("exit_code") not in (0, None):
        lines += ["```", init.get("stderr_tail", "")[-1500:], "```", ""]
    lines += ["Dropped from the correctness command:", ""] + [f"- {d}" for d in init.get("dropped", [])] + (
        ["- (nothing)"] if not init.get("dropped") else []) + [""]
    lines += [f"Tests run by init: {', '.join(init.get('tests_ran', [])) or 'n/a'}", ""]
    if fresh.hand:
        lines += ["| key | init | hand-finished |", "|---|---|---|"]
        lines += [f"| `{d['key']}` | `{d['init']}` | `{d['hand']}` |" for d in init.get("diff", [])]
    else:
        lines.append("No hand-finished kopt.toml for this project: the proposal is the only config.")
    for step in ("baseline", "identical"):
        r = result.get(step)
        if r:
            lines += ["", f"{step}: {r.get('verdict', r.get('ok'))} in {r.get('seconds')} s: {str(r.get('reason'))[:600]}"]
    if init.get("proposal"):
        lines += ["", "Proposal:", "", "```toml", init["proposal"].rstrip(), "```"]
    (out / f"{fresh.name}-fresh.md").write_text("\n".join(lines) + "\n")


#: forecasts in benchmark runs (init's longest run): the baseline (4 profiled runs, worktrees, traces) and
#: the identical candidate (BEST, the candidate, BEST profiled; its test run is added); Liger on one H200
#: (2026-12-03): 4.5-4.7 and 4.6-4.9 runs with the test run
FORECAST_RUNS = {"baseline": 5.0, "identical": 3.5}
#: init is started only with this many seconds left in the call (s): two benchmark runs and the tests' own
#: limit (300 s) with room; on one H200 (2026-12-03) flash-linear-attention LayerNorm's init started with
#: ~270 s left and was killed inside its test run, and the next call began it again
INIT_NEEDS_S = 420.0
#: init's default budget (s): where less of the call is left, init gets --budget (what is left, less 10 s)
INIT_BUDGET_S = 600.0


def fits(step: str, result: dict, end: float | None) -> bool:
    """Whether `step` ("init", "baseline", "identical") is forecast to end before `end` (time.monotonic();
    None: no end): init needs INIT_NEEDS_S; the others are forecast from init's runs (`result["init"]["runs_s"]`)
    and, for the identical candidate, init's test run; prints why not."""
    init = result.get("init") or {}
    runs = [x for x in init.get("runs_s") or [] if x]
    if end is None or (not runs and step != "init"):
        return True
    tests = (init_test_s(init.get("tests_ran", [])) or 0.0) if step == "identical" else 0.0
    need = INIT_NEEDS_S if step == "init" else FORECAST_RUNS[step] * max(runs) + tests
    if time.monotonic() + need <= end:
        return True
    print(f"{result['name']}: {step} forecast {need:.0f} s, {max(0.0, end - time.monotonic()):.0f} s left in this "
          "call: left for the next call (--work)", flush=True)
    return False


def check(fresh: Fresh, src: Path, out: Path, work: Path | None, deadline: float | None,
          lease_dir: Path | None = None, end: float | None = None) -> bool:
    """One project: fresh repository, init, baseline, identical candidate. True when all went right.
    `end` (time.monotonic()): the call's end; a baseline or candidate forecast to pass it is left for
    the next call (`fits`)."""
    sha = src.parent / f"{src.name}.sha"
    result: dict = {"project": fresh.github, "name": fresh.name, "commit": sha.read_text().strip() if sha.exists()
                    else "unknown", "command": fresh.command, "versions": versions()}
    root = (work / fresh.name) if work else Path(tempfile.mkdtemp(prefix=f"kopt-fresh-{fresh.name}-"))
    repo = root / "repo"
    saved = out / f"{fresh.name}-fresh.json"
    if not saved.is_file() and work and (work / saved.name).is_file():  # OUT is new: the copy in WORK
        saved = work / saved.name
    result["resumed"] = (repo / "kopt.toml").is_file() and saved.is_file()
    earlier = json.loads(saved.read_text()) if result["resumed"] else {}
    if result["resumed"] and (earlier.get("identical") or {}).get("right"):
        print(f"{fresh.name}: done by an earlier call (identical -> tie): not run again", flush=True)
        write(out, fresh, earlier, work)  # into this call's OUT too
        return True
    if result["resumed"]:
        result["init"] = earlier.get("init", {})
    else:
        if repo.exists():  # an earlier call cut short before init wrote its proposal
            shutil.rmtree(repo)
        if not fits("init", result, end):
            return False
        make_repo(src, repo, fresh.snapshot, result["commit"])
        left = None if end is None else end - time.monotonic() - 10.0
        result["init"] = run_init(repo, fresh, out / f"{fresh.name}-init.log",
                                  left if left is not None and left < INIT_BUDGET_S else None)
        print(f"{fresh.name}: init exit {result['init']['exit_code']} in {result['init']['seconds']} s", flush=True)
    write(out, fresh, result, work)
    if result["init"].get("exit_code") != 0:
        return False
    if deadline is not None and time.monotonic() > deadline:
        print(f"{fresh.name}: deadline: no session this call (pass --work to go on later)", flush=True)
        return False

    from kopt_mcp.referee import Referee

    ref = Referee(repo, tag="fresh", lease_dir=lease_dir or root / "leases")
    try:
        t = time.perf_counter()
        if ref.status().phase == "needs_baseline":
            if not fits("baseline", result, end):
                return False
            b = ref.run_benchmark()
            result["baseline"] = {"ok": b.ok and b.baseline_recorded, "reason": b.reason,
                                  "seconds": round(time.perf_counter() - t, 1),
                                  "classes": [c.model_dump() for c in b.classes],
                                  "gpu_target": b.gpu_target.model_dump() if b.gpu_target else None}
        else:
            # recorded by an earlier call: its entry (wall time included) stays, for the table
            result["baseline"] = (earlier.get("baseline") or {"ok": True, "reason": "recorded by an earlier call",
                                                              "seconds": None}) | {"resumed": True}
        # one plain run of the benchmark (s): the baseline's median run, the unit of every cost (results.Cost)
        result["baseline"]["plain_run_s"] = ref.books.state.plain_run_s
        print(f"{fresh.name}: baseline ok={result['baseline']['ok']}: {result['baseline']['reason'][:300]}", flush=True)
        write(out, fresh, result, work)
        if not result["baseline"]["ok"] or not fits("identical", result, end):
            return False
        Candidate("identical", "tie", "a comment only", fresh.kernel_file, append=IDENTICAL).apply(ref.where.workspace_path)
        t = time.perf_counter()
        v = ref.save_and_test("global", "identical kernel: a comment only")
        result["identical"] = {"verdict": v.verdict, "right": v.verdict == "tie", "reason": v.reason,
                               "seconds": round(time.perf_counter() - t, 1), "rounds": v.rounds,
                               "gpu_delta_pct": v.gpu_delta_pct, "target_deltas_pct": v.target_deltas_pct, "code": v.code,
                               "cost": v.cost.model_dump() if v.cost else None,
                               "correctness": v.correctness.model_dump() if v.correctness else None}
        print(f"{fresh.name}: identical -> {v.verdict}: {v.reason[:300]}", flush=True)
        return v.verdict == "tie"
    finally:
        write(out, fresh, result, work)
        ledger = ref.where.state_dir / "ledger.jsonl"  # every verdict's units, whole operation included
        if ledger.is_file():
            shutil.copy(ledger, out / f"{fresh.name}-ledger.jsonl")
        ref.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--project", required=True, help=f"one of {sorted(FRESH)} (or {sorted(ALIASES)}), or all "
                    f"(issue 35 item 6's seven first: {', '.join(ISSUE35)}; then the table)")
    ap.add_argument("--src", type=Path, required=True, help="the project's staged files, or the staging folder "
                    "holding liger/, tk/, fg/, p5/ (needed with --project all)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=None, help="keep each repository and session in WORK/<name>")
    ap.add_argument("--deadline-s", type=float, default=None, help="start no session after this many seconds")
    ap.add_argument("--end-s", type=float, default=None, help="the call ends this many seconds after the start: a "
                    "baseline or identical candidate forecast to pass it is left for the next call (with --work)")
    ap.add_argument("--lease-dir", type=Path, default=None,
                    help="the GPU lease folder to share with other sessions on this host (default: one of its own)")
    ap.add_argument("--table", action="store_true", help="at the end, write OUT/issue35-table.md (fresh_table.py) "
                    "from the <name>-fresh.json files in WORK (with --work: every call's on this machine) or OUT "
                    "(always with --project all)")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(124))
    names = [ALIASES.get(n, n) for n in a.project.split(",") if n]
    if names != ["all"] and not set(names) <= set(FRESH):
        ap.error(f"--project {a.project}: one or more (comma-separated) of {sorted(FRESH)}, {sorted(ALIASES)}; or all")
    a.out.mkdir(parents=True, exist_ok=True)
    deadline = None if a.deadline_s is None else time.monotonic() + a.deadline_s
    end = None if a.end_s is None else time.monotonic() + a.end_s
    # --src: the project's folder, or the staging folder that holds it (liger/, tk/, ...)
    picked = list(FRESH.values()) if names == ["all"] else [FRESH[n] for n in names]
    # more than one: --src is the staging folder, and a project not staged there is skipped
    todo = [(f, a.src / f.staged if len(picked) > 1 or (a.src / f.staged).is_dir() else a.src) for f in picked]
    ok = True
    for fresh, src in todo:
        if not src.is_dir():
            print(f"{fresh.name}: {src} is not staged: skipped", flush=True)
            continue
        if deadline is not None and time.monotonic() > deadline:  # no init or session this late: the next call's
            print(f"{fresh.name}: deadline: left for the next call (--work)", flush=True)
            ok = False
            continue
        ok &= check(fresh, src, a.out, a.work, deadline, a.lease_dir, end)
    if a.table or names == ["all"]:
        rows = ISSUE35 + tuple(f.name for f, _ in todo if f.name not in ISSUE35)
        print(f"table: {write_table(a.work or a.out, rows, dest=a.out)}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
