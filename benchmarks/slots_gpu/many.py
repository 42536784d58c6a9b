"""N candidate slots on the N GPUs of one host, against one slot on one GPU (issue 28).

One session on a planted-effect repository (benchmarks/decision_quality: `repo_gpu`, a CuPy spin
kernel timed with CUDA events, or `repo_gpu_dobench`, a Triton kernel timed by do_bench). The main
slot takes the baseline; then three phases, each in its own slot processes (`Referee(slot=...)`, as
`kopt-mcp serve --slot` would be), all sharing one lease folder, so the GPU gate gives every
measuring call one GPU of its own:

    phase 1: one slot           (it holds one GPU at a time: one slot on one GPU)
    phase 2: N slots            (N = the host's GPU count)
    phase 3: 2N slots on N GPUs (two slots per GPU: waits must be fair)

Every slot plays `--per-slot` verdicts, the planted effects in turn (identical, -2% work, +5% work),
rotated by slot so that different effects run at once. BEST is never committed over (an `improved`
candidate is reverted), so every verdict faces the same BEST_COMMIT and the same baseline.

Measured per phase: verdicts per minute over the span from its first verdict's start to its last
verdict's end, and the ratio to phase 1 (target >= 0.9 N for phases 2 and 3). Checked:

- zero double bookings per GPU, two ways: every measuring call's job lease from the slots' ledgers
  (`job_lease`: device, held_from, held_until; two spans of one GPU must not overlap), and
  the compute processes of every GPU sampled every 0.25 s through the referee's probe (NVML, else
  nvidia-smi): at most one benchmark process per GPU at once;
- decision quality on this host: identical never kept, -2% kept in >= 95% of trials, +5% never kept
  and regressed in >= 95%, with the verdicts per GPU;
- fairness of phase 3: every slot finished its verdicts, and each slot's total wait for a GPU.

`--control K` first runs the host's own control (host_control.py: the benchmark process K times on one
GPU alone, then on all N at once, no kopt-mcp) and reports the bound it sets, N / slowdown, beside the
ratios: on 4 x H200 (2026-11-27) four processes at once ran 1.34-1.64x slower each, whoever started them.

Writes many_slots.json and many_slots.md to OUT; exit 1 when a check fails (the throughput checks
keep the issue's 0.9 N target, not the host's bound).

    python benchmarks/slots_gpu/many.py OUT [--repo gpu|gpu-dobench] [--per-slot 6] [--max-seconds 500] [--control 4]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import gpu_uuids, write_json  # noqa: E402
from benchmarks.decision_quality.run import best_work, make_repo, set_work  # noqa: E402
from benchmarks.throughput.run import double_bookings  # noqa: E402

TAG = "many"
#: planted effect -> % change of the kernel's work (- = less work = faster)
EFFECTS = {"identical": 0.0, "-2%": -2.0, "+5%": 5.0}
KEEP_SHARE = 0.95  # -2% kept, and +5% regressed, in at least this share of trials
THROUGHPUT_SHARE = 0.9  # N slots reach at least this share of N times one slot's verdicts per minute


def plan(slot_index: int, per_slot: int) -> list[str]:
    """The effects slot `slot_index` plays: the effects in turn, rotated by the slot's index."""
    names = list(EFFECTS)
    return [names[(slot_index + i) % len(names)] for i in range(per_slot)]


def play(repo: str, slot: str, names: list[str], lease_dir: str, base: int, deadline: float) -> list[dict]:
    """Slot `slot` judges one planted candidate per name (no new verdict starts past `deadline`,
    epoch s); one record per verdict."""
    from kopt_mcp.referee import Referee

    ref = Referee(Path(repo), tag=TAG, slot=slot, lease_dir=Path(lease_dir))
    out = []
    try:
        for i, name in enumerate(names):
            if time.time() > deadline:
                break
            set_work(ref.where.workspace_path, base, EFFECTS[name])
            if EFFECTS[name] == 0.0:  # identical work, but a changed file (an empty diff is refused)
                kp = ref.where.workspace_path / "kernel.py"
                kp.write_text(kp.read_text() + f"# {slot} {i}\n")
            t0 = time.time()
            v = ref.save_and_test("global", f"{name} ({slot}, {i})")
            out.append({"slot": slot, "effect": name, "verdict": v.verdict, "code": v.code,
                        "gpu_delta_pct": v.gpu_delta_pct, "rounds": v.rounds,
                        "gpu": v.device.index if v.device else None, "start": t0, "end": time.time()})
            if v.verdict == "improved":
                ref.revert_to_best(f"{name}: planted, never committed")
    finally:
        ref.close()
    return out


def run_phase(label: str, slots: list[str], per_slot: int, repo: Path, lease_dir: Path, base: int,
              deadline: float) -> dict:
    """All of `slots` at once, each in a spawned process; the phase's records and verdicts/minute."""
    ctx = mp.get_context("spawn")
    with ProcessPoolExecutor(len(slots), mp_context=ctx) as pool:
        futs = [pool.submit(play, str(repo), s, plan(k, per_slot), str(lease_dir), base, deadline)
                for k, s in enumerate(slots)]
        records = [r for f in futs for r in f.result()]
    span = (max(r["end"] for r in records) - min(r["start"] for r in records)) if records else 0.0
    rate = 60.0 * len(records) / span if span > 0 else 0.0
    print(f"{label}: {len(records)} verdicts in {span:.0f} s ({rate:.2f}/min)", flush=True)
    return {"label": label, "slots": slots, "verdicts": len(records), "span_s": round(span, 1),
            "per_min": round(rate, 3), "records": records}


class ProcessSampler:
    """Benchmark processes per GPU, every `period_s` s, in a thread, through the probe the referee
    uses (`make_probe("auto")`: NVML where nvidia-ml-py is installed, else nvidia-smi). `most`:
    uuid -> the most compute processes seen at once. No NVIDIA GPU (`--repo cpu`): no samples."""

    def __init__(self, period_s: float = 0.25) -> None:
        from kopt_mcp.gpus import make_probe

        self.period_s, self.samples, self.most = period_s, 0, Counter()
        self.probe = make_probe("auto")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        from kopt_mcp.errors import ProbeError

        while not self._stop.is_set():
            try:
                readings = self.probe.read()
            except ProbeError:
                readings = []
            for r in readings:
                if r.vendor == "nvidia":
                    self.most[r.uuid] = max(self.most[r.uuid], len(r.processes))
            self.samples += bool(readings)
            self._stop.wait(self.period_s)

    def __enter__(self) -> ProcessSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def lease_spans(repo: Path) -> list[dict]:
    """Every `job_lease` record of the session's ledgers (main slot and every slot): slot, device
    (the GPU's uuid), start and end (epoch s), wait (s)."""
    from kopt_mcp.ledger import Store
    from kopt_mcp.paths import session_dir

    root = session_dir(repo, TAG)
    dirs = [("main", root)] + [(d.name, d) for d in sorted((root / "slots").glob("*")) if d.is_dir()]
    spans = []
    for slot, d in dirs:
        for e in Store(d).ledger():
            if e.get("event") == "job_lease" and e.get("device"):
                spans.append({"slot": slot, "device": e["device"].split(":", 2)[-1], "start": e["held_from"],
                              "end": e["held_until"], "waited_s": e.get("waited_s") or 0.0})
    return spans


def quality(records: list[dict]) -> dict:
    """Per effect: trials, kept, verdicts, and verdicts per GPU; `met` per the targets."""
    out = {}
    for name in EFFECTS:
        rs = [r for r in records if r["effect"] == name]
        kept = sum(r["verdict"] == "improved" for r in rs)
        regressed = sum(r["verdict"] == "regressed" for r in rs)
        if name == "identical":
            met = kept == 0
        elif name == "-2%":
            met = bool(rs) and kept >= KEEP_SHARE * len(rs)
        else:
            met = kept == 0 and bool(rs) and regressed >= KEEP_SHARE * len(rs)
        out[name] = {"trials": len(rs), "kept": kept, "regressed": regressed, "met": met,
                     "verdicts": dict(Counter(r["verdict"] for r in rs)),
                     "per_gpu": dict(sorted(Counter(str(r["gpu"]) for r in rs).items()))}
    return out


def fairness(phase: dict, spans: list[dict], per_slot: int) -> dict:
    """Per slot of `phase`: verdicts done, total wait for a GPU (s, from its job leases), last end."""
    t0 = min((r["start"] for r in phase["records"]), default=0.0)
    rows = {}
    for s in phase["slots"]:
        rs = [r for r in phase["records"] if r["slot"] == s]
        waits = [x["waited_s"] for x in spans if x["slot"] == s]
        rows[s] = {"verdicts": len(rs), "wait_s": round(sum(waits), 1), "calls": len(waits),
                   "done_at_s": round(max((r["end"] for r in rs), default=t0) - t0, 1)}
    done = [v["verdicts"] for v in rows.values()]
    return {"slots": rows, "starved": [s for s, v in rows.items() if v["verdicts"] == 0],
            "all_finished": all(n == per_slot for n in done)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--repo", choices=("gpu", "gpu-dobench", "cpu"), default="gpu",
                    help="cpu: the NumPy planted repository, a plumbing check without a GPU (its effects are "
                         "too small for a 2-core VM's noise and the CPU is one shared device: no targets)")
    ap.add_argument("--per-slot", type=int, default=6, help="verdicts each slot plays per phase")
    ap.add_argument("--max-seconds", type=float, default=500.0, help="no verdict starts past this (from the start)")
    ap.add_argument("--gpus", type=int, default=None, help="N (default: every GPU nvidia-smi lists)")
    ap.add_argument("--control", type=int, default=0, metavar="K",
                    help="first time the benchmark process K times alone and on all N GPUs at once (host_control.py)")
    a = ap.parse_args(argv)
    a.out.mkdir(parents=True, exist_ok=True)
    start = time.time()
    deadline = start + a.max_seconds
    uuids = gpu_uuids()
    n = a.gpus or len(uuids) or 1
    tmp = Path(tempfile.mkdtemp(prefix="kopt-many-"))
    repo, lease_dir = make_repo(a.repo, tmp / "repo"), tmp / "leases"
    base = best_work(repo)
    control = None
    if a.control and a.repo != "cpu":
        from benchmarks.slots_gpu.host_control import measure

        control = measure(a.repo, n, a.control, tmp / "control")
        print(f"host control: {control['alone_mean_s']} s per run alone, {control['together_mean_s']} s with {n} "
              f"GPUs at once ({control['slowdown']}x)", flush=True)
    from kopt_mcp.referee import Referee

    with ProcessSampler() as sampler:
        ref = Referee(repo, tag=TAG, lease_dir=lease_dir)
        t = time.time()
        b = ref.run_benchmark()
        ref.close()
        if not b.baseline_recorded:
            raise SystemExit(f"no baseline: {b.reason}")
        baseline_s = time.time() - t
        print(f"baseline: {baseline_s:.0f} s", flush=True)
        phases = [run_phase("1 slot", ["p1s0"], a.per_slot, repo, lease_dir, base, deadline),
                  run_phase(f"{n} slots", [f"p2s{k}" for k in range(n)], a.per_slot, repo, lease_dir, base, deadline),
                  run_phase(f"{2 * n} slots", [f"p3s{k}" for k in range(2 * n)], a.per_slot, repo, lease_dir, base,
                            deadline)]
    spans = lease_spans(repo)
    records = [r for p in phases for r in p["records"]]
    for r in records:  # the verdict's wait for a GPU: its job lease, granted while the verdict ran
        r["waited_s"] = sum(x["waited_s"] for x in spans if x["slot"] == r["slot"] and r["start"] <= x["start"] <= r["end"])
    one = phases[0]["per_min"]
    for p in phases:
        p["ratio_to_one"] = round(p["per_min"] / one, 3) if one else None
    for p in phases:
        p["fairness"] = fairness(p, spans, a.per_slot)
    fair = phases[2]["fairness"]  # 2N slots on N GPUs: the phase whose waits must be fair
    dq = quality(records)
    booked = double_bookings([dict(s) for s in spans])
    most = {str(uuids.get(u, u)): k for u, k in sorted(sampler.most.items())}
    checks = {
        "throughput_n": phases[1]["ratio_to_one"] is not None and phases[1]["ratio_to_one"] >= THROUGHPUT_SHARE * n,
        "throughput_2n": phases[2]["ratio_to_one"] is not None and phases[2]["ratio_to_one"] >= THROUGHPUT_SHARE * n,
        "no_double_booking_ledger": not booked and bool(spans),
        "one_process_per_gpu": bool(most) and max(most.values()) <= 1,
        "decision_quality": all(v["met"] for v in dq.values()),
        "no_slot_starved": not fair["starved"],
    }
    summary = {"gpus": n, "repo": a.repo, "probe": sampler.probe.name, "host_control": control,
               "host_bound": round(n / control["slowdown"], 3) if control else None, "per_slot": a.per_slot, "baseline_s": round(baseline_s, 1),
               "phases": [{k: v for k, v in p.items() if k != "records"} for p in phases],
               "checks": checks, "double_bookings": booked, "job_leases": len(spans),
               "most_processes_per_gpu": most, "smi_samples": sampler.samples, "quality": dq,
               "fairness": fair, "records": records, "total_s": round(time.time() - start, 1)}
    write_json(a.out / "many_slots.json", summary)
    text = report(summary)
    (a.out / "many_slots.md").write_text(text)
    print(text)
    return 0 if all(checks.values()) else 1


def report(s: dict) -> str:
    """The Markdown summary of `main`'s result dict."""
    n = s["gpus"]
    md = [f"# {n} GPUs, 1 / {n} / {2 * n} candidate slots ({s['repo']} planted repository)", "",
          f"Baseline {s['baseline_s']:.0f} s; {s['per_slot']} verdicts per slot per phase; total {s['total_s']:.0f} s; "
          f"GPU probe {s.get('probe', '?')}.", "",
          "| phase | verdicts | span s | verdicts/min | ratio to 1 slot | target |", "|---|---|---|---|---|---|"]
    for i, p in enumerate(s["phases"]):
        target = "" if i == 0 else f">= {THROUGHPUT_SHARE * n:.1f}"
        md.append(f"| {p['label']} | {p['verdicts']} | {p['span_s']:.0f} | {p['per_min']:.2f} | "
                  f"{p['ratio_to_one']} | {target} |")
    if s.get("host_bound"):
        c = s["host_control"]
        md += ["", f"Host control (no kopt-mcp): {c['alone_mean_s']} s per benchmark run alone, {c['together_mean_s']} s "
               f"with {n} GPUs busy at once ({c['slowdown']}x): no scheduler exceeds {s['host_bound']}x one slot here."]
    md += ["", "| planted effect | trials | kept | verdicts | trials per GPU | met |", "|---|---|---|---|---|---|"]
    for name, q in s["quality"].items():
        md.append(f"| {name} | {q['trials']} | {q['kept']} | {q['verdicts']} | {q['per_gpu']} | "
                  f"{'yes' if q['met'] else 'NO'} |")
    md += ["", "Per slot (phases 2 and 3):", "",
           "| phase | slot | verdicts | measuring calls | total wait for a GPU (s) | done at (s) |", "|---|---|---|---|---|---|"]
    for p in s["phases"][1:]:
        for slot, v in p["fairness"]["slots"].items():
            md.append(f"| {p['label']} | {slot} | {v['verdicts']} | {v['calls']} | {v['wait_s']} | {v['done_at_s']} |")
    md += ["", f"Job leases in the ledgers: {s['job_leases']}; overlapping on one GPU: {len(s['double_bookings'])}. "
           f"Most benchmark processes on one GPU at once ({s.get('probe', '?')}, {s['smi_samples']} samples): "
           f"{s['most_processes_per_gpu']}.", "",
           "Checks: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in s["checks"].items()), ""]
    return "\n".join(md)


if __name__ == "__main__":
    sys.exit(main())
