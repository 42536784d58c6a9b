"""Two candidate slots sharing one GPU on the Triton example (issue 13 item 6).

The main slot takes the baseline and commits step 1 of the example's scenario (warps per shape).
Then two slot processes run at once, each its own `Referee(slot=...)` (as `kopt-mcp serve --slot`
would), on the one GPU through per-job leases, so their measuring calls alternate:

    slot a: 02-divergent (divergent), 04-subnoise (tie)
    slot b: 03-regress (regressed), 05-rewrite-buggy (incorrect), 06-rewrite-fix (improved, committed)

Checks every verdict against the scenario's `expect`, that at no time two benchmark processes ran on
one GPU (nvidia-smi's compute processes per GPU sampled every 0.5 s: zero double bookings; on a
host of several GPUs the two slots may measure at once on two GPUs), and that the
BEST line is linear (no merge commits). Writes
slots_gpu.json and slots_gpu.md to OUT.

    python benchmarks/slots_gpu/run.py OUT
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import git, write_json  # noqa: E402

TAG = "slots"
PLAN = {"a": ["four-rows-per-program-everywhere", "rename-and-launch-helper"],
        "b": ["eight-warps-for-long-rows", "multi-row-short-rows", "multi-row-short-rows-fix"]}
#: SLOTS_PLAN=short: one step per slot (a: divergent, b: regressed), for a short device call
SHORT = {"a": ["four-rows-per-program-everywhere"], "b": ["eight-warps-for-long-rows"]}


def example() -> Path:
    from kopt_mcp.paths import examples_dir

    return examples_dir() / "triton_softmax"


def steps() -> dict[str, dict]:
    return {s["name"]: s for s in tomllib.loads((example() / "scenario.toml").read_text())["step"]}


def play(repo: str, slot: str | None, names: list[str]) -> list[dict]:
    """Play `names` in slot `slot` (None: the main slot); one record per step with its times."""
    from kopt_mcp.referee import Referee

    ref = Referee(Path(repo), tag=TAG, slot=slot)
    out = []
    try:
        if slot is None and ref.books.state.phase.value == "needs_baseline":
            t0 = time.time()
            ref.run_benchmark()
            out.append({"slot": "main", "step": "baseline", "start": t0, "end": time.time()})
            print(f"baseline: {time.time() - t0:.0f} s", flush=True)
        for name in names:
            st = steps()[name]
            subprocess.run(["git", "apply", "--whitespace=nowarn", str(example() / st["patch"])],
                           cwd=ref.where.workspace_path, check=True)
            t0 = time.time()
            v = ref.save_and_test(st.get("target", "global"), st.get("hypothesis", name))
            rec = {"slot": slot or "main", "step": name, "expect": st["expect"], "verdict": v.verdict,
                   "reason": v.reason[:300], "gpu_delta_pct": v.gpu_delta_pct, "start": t0, "end": time.time()}
            if st.get("then") == "commit" and v.verdict == "improved":
                t1 = time.time()
                c = ref.commit_improvement(name)
                rec.update(committed=c.committed, commit=c.commit, commit_reason=c.reason[:300],
                           commit_start=t1, commit_end=time.time())
            elif v.verdict == "incorrect":
                pass  # the tree stays for repair: the next step's patch applies on top of it
            out.append(rec)
            print(json.dumps({k: v for k, v in rec.items() if k != "reason"}, default=str), flush=True)
    finally:
        ref.close()
    return out


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    from kopt_mcp.commands.demo import prepare_repo

    repo = prepare_repo(example(), Path(tempfile.mkdtemp(prefix="kopt-slots-")) / "triton_softmax")
    from benchmarks.slots_gpu.many import ProcessSampler

    with ProcessSampler(0.5) as sampler:  # benchmark processes per GPU, every 0.5 s
        t0 = time.time()
        records = play(str(repo), None, ["warps-per-shape"])
        t1 = time.time()
        with ProcessPoolExecutor(2) as pool:
            plan = SHORT if os.environ.get("SLOTS_PLAN") == "short" else PLAN
            futs = {s: pool.submit(play, str(repo), s, names) for s, names in plan.items()}
            for s, f in futs.items():
                records += f.result()
        t2 = time.time()
    most = max(sampler.most.values(), default=0)  # per GPU: slots on two GPUs at once are no double booking
    line = git(repo, "log", "--format=%h %p %s", f"kernel-opt/{TAG}").splitlines()
    merges = git(repo, "rev-list", "--min-parents=2", f"kernel-opt/{TAG}").split()
    wrong = [r for r in records if "expect" in r and r["verdict"] != r["expect"]]
    ledgers = {}
    for p in sorted((repo / ".git" / "kopt" / TAG).rglob("ledger.jsonl")):
        ledgers[str(p.relative_to(repo / ".git" / "kopt" / TAG))] = [
            {k: e.get(k) for k in ("event", "attempt", "verdict", "device", "device_id")}
            for e in map(json.loads, p.read_text().splitlines()) if e.get("event") in ("attempt", "baseline", "commit")]
    summary = {"main_s": round(t1 - t0, 1), "slots_s": round(t2 - t1, 1), "wrong": wrong,
               "gpu_process_samples": sampler.samples, "most_gpu_processes_at_once": most,
               "most_processes_per_gpu": dict(sampler.most),
               "merge_commits": merges, "best_line": line, "ledgers": ledgers,
               "records": records}
    write_json(out / "slots_gpu.json", summary)
    md = ["# Two candidate slots on one GPU (Triton example)", "",
          f"main slot (baseline + step 1): {t1 - t0:.0f} s; two slots at once: {t2 - t1:.0f} s", "",
          "| slot | step | expected | verdict | GPU delta % | committed | start-end (s from slots' start) |",
          "|---|---|---|---|---|---|---|"]
    for r in sorted(records, key=lambda r: r["start"]):
        md.append(f"| {r['slot']} | {r['step']} | {r.get('expect', '')} | {r.get('verdict', '')} | "
                  f"{r.get('gpu_delta_pct') if r.get('gpu_delta_pct') is not None else ''} | {r.get('committed', '')} | "
                  f"{r['start'] - t1:.0f}-{r.get('commit_end', r['end']) - t1:.0f} |")
    md += ["", "BEST line (newest first):", "", *[f"    {x}" for x in line], "",
           f"wrong verdicts: {len(wrong)}; most benchmark processes on one GPU at once: {most} "
           f"({sampler.samples} nvidia-smi samples, 0.5 s apart; per GPU {dict(sampler.most)}); merge commits on the BEST line: {len(merges)}"]
    (out / "slots_gpu.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    return 1 if wrong or most > 1 or merges else 0


if __name__ == "__main__":
    sys.exit(main())
