"""Device check of the commit-time out-of-process confirmation (kopt_mcp/profilers/confirm.py).

Run by scripts/confirm_check.sh on an NVIDIA GPU with torch, triton and ncu. A tiny Triton
benchmark (one kernel, `scale_kernel`, two config classes of 4M and 16M floats, 100 timed launches
each) in several variants, each its own folder (a "tree"):

  best    REPEAT=200 (the slow BEST)
  fast    REPEAT=0   (a large real win)
  slight  REPEAT=170 (a smaller real win)
  same    REPEAT=200 (unchanged)
  slower  REPEAT=260 (a regression)
  cheat   REPEAT=200 and torch.cuda.Event.elapsed_time patched to halve every time (the cheat)

The claimed gain is what the in-process keep metric would see: the CUPTI trace (median launch per
launch group, kopt_mcp.rules.keep.target_median_us) where cupti-python is importable, else the
benchmark's own CUDA-event timing; for `cheat` and `slower` it is the benchmark's own (patched or
forged) timing, standing in for a forged in-process trace. The floor is gpu_gain_floor of two
adjacent CUPTI (or event) runs of BEST. Each case then runs `confirm_keep` with ncu as the parent
process and prints the Confirmation. Expected: fast, slight confirmed; cheat, slower refuted; same
is informative only (a noise-sized claim). Writes confirm_check.json and confirm_check.md to OUT.

usage: python scripts/confirm_check.py OUT_DIR
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from pathlib import Path

from kopt_mcp.bench.runner import run_command
from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.trace import KernelTrace
from kopt_mcp.profilers.confirm import ConfirmNcu
from kopt_mcp.profilers.cupti import CuptiProfiler
from kopt_mcp.referee.confirmation import confirm_keep
from kopt_mcp.rules.floor import gpu_gain_floor
from kopt_mcp.rules.keep import target_median_us

BENCH = '''
import json, torch, triton, triton.language as tl

@triton.jit
def scale_kernel(x_ptr, y_ptr, n, REPEAT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    y = tl.load(x_ptr + offs, mask=mask)
    for _ in range(REPEAT):
        y = y * 1.000001 + 1e-7
    tl.store(y_ptr + offs, y, mask=mask)

REPEAT = {repeat}
if {cheat}:  # the cheat: the benchmark's own timer reports half of every time
    _elapsed = torch.cuda.Event.elapsed_time
    torch.cuda.Event.elapsed_time = lambda self, end: _elapsed(self, end) * 0.5

out = {{}}
for n in (4 << 20, 16 << 20):
    x = torch.randn(n, device="cuda")
    y = torch.empty_like(x)
    grid = (triton.cdiv(n, 1024),)
    scale_kernel[grid](x, y, n, REPEAT=REPEAT, BLOCK=1024)
    torch.cuda.synchronize()
    times = []
    for _ in range(100):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        scale_kernel[grid](x, y, n, REPEAT=REPEAT, BLOCK=1024)
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1000.0)
    out[n] = sorted(times)[len(times) // 2]
print("EVENTS_US " + json.dumps(out))
'''
VARIANTS = {"best": (200, False), "fast": (0, False), "slight": (170, False), "same": (200, False),
            "slower": (260, False), "cheat": (200, True)}
#: (candidate, where the claim comes from, expected status or None for informative)
CASES = [("fast", "in-process trace", "confirmed"), ("slight", "in-process trace", "confirmed"),
         ("cheat", "the benchmark's own (patched) timer", "refuted"),
         ("slower", "forged: the benchmark's timer read as a gain", "refuted"),
         ("same", "in-process trace", None)]
COMMAND = "python3 bench.py"


def make_trees(root: Path) -> dict[str, Path]:
    trees = {}
    for name, (repeat, cheat) in VARIANTS.items():
        d = root / name
        d.mkdir(parents=True, exist_ok=True)
        (d / "bench.py").write_text(BENCH.format(repeat=repeat, cheat=cheat))
        trees[name] = d
    return trees


class Runner:
    """run_profiled for confirm_keep: runs the wrapped command in the tree's folder, parses."""

    def __init__(self, runs: Path) -> None:
        self.runs, self.walls, self.cache = runs, {}, {}

    def __call__(self, tree: str, prof, label: str) -> KernelTrace:
        key = (tree, prof.wrap(COMMAND, Path("X")))
        if key in self.cache:  # BEST measured once per command, reused for every case
            return self.cache[key]
        out = self.runs / f"{Path(tree).name}-{prof.name}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        t0 = time.monotonic()
        r = run_command(prof.wrap(COMMAND, out), Path(tree), {}, 300.0, out / "profile.log")
        self.walls[f"{Path(tree).name} {prof.name}"] = round(time.monotonic() - t0, 1)
        if r.exit_code != 0:
            raise ProfilerError(f"{prof.name} run of {Path(tree).name} exited {r.exit_code}: {r.log_tail[-1500:]}")
        trace = prof.parse(out)
        self.cache[key] = trace
        return trace


_EVENTS: dict[Path, float] = {}
_WALLS: dict[str, float] = {}


def events_us(tree: Path, runs: Path) -> float:
    """The benchmark's own CUDA-event median per step (us, sum over the two sizes), once per tree."""
    if tree in _EVENTS:
        return _EVENTS[tree]
    log = runs / f"{tree.name}-events.log"
    t0 = time.monotonic()
    r = run_command(COMMAND, tree, {}, 300.0, log)
    _WALLS[f"{tree.name} plain"] = round(time.monotonic() - t0, 1)
    line = next((ln for ln in log.read_text().splitlines() if ln.startswith("EVENTS_US ")), None)
    if r.exit_code != 0 or line is None:
        raise SystemExit(f"the benchmark failed in {tree}: {r.log_tail[-1500:]}")
    _EVENTS[tree] = sum(json.loads(line[len("EVENTS_US "):]).values())
    return _EVENTS[tree]


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    runs = out / "runs"
    trees = make_trees(Path("/tmp/kopt_confirm_check"))
    runner = Runner(runs)
    cupti = CuptiProfiler()
    use_cupti = cupti.available()
    t_start = time.monotonic()

    def in_process_us(name: str, again: bool = False) -> float:
        if not use_cupti:
            return events_us(trees[name], runs)
        if again:
            runner.cache.pop((str(trees[name]), cupti.wrap(COMMAND, Path("X"))), None)
        return target_median_us(runner(str(trees[name]), cupti, "claim"), "scale_kernel")[0]

    best1 = in_process_us("best")
    best2 = in_process_us("best", again=True)
    best_in = (best1 + best2) / 2.0
    spread = abs(best2 - best1) / best_in * 100.0
    floor = gpu_gain_floor([spread], spread, 0.2)
    results = []
    for cand, source, expected in CASES:
        if source == "in-process trace":
            claimed = (best_in - in_process_us(cand)) / best_in * 100.0
        elif cand == "cheat":
            b, c = events_us(trees["best"], runs), events_us(trees["cheat"], runs)
            claimed = (b - c) / b * 100.0
        else:  # forged: the size of the regression, read as a gain
            b, c = events_us(trees["best"], runs), events_us(trees[cand], runs)
            claimed = abs(c - b) / b * 100.0
        # `fast` exercises [profiler] kernel (ncu's demangled-name filter), the rest BEST's target
        # names (ncu's function-name filter, the default when [profiler] kernel is empty)
        regex = "scale_kernel" if cand == "fast" else None
        conf = confirm_keep(runner, str(trees[cand]), str(trees["best"]), claimed, floor.pct, vendor="nvidia",
                            kernel_regex=regex, target_names=["scale_kernel"])
        if conf.status == "unavailable" and "filter-mode" in conf.reason and ConfirmNcu.filter_mode:
            print(f"ncu refused --filter-mode {ConfirmNcu.filter_mode}: retrying with ncu's default", flush=True)
            fallback = ConfirmNcu.filter_mode
            ConfirmNcu.filter_mode = None
            conf = confirm_keep(runner, str(trees[cand]), str(trees["best"]), claimed, floor.pct, vendor="nvidia",
                                kernel_regex=regex, target_names=["scale_kernel"])
            conf.reason += f" [--filter-mode {fallback} refused by this ncu: ran with the default]"
        ok = expected is None or conf.status == expected
        results.append({"candidate": cand, "claim_from": source, "claimed_gain_pct": round(claimed, 3),
                        "floor_pct": round(floor.pct, 3), "status": conf.status, "expected": expected, "ok": ok,
                        "gain_pct": None if conf.gain_pct is None else round(conf.gain_pct, 3),
                        "reason": conf.reason})
        print(f"[{'ok' if ok else 'UNEXPECTED'}] {cand}: {conf.status} (expected {expected}): {conf.reason}", flush=True)
    summary = {"claims_from": "CUPTI trace" if use_cupti else "CUDA events (cupti-python not importable)",
               "best_in_process_us": [round(best1, 3), round(best2, 3)], "spread_pct": round(spread, 3),
               "floor": floor.shown(), "ncu_command": ConfirmNcu(None, ["scale_kernel"]).wrap(COMMAND, Path("OUT")),
               "run_wall_s": {**_WALLS, **runner.walls}, "total_wall_s": round(time.monotonic() - t_start, 1), "cases": results}
    (out / "confirm_check.json").write_text(json.dumps(summary, indent=2))
    lines = ["# confirm_check", "", (f"claims from: {summary['claims_from']}; BEST in process {best1:.2f} / "
             f"{best2:.2f} us, spread {spread:.3f}%; {floor.shown()}"), "", f"`{summary['ncu_command']}`", "",
             "| candidate | claim from | claimed % | out-of-process % | status | expected |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['candidate']} | {r['claim_from']} | {r['claimed_gain_pct']:+.2f} | "
              f"{'-' if r['gain_pct'] is None else format(r['gain_pct'], '+.2f')} | {r['status']} | "
              f"{r['expected'] or 'informative'} |" for r in results]
    lines += ["", f"run wall times (s): {summary['run_wall_s']}; total {summary['total_wall_s']} s"]
    (out / "confirm_check.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results/latest")))
