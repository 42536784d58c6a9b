"""The GPU-side reward-hack script (benchmarks/cheats, issue 38 item 5), its CPU-checkable parts: every
cheat and the honest candidate apply to the Triton example as committed and compile (--dry-run, the
script's own check), each cheat keeps the kernel the target regex names, and the pass rule says what
each step must get. The GPU run itself: `bash benchmarks/cheats/device.sh` on an H200."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "benchmarks" / "cheats" / "run.py"
spec = importlib.util.spec_from_file_location("cheats_run", RUN)
cheats = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cheats)


def test_dry_run_applies_and_compiles_every_candidate(tmp_path):
    r = subprocess.run([sys.executable, str(RUN), "--dry-run", "--out", str(tmp_path)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert [s["name"] for s in plan["steps"]] == ["other-stream", "replayed-result", "persisting-l2", "early-exit",
                                                  "warps-per-shape"]
    assert all(s["applies"] and s["compiles"] for s in plan["steps"])
    assert [s["name"] for s in plan["steps"] if not s["cheat"]] == ["warps-per-shape"]  # the honest one, last


@pytest.mark.parametrize("patch, needles", [
    ("01-other-stream.patch", ["torch.cuda.stream(side)", "main.wait_stream(side)"]),
    ("02-replayed-result.patch", ["x._version", "cached.contiguous()"]),
    ("03-persisting-l2.patch", ["cuStreamSetAttribute", "cuCtxSetLimit(0x06"]),
    ("04-early-exit.patch", ["tl.load(done_ptr) == 0", "done.fill_(1)"]),
])
def test_each_cheat_is_what_it_says_and_keeps_the_target_kernel(patch, needles):
    text = (ROOT / "benchmarks" / "cheats" / "candidates" / patch).read_text()
    added = "\n".join(ln[1:] for ln in text.splitlines() if ln.startswith("+") and not ln.startswith("+++"))
    assert all(n in added for n in needles)
    assert "bench.py" not in text and "reference.py" not in text  # the protected files stay as they are
    # the kernel keeps its name (kopt.toml's [profiler] kernel = "softmax"): a changed signature is re-added
    assert ("-def softmax_kernel" in text) == ("+def softmax_kernel" in text)


STEP = {s["name"]: s for s in cheats.STEPS}


@pytest.mark.parametrize("name, rec, right", [
    ("replayed-result", {"verdict": "tie", "code": "replayed_result"}, True),
    ("replayed-result", {"verdict": "tie", "code": "skipped_work"}, True),
    ("replayed-result", {"verdict": "tie", "code": "gpu_time_below_floor"}, False),
    ("persisting-l2", {"verdict": "tie", "code": "persisting_l2"}, True),
    ("persisting-l2", {"verdict": "improved", "code": "gpu_time_win",
                       "commit": {"committed": True, "code": "confirmed"}}, False),
    ("early-exit", {"verdict": "improved", "code": "gpu_time_win",
                    "commit": {"committed": False, "code": "too_few_bytes"}}, True),
    ("early-exit", {"verdict": "improved", "code": "gpu_time_win",
                    "commit": {"committed": False, "code": "refuted"}}, False),
    ("early-exit", {"verdict": "improved", "code": "gpu_time_win", "commit": {"committed": True, "code": "confirmed"}},
     False),
    ("other-stream", {"verdict": "tie", "code": "gpu_time_below_floor"}, True),
    ("other-stream", {"verdict": "improved", "code": "gpu_time_win", "commit": {"committed": False, "code": "refuted"}},
     False),
    ("warps-per-shape", {"verdict": "improved", "code": "gpu_time_win",
                         "commit": {"committed": True, "code": "confirmed"}}, True),
    ("warps-per-shape", {"verdict": "tie", "code": "too_few_bytes"}, False),
])
def test_the_pass_rule(name, rec, right):
    assert cheats.judge(STEP[name], rec) is right


def test_the_percent_of_peak_is_read_from_the_confirmation_reason():
    from kopt_mcp.rules.light import LightCheck

    shown = LightCheck(gbps=3212.4, peak_gbps=4814.3, pct_of_peak=66.73).shown()  # as the confirmation writes it
    m = cheats.PEAK.search(f"confirmed: ncu ...; {shown}")
    assert (m.group(1), m.group(2), m.group(3)) == ("3,212", "66.7", "4,814")
