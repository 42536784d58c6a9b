"""The sandbox on a GPU (issue 26, item 3): does the Triton example measure, profile and trace the same
with every run in bubblewrap as without it?

Needs an NVIDIA GPU with torch and triton, bwrap (scripts/gpu_suite.sh prepare/sandbox bring a
Debian bubblewrap along) and cupti-python / ncu where present. Usage:
    python benchmarks/sandbox_gpu/run.py OUT_DIR
For KOPT_SANDBOX unset (bwrap) and then "off", on a fresh copy of examples/triton_softmax: status's
`sandbox` line, run_benchmark (the baseline, its wall time), kernel_trace_analysis (backend, whether
the target kernels and ncu's metrics came back, notes), and save_and_test of an identical kernel
(a comment added: profiled A/B/A under the keep metric; expected `tie`). Writes
OUT_DIR/sandbox_gpu.json and OUT_DIR/sandbox_gpu.md. Exits 2 without a GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # this checkout's kopt_mcp, also when an older copy is installed
    sys.path.insert(0, str(ROOT))


def one_session(mode: str) -> dict:
    """The three calls on a fresh copy of the example with KOPT_SANDBOX=`mode` ("" = unset)."""
    from kopt_mcp.commands.demo import prepare_repo
    from kopt_mcp.paths import examples_dir
    from kopt_mcp.referee import Referee

    if mode:
        os.environ["KOPT_SANDBOX"] = mode
    else:
        os.environ.pop("KOPT_SANDBOX", None)
    scratch = Path(tempfile.mkdtemp(prefix="kopt-sandbox-gpu-"))
    ref = Referee(prepare_repo(examples_dir() / "triton_softmax", scratch / "triton_softmax"), tag="sandbox")
    try:
        t0 = time.monotonic()
        base = ref.run_benchmark()
        base_s = time.monotonic() - t0
        trace = ref.kernel_trace_analysis(top=3)
        kernel = ref.where.workspace_path / "kernel.py"
        kernel.write_text(kernel.read_text() + "\n# a comment: the same kernel\n")
        t0 = time.monotonic()
        v = ref.save_and_test("global", "identical kernel (a comment)")
        verdict_s = time.monotonic() - t0
        st = ref.status()
    finally:
        ref.close()
        shutil.rmtree(scratch, ignore_errors=True)
    return {"mode": mode or "auto", "sandbox": st.sandbox, "problems": st.problems,
            "baseline": {"ok": base.ok, "reason": base.reason, "seconds": round(base_s, 1),
                         "classes": {c.key: c.metric for c in base.classes}},
            "trace": {"backend": trace.backend, "available": trace.available, "target_kernels": trace.target_kernels,
                      "target_gpu_us": trace.target_gpu_us, "ncu_metrics": any(k.extra for k in trace.kernels),
                      "notes": trace.notes},
            "identical": {"verdict": v.verdict, "code": v.code, "metric_used": v.metric_used,
                          "gpu_delta_pct": v.gpu_delta_pct, "seconds": round(verdict_s, 1), "reason": v.reason}}


def render(rows: list[dict]) -> str:
    lines = ["# The sandbox on a GPU: examples/triton_softmax", "",
             "| KOPT_SANDBOX | status.sandbox | baseline | baseline s | trace backend | target found | ncu metrics "
             "| identical kernel | GPU time change | verdict s |", "|" + "---|" * 10]
    for r in rows:
        b, t, i = r["baseline"], r["trace"], r["identical"]
        lines.append(f"| {r['mode']} | {r['sandbox'][:40]} | {'ok' if b['ok'] else b['reason'][:60]} | {b['seconds']} | "
                     f"{t['backend']} | {bool(t['target_kernels'])} | {t['ncu_metrics']} | {i['verdict']} | "
                     f"{i['gpu_delta_pct']} | {i['seconds']} |")
    return "\n".join(lines) + "\n"


def main(out: Path) -> int:
    from kopt_mcp.commands.demo import gpu_example_possible

    if not gpu_example_possible():
        print("sandbox_gpu.py needs an NVIDIA GPU with torch and triton: run `scripts/gpu_suite.sh sandbox`",
              file=sys.stderr)
        return 2
    rows = [one_session(""), one_session("off")]
    out.mkdir(parents=True, exist_ok=True)
    (out / "sandbox_gpu.json").write_text(json.dumps(rows, indent=1, default=str) + "\n")
    (out / "sandbox_gpu.md").write_text(render(rows))
    print(render(rows))
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python benchmarks/sandbox_gpu/run.py OUT_DIR", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(Path(sys.argv[1])))
