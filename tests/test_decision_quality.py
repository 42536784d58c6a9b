"""The decision-quality benchmark, small-N CPU version (issue 4): planted effects through the real
save_and_test; an identical or slower candidate is never kept, a clearly faster one is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

RUN = Path(__file__).resolve().parents[1] / "benchmarks" / "decision_quality" / "run.py"


def test_cpu_planted_effects_meet_their_targets(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(RUN), "--device", "cpu", "--trials", "3", "--out", str(out),
                        "--lease-dir", str(tmp_path / "leases")], capture_output=True, text=True, timeout=600,
                       check=False)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = json.loads((out / "decision_quality.json").read_text())
    assert all(v["verdict"] != "improved" for v in rows["identical"] + rows["+20%"])
    assert sum(v["verdict"] == "improved" for v in rows["-30%"]) >= 2
    assert all(v["candidate_runs"] <= 3 for vs in rows.values() for v in vs)
    assert "| identical | 0/3" in (out / "decision_quality.md").read_text()
