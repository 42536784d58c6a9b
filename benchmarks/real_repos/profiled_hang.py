#!/usr/bin/env python3
"""profiled_hang: does a project's benchmark hang under kopt-mcp's CUPTI trace, and where?

    python .devstage/benchmarks/real_repos/profiled_hang.py --project triton-kernels --src .devstage/src/tk \\
        --out $OUT [--variants plain,helpers-traced,default] [--repeat 1] [--timeout-s 120] [--deadline-s 300]

Runs the command of the project's hand-finished kopt.toml (projects.py) in a copy of SRC, once per
variant (and --repeat times), each in its own process group under a time limit:

- `plain`: the command alone (one plain run's wall time, the yardstick);
- `default`: profiled as a session profiles it (CuptiProfiler.wrap, collector mode);
- `helpers-traced`: the same with KOPT_CUPTI_TRACE_HELPERS=1, i.e. torch inductor's compile-worker
  sidecar traced too, as before 2026-11-28 (sitecustomize.HELPER_ENTRY);
- `no-units`: `default` with KOPT_CUPTI_UNITS=0 (no harness units: no API or external correlation records).

A run still going at its limit is `hung`: before it is killed (the whole group) the process tree and a
`py-spy dump` of every Python process in it are kept. Each run's torch inductor cache is fresh
(TORCHINDUCTOR_CACHE_DIR), so each compiles as a session's first run does. Writes OUT/profiled_hang.json
(per run: variant, rc, hung, wall_s, kernels traced, trace error, dumps) and OUT/profiled_hang.md after
every run. Needs a GPU for the profiled variants (cupti-python); exit 0 unless SRC or the project is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from projects import PROJECTS  # noqa: E402

VARIANTS = {"plain": None, "default": {}, "helpers-traced": {"KOPT_CUPTI_TRACE_HELPERS": "1"},
            "no-units": {"KOPT_CUPTI_UNITS": "0"}}


def _tree_pids(root: int) -> list[int]:
    """root and its descendants (psutil), parents first."""
    import psutil

    try:
        proc = psutil.Process(root)
        return [root] + [p.pid for p in proc.children(recursive=True)]
    except psutil.Error:
        return []


def _dumps(root: int) -> dict:
    """The process tree (pid, ppid, command) and a py-spy dump of each Python process in it."""
    import psutil

    tree, dumps = [], {}
    for pid in _tree_pids(root):
        try:
            p = psutil.Process(pid)
            cmd = " ".join(p.cmdline())[:300]
            tree.append({"pid": pid, "ppid": p.ppid(), "cmd": cmd, "threads": p.num_threads()})
        except psutil.Error:
            continue
        if "python" in cmd and len(dumps) < 8:
            got = subprocess.run(["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
            dumps[str(pid)] = (got.stdout + got.stderr)[-6000:]
    return {"tree": tree, "py_spy": dumps}


def run_once(variant: str, command: str, cwd: Path, out: Path, timeout_s: float) -> dict:
    """One run of `command` in `cwd` as `variant`; returns its record (see the module docstring)."""
    from kopt_mcp.errors import ProfilerError
    from kopt_mcp.profilers.cupti import CuptiProfiler, parse_cupti_dir

    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="inductor-"))
    extra = VARIANTS[variant]
    trace_dir = Path(tempfile.mkdtemp(prefix=f"trace-{variant}-", dir=out))
    line = command if extra is None else CuptiProfiler().wrap(command, trace_dir)
    env.update(extra or {})
    rec = {"variant": variant, "hung": False}
    start = time.monotonic()
    proc = subprocess.Popen(["bash", "-c", line], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        rec["hung"] = True
        rec.update(_dumps(proc.pid))
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
    rec["wall_s"] = round(time.monotonic() - start, 1)
    rec["rc"] = proc.returncode
    rec["log_tail"] = (log or "")[-1500:]
    if extra is not None and not rec["hung"]:
        try:
            trace = parse_cupti_dir(trace_dir, require_collector=True)
            rec["kernels"] = {k.name[:80]: k.calls for k in trace.kernels if "rms_norm" in k.name}
            rec["units"] = len(trace.units or [])
        except ProfilerError as exc:
            rec["trace_error"] = str(exc)[:500]
    shutil.rmtree(env["TORCHINDUCTOR_CACHE_DIR"], ignore_errors=True)
    return rec


def _md(runs: list[dict]) -> str:
    rows = ["| variant | rc | hung | wall s | target launches | units | trace error |", "|---|---|---|---|---|---|---|"]
    for r in runs:
        rows.append(f"| {r['variant']} | {r['rc']} | {r['hung']} | {r['wall_s']} | "
                    f"{sum((r.get('kernels') or {}).values())} | {r.get('units', '')} | {r.get('trace_error', '')[:80]} |")
    return "\n".join(rows) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--project", default="triton-kernels", choices=sorted(PROJECTS))
    ap.add_argument("--src", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--variants", default="plain,helpers-traced,default")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--deadline-s", type=float, default=300.0, help="start no run after this many seconds")
    args = ap.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not args.src.is_dir():
        print(f"unknown variant(s) {unknown} (known: {sorted(VARIANTS)}) or no folder {args.src}", file=sys.stderr)
        return 2
    command = PROJECTS[args.project].toml_command
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="hang-src-"))
    shutil.copytree(args.src, work, dirs_exist_ok=True)
    runs, t0 = [], time.monotonic()
    for _ in range(args.repeat):
        for variant in variants:
            if time.monotonic() - t0 > args.deadline_s:
                break
            rec = run_once(variant, command, work, args.out, args.timeout_s)
            runs.append(rec)
            print(json.dumps({k: rec[k] for k in ("variant", "rc", "hung", "wall_s")}), flush=True)
            (args.out / "profiled_hang.json").write_text(json.dumps({"command": command, "runs": runs}, indent=1))
            (args.out / "profiled_hang.md").write_text(_md(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
