#!/usr/bin/env python3
"""tk_probe: time triton-kernels' two target kernels, BEST (upstream) against each candidate of
projects.py, per launch, on the benchmark's own shapes -- a one-minute look before a refereed loop.

    python .devstage/benchmarks/real_repos/tk_probe.py --src .devstage/src/tk --out $OUT \\
        [--only win-bwd,win-bwd-dw] [--sweep] [--seq-lens 256,4096] [--rep 20] [--budget-s 80]

Needs torch, triton and a GPU; nothing else (projects.py sits beside this file). For every shape of
benchmarks/rms_norm.py (x = randn(4, 24, seq_len, 128), fp32, seq_len 256..4096) and every module
(BEST, then each candidate applied to a temporary copy of triton_kernels/kernels/normalization.py and
imported under its own name, then BEST again; the largest shape first):

- runs forward and backward once, records every launch of a `_rms_norm_(fwd|bwd)` Triton kernel
  (the module's JIT functions are wrapped), and checks y, dx, dW against the project's torch reference
  (triton_kernels/functional: rms_norm_torch) with the tolerances of tests/test_rms_norm.py (atol 1e-5,
  1e-3, 1e-3; rtol 0): `ok`; `as BEST` where BEST misses them too on this shape (the benchmark's
  shapes go past the test's) and the candidate's error is at most twice BEST's; else `FAIL ...`;
- `kernel_ms`: triton.testing.do_bench (median; L2 flushed before each repetition, as in the benchmark)
  of replaying exactly those launches: the target kernels' GPU time for one forward or one backward;
- `call_ms`: do_bench of the benchmark's own call (forward: rms_norm(x, w); backward: y.backward(dy,
  retain_graph=True), torch's sum over dW and the gradient accumulation included).

Prints one JSON line per (candidate, direction, seq_len) with both times and their ratio to BEST (the
mean of BEST's two timings), then one summary line per candidate: the kernel gain over all its
(direction, shape) items weighted by BEST's kernel time (`summarize`), also per direction. Writes OUT/tk_probe.json after every shape. A candidate that fails to apply,
import, compile or match BEST is reported and the others go on; exit 0 unless BEST itself fails.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import re
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from projects import TK_NORM, TRITON_KERNELS

#: benchmarks/rms_norm.py at d068688: args and the seq_len sweep
BATCH, HEADS, HEAD_DIM = 4, 24, 128
SEQ_LENS = [256 * i for i in range(1, 17)]
#: tests/test_rms_norm.py: assert_close(..., atol=..., rtol=0)
ATOL = {"y": 1e-5, "dx": 1e-3, "dw": 1e-3}
#: the kopt.toml's [profiler] kernel
TARGET = re.compile(r"_rms_norm_(fwd|bwd)")
BEST = "BEST"
#: --sweep: other tile sizes of the tiled candidates (name@r<rows>t<fp32 per thread> / @f<rows>w<warps>)
SWEEP = [
    ("win-bwd-dw", {"bwd_rows": 4, "bwd_per_thread": 4}),     # 4 warps
    ("win-bwd-dw", {"bwd_rows": 8, "bwd_per_thread": 8}),     # 4 warps (as `win`, 16x less dW)
    ("win-bwd-dw", {"bwd_rows": 16, "bwd_per_thread": 16}),   # 4 warps
    ("win-bwd-dw", {"bwd_rows": 32, "bwd_per_thread": 16}),   # 8 warps
    ("win-bwd-dw", {"bwd_rows": 32, "bwd_per_thread": 8}),    # 16 warps
    ("win-bwd", {"bwd_rows": 2, "bwd_per_thread": 4}),        # 2 warps: upstream's loop body, vectorised
    ("win-bwd", {"bwd_rows": 4, "bwd_per_thread": 4}),        # 4 warps
    ("win-bwd", {"bwd_rows": 8, "bwd_per_thread": 4}),        # 8 warps
    ("win-fwd-bwd", {"fwd_rows": 16, "fwd_warps": 4}),
    ("win-fwd-bwd", {"fwd_rows": 64, "fwd_warps": 8}),
]


def sweep_variants(candidates) -> list:
    """The SWEEP variants of `candidates` (by base name), renamed base@r..t.. or base@f..w.."""
    import dataclasses

    by_name = {c.name: c for c in candidates}
    out = []
    for base, params in SWEEP:
        if base not in by_name:
            continue
        tag = (f"@f{params['fwd_rows']}w{params['fwd_warps']}" if "fwd_rows" in params
               else f"@r{params['bwd_rows']}t{params['bwd_per_thread']}")
        out.append(dataclasses.replace(by_name[base], name=base + tag, **params))
    return out


def summarize(items: list[dict]) -> dict[str, dict]:
    """Per candidate: the kernel gain (%) weighted by BEST's time shares, overall and per direction.

    `items`: dicts with candidate, direction, best_kernel_ms, kernel_ms (None where not measured).
    Gain = (1 - sum_i w_i * kernel_ms_i / best_kernel_ms_i) * 100 with w_i = best_kernel_ms_i / sum of
    best_kernel_ms over the candidate's measured items (higher is better; +5 means 5% less GPU time):
    one launch of each item, so large shapes weigh more than in the keep metric, whose shares come from
    a time-driven harness (do_bench repeats a small kernel more often). `mean_ratio`: the unweighted
    mean of kernel_ms / best_kernel_ms (each shape and direction alike).
    `fwd_call_gain_pct`/`bwd_call_gain_pct`: the same over the benchmark's whole calls (call_ms).
    Returns {candidate: {"gain_pct", "fwd_gain_pct", "bwd_gain_pct", "fwd_call_gain_pct",
    "bwd_call_gain_pct", "mean_ratio", "items"}} (None where nothing was measured). Pure; never raises for missing numbers."""
    out: dict[str, dict] = {}
    for cand in dict.fromkeys(i["candidate"] for i in items):
        mine = [i for i in items if i["candidate"] == cand and i.get("kernel_ms") and i.get("best_kernel_ms")]
        row: dict = {"items": len(mine), "mean_ratio": (round(sum(i["kernel_ms"] / i["best_kernel_ms"] for i in mine)
                                                             / len(mine), 4) if mine else None)}
        for key, sel in (("gain_pct", None), ("fwd_gain_pct", "fwd"), ("bwd_gain_pct", "bwd")):
            part = [i for i in mine if sel is None or i["direction"] == sel]
            total = sum(i["best_kernel_ms"] for i in part)
            row[key] = (round((1 - sum(i["kernel_ms"] for i in part) / total) * 100, 2) if total else None)
        calls = [i for i in items if i["candidate"] == cand and i.get("call_ms") and i.get("best_call_ms")]
        for key, sel in (("fwd_call_gain_pct", "fwd"), ("bwd_call_gain_pct", "bwd")):
            part = [i for i in calls if i["direction"] == sel]
            total = sum(i["best_call_ms"] for i in part)
            row[key] = (round((1 - sum(i["call_ms"] for i in part) / total) * 100, 2) if total else None)
        out[cand] = row
    return out


class Recorder:
    """Stands in for a module's JIT kernel: launches it as `kernel[grid](...)` does and, while `log`
    is a list, appends (launcher, args, kwargs) so the launch can be replayed alone."""

    def __init__(self, kernel, name: str):
        self.kernel, self.name, self.log = kernel, name, None

    def __getitem__(self, grid):
        launcher = self.kernel[grid]

        def launch(*args, **kwargs):
            if self.log is not None:
                self.log.append((self.name, str(grid), kwargs.get("num_warps"), launcher, args, kwargs))
            return launcher(*args, **kwargs)

        return launch


def register_packages(src: Path) -> None:
    """Make `triton_kernels.kernels.utils` (normalization.py's one project import) importable from `src`
    without running the packages' __init__ files (they import every kernel, einops included)."""
    import types

    for pkg, folder in (("triton_kernels", src / "triton_kernels"),
                        ("triton_kernels.kernels", src / "triton_kernels" / "kernels")):
        if pkg not in sys.modules:
            mod = types.ModuleType(pkg)
            mod.__path__ = [str(folder)]
            sys.modules[pkg] = mod


def load_module(name: str, text: str, tmp: Path):
    """Import `text` (a normalization.py) as module tk_probe_<name>; wrap its target JIT kernels.
    Returns (module, [Recorder]). Raises whatever the import raises."""
    from triton.runtime.jit import JITFunction

    stem = "tk_probe_" + re.sub(r"\W", "_", name)
    path = tmp / f"{stem}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(stem, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[stem] = mod
    spec.loader.exec_module(mod)
    recs = []
    for attr, obj in list(vars(mod).items()):
        if isinstance(obj, JITFunction) and TARGET.search(attr):
            rec = Recorder(obj, attr)
            setattr(mod, attr, rec)
            recs.append(rec)
    if not recs:
        raise RuntimeError(f"no JIT kernel matching {TARGET.pattern} in the module")
    return mod, recs


def candidate_text(cand, src: Path, tmp: Path) -> str:
    """normalization.py from `src` with `cand`'s edit applied in a scratch copy (EditError if its anchor moved)."""
    ws = tmp / ("ws_" + re.sub(r"\W", "_", cand.name))
    (ws / TK_NORM).parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / TK_NORM, ws / TK_NORM)
    cand.apply(ws)
    return (ws / TK_NORM).read_text()


def main() -> int:
    ap = argparse.ArgumentParser(description="time triton-kernels' target kernels: BEST vs each candidate")
    ap.add_argument("--src", required=True, type=Path, help="the project snapshot (holds triton_kernels/)")
    ap.add_argument("--out", required=True, type=Path, help="folder for tk_probe.json")
    ap.add_argument("--only", default=None, help="comma-separated candidate names (default: all of projects.py)")
    ap.add_argument("--seq-lens", default=None, help="comma-separated seq_len values (default: the benchmark's 16)")
    ap.add_argument("--rep", type=int, default=20, help="do_bench rep in ms per timing (default 20)")
    ap.add_argument("--budget-s", type=float, default=80.0, help="start no new shape after this many s (default 80)")
    ap.add_argument("--sweep", action="store_true",
                    help="also try other tile sizes of the tiled candidates (SWEEP; ~3 s each)")
    a = ap.parse_args()
    t0 = time.monotonic()
    a.out.mkdir(parents=True, exist_ok=True)
    register_packages(a.src.resolve())

    import torch
    import triton
    from triton.testing import do_bench

    # largest first: where --budget-s cuts the sweep, the shapes with the most weight are measured
    seq_lens = sorted((int(s) for s in a.seq_lens.split(",")) if a.seq_lens else SEQ_LENS, reverse=True)
    wanted = a.only.split(",") if a.only else [c.name for c in TRITON_KERNELS.candidates]
    report: dict = {"versions": f"torch {torch.__version__} triton {triton.__version__}",
                    "device": torch.cuda.get_device_name(), "args": {k: str(v) for k, v in vars(a).items()},
                    "items": [], "errors": {}, "skipped_seq_lens": []}

    def save() -> None:
        report["summary"] = summarize(report["items"])
        report["seconds"] = round(time.monotonic() - t0, 1)
        (a.out / "tk_probe.json").write_text(json.dumps(report, indent=1))

    def emit(obj: dict) -> None:
        print(json.dumps(obj), flush=True)

    tmp = Path(tempfile.mkdtemp(prefix="tk_probe_"))
    modules: dict[str, tuple] = {}
    try:
        modules[BEST] = load_module(BEST, (a.src / TK_NORM).read_text(), tmp)
    except Exception:  # noqa: BLE001 -- nothing to compare against
        report["errors"][BEST] = traceback.format_exc()[-2000:]
        save()
        print(report["errors"][BEST], file=sys.stderr)
        return 2
    tried = [c for c in TRITON_KERNELS.candidates if c.name in wanted]
    if a.sweep:
        tried += sweep_variants(TRITON_KERNELS.candidates)
    for cand in tried:
        try:
            modules[cand.name] = load_module(cand.name, candidate_text(cand, a.src, tmp), tmp)
        except Exception as e:  # noqa: BLE001 -- reported; the others go on
            report["errors"][cand.name] = f"apply/import: {type(e).__name__}: {e}"
            emit({"candidate": cand.name, "error": report["errors"][cand.name]})

    ref_path = a.src / "triton_kernels" / "functional" / "normalization.py"
    spec = importlib.util.spec_from_file_location("tk_probe_reference", ref_path)
    ref_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref_mod)
    reference = ref_mod.rms_norm_torch

    def max_abs(a_, b_) -> float | str:
        d = float((a_.float() - b_.float()).abs().max())
        return d if math.isfinite(d) else str(d)  # a broken kernel may leave NaN/inf

    def check_outputs(outs: dict, ref: dict, best: dict, best_err: dict) -> dict:
        """The test's check (assert_close to the torch reference, atol, rtol 0) per output. "ok"; or,
        where BEST misses the tolerance too on this shape (the benchmark's shapes go past the test's:
        fp32 sums over up to 393216 rows) and the candidate's error is at most twice BEST's, "as BEST";
        else "FAIL: ..." with the message."""
        status, err, diff = [], {}, {}
        for o, v in outs.items():
            err[o], diff[o] = max_abs(v, ref[o]), max_abs(v, best[o])
            try:
                torch.testing.assert_close(v, ref[o], atol=ATOL[o], rtol=0)
            except AssertionError as e:
                if (isinstance(best_err[o], float) and best_err[o] > ATOL[o] and isinstance(err[o], float)
                        and err[o] <= 2 * best_err[o]):
                    status.append(f"{o}: as BEST")
                else:
                    status.append(f"FAIL {o}: " + " ".join(str(e).split())[:300])
        return {"check": "; ".join(status) or "ok", "err_vs_torch": err, "diff_vs_best": diff}

    def bench(fn) -> float:
        """Median ms of `fn` (do_bench: L2 flushed before each repetition)."""
        return round(float(do_bench(fn, warmup=max(1, a.rep // 4), rep=a.rep, quantiles=[0.5, 0.2, 0.8])[0]), 5)

    def run_module(name: str, x, w, dy) -> dict[str, dict]:
        """Forward and backward of one module on one shape: per direction its launches, kernel_ms and
        call_ms; "_outs": y, dx, dW of one forward and backward. Raises on failure (the caller reports it)."""
        mod, recs = modules[name]
        res: dict[str, dict] = {}
        x.grad = w.grad = None
        log: list = []
        for r in recs:
            r.log = log
        try:
            y = mod.rms_norm(x, w)
            torch.cuda.synchronize()
            fwd_launches = list(log)
            log.clear()
            y.backward(dy, retain_graph=True)
            torch.cuda.synchronize()
            bwd_launches = list(log)
        finally:
            for r in recs:
                r.log = None
        outs = {"y": y.detach().clone(), "dx": x.grad.clone(), "dw": w.grad.clone()}
        x.grad = w.grad = None
        for direction, launches in (("fwd", fwd_launches), ("bwd", bwd_launches)):
            item: dict = {"launches": [{"kernel": k, "grid": g, "num_warps": nw} for k, g, nw, *_ in launches]}
            replay = [(launcher, args, kwargs) for _k, _g, _nw, launcher, args, kwargs in launches]

            def kernels(replay=replay) -> None:
                for launcher, args, kwargs in replay:
                    launcher(*args, **kwargs)

            item["kernel_ms"] = bench(kernels) if replay else None
            if direction == "fwd":
                item["call_ms"] = bench(lambda: mod.rms_norm(x, w))
            else:
                item["call_ms"] = bench(lambda: y.backward(dy, retain_graph=True))
                x.grad = w.grad = None
            res[direction] = item
        res["_outs"] = outs
        return res

    for seq_len in seq_lens:
        if time.monotonic() - t0 > a.budget_s:
            report["skipped_seq_lens"].append(seq_len)
            continue
        torch.manual_seed(0)
        x = torch.randn([BATCH, HEADS, seq_len, HEAD_DIM], device="cuda")
        w = torch.randn([HEAD_DIM], device="cuda")
        dy = torch.randn_like(x)
        x.requires_grad_(True)
        w.requires_grad_(True)
        base = {}
        x.grad = w.grad = None
        y_ref = reference(x, w)  # the project's torch reference, as in tests/test_rms_norm.py
        y_ref.backward(dy)
        ref = {"y": y_ref.detach(), "dx": x.grad.clone(), "dw": w.grad.clone()}
        del y_ref
        x.grad = w.grad = None
        try:
            first = run_module(BEST, x, w, dy)
        except Exception:  # noqa: BLE001
            report["errors"][f"{BEST}@{seq_len}"] = traceback.format_exc()[-2000:]
            save()
            print(report["errors"][f"{BEST}@{seq_len}"], file=sys.stderr)
            return 2
        best_outs = first.pop("_outs")
        best_err = {o: max_abs(best_outs[o], ref[o]) for o in ref}
        results: dict[str, dict] = {}
        for name in modules:
            if name == BEST:
                continue
            try:
                results[name] = run_module(name, x, w, dy)
                outs = results[name].pop("_outs")
                for direction, names in (("fwd", ("y",)), ("bwd", ("dx", "dw"))):
                    results[name][direction].update(
                        check_outputs({o: outs[o] for o in names}, ref, {o: best_outs[o] for o in names}, best_err))
                del outs
            except Exception as e:  # noqa: BLE001 -- reported; the others go on
                msg = " ".join(f"{type(e).__name__}: {e}".split())[:600]
                results.pop(name, None)
                report["errors"][f"{name}@{seq_len}"] = msg
                emit({"candidate": name, "seq_len": seq_len, "error": msg})
        try:  # BEST again: its spread is the probe's noise
            second = run_module(BEST, x, w, dy)
            second.pop("_outs")
        except Exception:  # noqa: BLE001 -- a candidate may have left the CUDA context broken
            report["errors"][f"{BEST}@{seq_len}"] = traceback.format_exc()[-2000:]
            save()
            print(report["errors"][f"{BEST}@{seq_len}"], file=sys.stderr)
            return 3
        for direction in ("fwd", "bwd"):
            b1, b2 = first[direction], second[direction]
            kms = [v for v in (b1["kernel_ms"], b2["kernel_ms"]) if v]
            base[direction] = {
                "kernel_ms": sum(kms) / len(kms) if kms else None,
                "call_ms": (b1["call_ms"] + b2["call_ms"]) / 2,
                "spread_pct": (round(abs(b1["kernel_ms"] - b2["kernel_ms"]) / min(b1["kernel_ms"], b2["kernel_ms"])
                                     * 100, 2) if len(kms) == 2 else None),
            }
            row = {"candidate": BEST, "direction": direction, "seq_len": seq_len, "M": BATCH * HEADS * seq_len,
                   "kernel_ms": base[direction]["kernel_ms"], "call_ms": base[direction]["call_ms"],
                   "err_vs_torch": {o: best_err[o] for o in (("y",) if direction == "fwd" else ("dx", "dw"))},
                   "kernel_spread_pct": base[direction]["spread_pct"], "launches": b1["launches"]}
            emit(row)
            for name, res in results.items():
                item = res[direction]
                bk, bc = base[direction]["kernel_ms"], base[direction]["call_ms"]
                row = {"candidate": name, "direction": direction, "seq_len": seq_len, "M": BATCH * HEADS * seq_len,
                       "kernel_ms": item["kernel_ms"], "best_kernel_ms": bk,
                       "kernel_ratio": (round(item["kernel_ms"] / bk, 4) if item["kernel_ms"] and bk else None),
                       "call_ms": item["call_ms"], "best_call_ms": bc,
                       "call_ratio": round(item["call_ms"] / bc, 4) if bc else None,
                       "check": item.get("check"), "err_vs_torch": item.get("err_vs_torch"),
                       "best_err_vs_torch": {o: best_err[o] for o in item.get("err_vs_torch", {})},
                       "diff_vs_best": item.get("diff_vs_best"),
                       "launches": item["launches"]}
                report["items"].append(row)
                emit(row)
        report.setdefault("best", []).append({"seq_len": seq_len, **{d: base[d] for d in base}})
        del x, w, dy, ref, best_outs, results, first, second
        torch.cuda.empty_cache()
        save()
    save()
    for cand, row in report["summary"].items():
        bad = sorted({i["seq_len"] for i in report["items"]
                      if i["candidate"] == cand and "FAIL" in (i.get("check") or "")})
        emit({"summary": cand, **row, "check_failed_seq_lens": bad})
    spreads = [b[d]["spread_pct"] for b in report.get("best", []) for d in ("fwd", "bwd") if b[d]["spread_pct"] is not None]
    emit({"summary": BEST, "kernel_spread_pct_median": sorted(spreads)[len(spreads) // 2] if spreads else None,
          "seconds": report["seconds"]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
