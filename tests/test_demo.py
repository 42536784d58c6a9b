"""The main job as a test: `kopt-mcp demo` on the CPU example, over stdio, every verdict as expected."""

from __future__ import annotations

import subprocess
import sys


def test_cpu_demo_passes(tmp_path, lease_dir):
    r = subprocess.run([sys.executable, "-m", "kopt_mcp.cli", "demo", "--example", "cpu", "--keep", str(tmp_path)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert "demo passed" in r.stdout
    perf = (tmp_path / "cpu_softmax" / ".kopt" / "worktrees" / "demo" / "performance.md").read_text()
    assert perf.count("| keep |") == 6 and perf.count("| baseline |") == 3
