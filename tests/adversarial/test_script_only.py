"""In-process cheats on a device without a profiler (issue 26, items 4 and 5): results memoized
across calls, a forged fresh results file, a patched timer. On the CPU only the script metric
decides, and nothing outside the benchmark process can tell these from a real gain, so each stays
`improved`, but carries the code `script_only` (in the tool result and the ledger), and
commit_improvement refuses it unless `[gates] allow_script_only_keeps` is true. A keep it does make
is labelled script-only in the ledger, performance.md, the Stop Summary and the HTML report.

Verdicts BEFORE (same cheats, commit 3fbc68e): all three `improved` with no code, and committed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kopt_mcp.gpus.smi import NvidiaSmiProbe
from kopt_mcp.profilers.none import NoProfiler
from kopt_mcp.referee.recovery import stop
from kopt_mcp.rules.decision import Code
from kopt_mcp.testing.toy import fake_services, make_toy_repo, set_kernel
from kopt_mcp.views.report_html import write_session_report
from tests.gpus.conftest import IDLE, SmiReplay

#: times 200 calls of kernel.work(i) with time.perf_counter; err_count counts wrong results
TIMED_BENCH = '''\
"""Times 200 calls of kernel.work(i) and writes results/bench.csv (us per call)."""
import csv, os, sys, time
sys.path.insert(0, os.getcwd())
import kernel
EXPECT = [sum(range(i * 1000, i * 1000 + 20000)) for i in range(4)]
t0 = time.perf_counter()
out = [kernel.work(i % 4) for i in range(200)]
us = (time.perf_counter() - t0) / 200 * 1e6
err = sum(o != EXPECT[i % 4] for i, o in enumerate(out))
os.makedirs("results", exist_ok=True)
with open("results/bench.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["n", "us_per_call", "err_count"])
    w.writerow([1, us, err])
'''

HONEST = "def work(i):\n    return sum(range(i * 1000, i * 1000 + 20000))\n"

CHEATS = {
    # each planted effect is >= 4x: no load on a 2-core machine flips it
    "memoized across calls": "import functools\n\n\n@functools.cache\n" + HONEST,
    "forged fresh results file": HONEST + (
        "import os\nos.makedirs('results', exist_ok=True)\n"
        "open('results/bench.csv', 'w').write('n,us_per_call,err_count\\n1,0.5,0\\n')\n"
        "os._exit(0)  # the benchmark never runs\n"),
    "patched timer": "import time\n_real = time.perf_counter\ntime.perf_counter = lambda: _real() * 0.2\n\n\n" + HONEST,
}


def timed_repo(path: Path, extra_gates: str = "") -> Path:
    # a round of this wall-clock loop read +65% to +87% for the 5x patched timer on a loaded 2-core machine
    # (fresh clone, 2026-12-03): 3 rounds that far apart are not significant at the keep's confidence; the
    # round budget goes to 6 (a clear win still stops after its first rounds)
    extra_gates = "\n".join(x for x in ("max_rounds = 6", extra_gates) if x)
    repo = make_toy_repo(path, {"1": 1.0}, extra_gates=extra_gates)
    (repo / "bench.py").write_text(TIMED_BENCH)
    (repo / "kernel.py").write_text(HONEST)
    cfg = repo / "kopt.toml"
    cfg.write_text(cfg.read_text().replace("noise_pct = 1.0", "noise_pct = 10.0"))  # wall-clock timing
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qam", "timed bench"],
                   cwd=repo, check=True)
    return repo


def attempt_record(ref) -> dict:
    return [r for r in ref.books.store.ledger() if r.get("event") == "attempt"][-1]


@pytest.mark.parametrize("cheat", list(CHEATS))
def test_a_script_only_win_says_so_and_is_not_committed_where_the_config_forbids(cheat, tmp_path, make_referee):
    r = make_referee(timed_repo(tmp_path / "repo", "allow_script_only_keeps = false"))
    r.run_benchmark()
    (r.where.workspace_path / "kernel.py").write_text(CHEATS[cheat])
    v = r.save_and_test("global", cheat)
    assert v.verdict == "improved" and v.code == Code.SCRIPT_ONLY, (v.verdict, v.code, v.reason)
    assert attempt_record(r)["code"] == "script_only"
    best = r.books.state.best.commit
    c = r.commit_improvement(cheat)
    assert not c.committed and c.code == Code.SCRIPT_ONLY
    assert r.books.state.best.commit == best and r.books.state.kept == 0
    refused = [x for x in r.books.store.ledger() if x.get("event") == "commit_refused"][-1]
    assert refused["code"] == "script_only" and Path(refused["patch"]).is_file()


def test_on_the_cpu_a_script_only_keep_is_committed_by_default_and_labelled(tmp_path, make_referee):
    r = make_referee(timed_repo(tmp_path / "repo"))
    r.run_benchmark()
    (r.where.workspace_path / "kernel.py").write_text(CHEATS["memoized across calls"])
    v = r.save_and_test("global", "memo")
    assert v.verdict == "improved" and v.code == Code.SCRIPT_ONLY
    c = r.commit_improvement("memo")
    assert c.committed and c.code == Code.SCRIPT_ONLY
    rec = [x for x in r.books.store.ledger() if x.get("event") == "commit"][-1]
    assert rec["code"] == "script_only"
    perf = (r.where.workspace_path / "performance.md").read_text()
    assert "| keep |" in perf and "kept on script metric" in perf
    assert "kopt-mcp keep: script only" in r.where.ws.head.commit.message
    assert r.books.state.kept == 1 and r.books.state.kept_script_only == 1
    stop(r, "the test ends the session")
    perf = (r.where.workspace_path / "performance.md").read_text()
    assert "- kept improvements: 1 (script only: 1)" in perf
    html = write_session_report(r).read_text()
    assert 'id="script-only-keeps"' in html


def test_on_a_gpu_without_its_expected_profiler_the_keep_is_refused_by_default(toy_repo, make_referee):
    """A recorded idle nvidia-smi is the device; [profiler] backend = "auto" expects a profiler, none runs."""
    cfg = toy_repo / "kopt.toml"
    cfg.write_text(cfg.read_text().replace('backend = "none"', 'backend = "auto"'))
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qam", "auto"], cwd=toy_repo,
                   check=True)
    r = make_referee(toy_repo, services=fake_services(probe=NvidiaSmiProbe(SmiReplay(IDLE)),
                                                      profiler=lambda backend, vendor, detail: NoProfiler()))
    r.run_benchmark()
    set_kernel(r.where.workspace_path, {"1": 50.0, "2": 100.0})
    v = r.save_and_test("global", "half the time")
    assert v.verdict == "improved" and v.code == Code.SCRIPT_ONLY and v.device.vendor == "nvidia"
    c = r.commit_improvement("half")
    assert not c.committed and c.code == Code.SCRIPT_ONLY and r.books.state.kept == 0
