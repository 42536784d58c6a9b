"""Issue 36 as an agent meets it: one MCP client session on a CPU kernel, each friction item checked on
what the client received.

The CPU softmax example (`kopt-mcp demo`'s, numpy) is copied into a fresh git repository with a pytest
[correctness] command beside it; `kopt-mcp serve` (this checkout's, `python -m kopt_mcp.app.cli serve`
with the checkout on PYTHONPATH) is driven over stdio with the official `mcp` client the way an agent
following program.md would: status before the config exists (item 10), check-config with a stale results
file of another machine planted (item 5), the baseline (items 2, 11), find_idle_device (item 3), a trace
(item 1), the vectorized kernel (a real speed-up: items 2, 4, 7, 11), research_directions after the keep
(item 8), a comment-only fix kept as neutral (item 9), too many rounds asked (item 11) and end_session
(item 6). Prints one block per item: the field, code or number that shows it. Timings are this machine's;
nothing here asserts them.

Usage (from the checkout root): python benchmarks/agent_pass/run.py [--json OUT.json]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from benchmarks.common import GIT_ID, write_json  # noqa: E402
from kopt_mcp.commands.demo import prepare_repo  # noqa: E402

EXAMPLE = ROOT / "examples" / "cpu_softmax"
TESTS = """import numpy as np, kernel, reference
def test_matches_reference():
    x = np.random.default_rng(0).standard_normal((64, 33)) * 50
    assert np.allclose(kernel.softmax(x), reference.softmax(x), rtol=1e-7, atol=1e-9)
def test_rows_sum_to_one():
    assert np.allclose(kernel.softmax(np.ones((3, 5))).sum(axis=1), 1.0)
"""
STALE_CSV = "rows,cols,us_per_call,err_count\n4096,4096,0.051,0\n"  # another machine's row, a class never run here
FIX = "comment: why the row max is subtracted (overflow guard)"
GPU_ONLY = {
    "total_gpu_us",
    "target_gpu_us",
    "gpu_best_us",
    "gpu_candidate_us",
    "gpu_delta_pct",
    "gpu_floor_pct",
    "best_gpu_us",
    "gpu_base_us",
    "gpu_head_us",
    "gpu_gain_pct",
}


def env() -> dict[str, str]:
    """The server's environment: this checkout first on PYTHONPATH, this interpreter's bin first on PATH
    (the example's `python bench.py` must find numpy)."""
    return {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }


def server(repo: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "kopt_mcp.app.cli", "serve", "--repo", str(repo), "--tag", "pass"],
        env=env(),
    )


def cli(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "kopt_mcp.app.cli", *args], capture_output=True, text=True, env=env())
    return r.stdout + r.stderr


def make_repo(base: Path) -> Path:
    """The example with a pytest [correctness] command, committed; test_kernel.py protected too."""
    repo = prepare_repo(EXAMPLE, base / "cpu_softmax")
    (repo / "test_kernel.py").write_text(TESTS)
    cfg = repo / "kopt.toml"
    text = cfg.read_text().replace(
        'paths = ["bench.py", "reference.py"]', 'paths = ["bench.py", "reference.py", "test_kernel.py"]'
    )
    cfg.write_text(
        text + f'\n[correctness]\ncommand = "{sys.executable} -m pytest -q -p no:cacheprovider test_kernel.py"\n'
    )
    subprocess.run(["git", *GIT_ID, "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", *GIT_ID, "commit", "-qm", "correctness tests"], cwd=repo, check=True)
    return repo


def data(result) -> dict:
    if result.is_error:
        raise RuntimeError(" ".join(getattr(c, "text", "") for c in result.content))
    return result.structured_content


async def unconfigured(base: Path) -> dict:
    """Item 10: a git repository without kopt.toml."""
    repo = prepare_repo(EXAMPLE, base / "no_config")
    subprocess.run(["git", *GIT_ID, "rm", "-q", "kopt.toml"], cwd=repo, check=True)
    subprocess.run(["git", *GIT_ID, "commit", "-qm", "no config yet"], cwd=repo, check=True)
    async with Client(server(repo)) as c:
        st = await c.call_tool("status", {})
        run = await c.call_tool("run_benchmark", {})
    return {
        "status_error": st.is_error,
        "status": st.structured_content,
        "run_error": run.is_error,
        "run_text": run.content[0].text if run.content else "",
    }


def check_config(repo: Path) -> dict:
    """Item 5: a stale results file (another machine's row, older than kopt.toml) planted, uncommitted."""
    stale = repo / "results" / "old-h100.csv"
    stale.parent.mkdir(exist_ok=True)
    stale.write_text(STALE_CSV)
    old = (repo / "kopt.toml").stat().st_mtime - 3600
    os.utime(stale, (old, old))
    out = {"plain": cli("check-config", "--repo", str(repo)), "run": cli("check-config", "--repo", str(repo), "--run")}
    stale.unlink()
    return out


async def call(c: Client, tool: str, **args) -> dict:
    return data(await c.call_tool(tool, args, read_timeout_seconds=3600))


def patch(ws: Path, name: str) -> None:
    subprocess.run(["git", "apply", str(EXAMPLE / "candidates" / name)], cwd=ws, check=True)


async def session(repo: Path) -> dict:
    """The agent's session over stdio (module docstring)."""
    out: dict = {}
    async with Client(server(repo)) as c:
        out["tools"] = {t.name: t.description for t in (await c.list_tools()).tools}
        out["status0"] = await call(c, "status")
        ws = Path(out["status0"]["workspace"])
        out["baseline"] = await call(c, "run_benchmark")
        out["idle"] = await call(c, "find_idle_device")
        out["trace"] = await call(c, "kernel_trace_analysis", top=8)
        patch(ws, "01-vectorize.patch")
        out["verdict"] = await call(c, "save_and_test", target="global", hypothesis="whole-array numpy")
        if out["verdict"]["verdict"] == "improved":
            out["commit"] = await call(c, "commit_improvement", message="vectorize")
        out["program"] = (await c.read_resource("kopt://program.md")).contents[0].text
        out["directions"] = (await c.get_prompt("research_directions", {})).messages[0].content.text
        patch(ws, "03-subnoise.patch")
        out["too_many"] = await c.call_tool("save_and_test", {"hypothesis": "comment", "rounds": 50})
        out["tie"] = await call(c, "save_and_test", target="global", hypothesis="comment only")
        if out["tie"]["verdict"] == "tie":
            out["neutral"] = await call(c, "commit_improvement", neutral_reason=FIX)
        out["end"] = await call(c, "end_session", why="the pass is done")
        out["status1"] = await call(c, "status")
    return out


def sentence(text: str, start: str) -> str:
    """The clause of `text` starting at `start` up to the next ';' (or '' where absent)."""
    i = text.find(start)
    return "" if i < 0 else text[i:].split(";")[0]


def _items_1_to_4(s: dict) -> list[str]:
    t, v, b = s["trace"], s["verdict"], s["baseline"]
    p = t.get("cpu") or {}
    own = next((f for f in p.get("functions", []) if f.get("own")), None)
    parts = ("own", "library", "harness", "import", "no_python")
    harness = [(h["function"], h["file"], h["self_samples"]) for h in p.get("harness_functions", [])[:2]]
    L = ["## item 1: CPU profile names own code, harness/reference/imports apart",
         f"- backend {t['backend']}, available {t['available']}, runs {p.get('runs')}, samples {p.get('samples')}",
         "- samples by part: " + ", ".join(f"{k} {p.get(k + '_samples')}" for k in parts),
         f"- hottest own function: {own and (own['function'], own['file'], own['self_samples'])}",
         f"- harness functions (first 2): {harness}",
         f"- bottleneck: {t['bottleneck'] and t['bottleneck']['kind']}; notes: {t['notes']}"]
    iv, d, g = v.get("target_interval") or {}, b.get("detectable") or {}, s["end"].get("gain") or {}
    shown = ("mean_pct", "ratio_x", "lo_pct", "sd_delta_pct", "looks", "overall_confidence")
    fmts = {"lo_pct": "{:+.2f}%", "ratio_x": "({:.2f}x)", "sd_delta_pct": "sd_delta_pct {:.1f}%"}
    spreads = [round(c["spread_pct"], 2) for c in b["classes"] if c.get("spread_pct") is not None]
    L += ["## item 2: one vocabulary (reason numbers are fields; ratio beside percent; base/head; spreads named)",
          f"- verdict {v['verdict']} ({v['code']}); target_interval " + ", ".join(f"{k} {iv.get(k)}" for k in shown),
          "- the reason shows them: " + ", ".join(
              f"{k} {iv.get(k) is not None and fmt.format(iv[k]) in v['reason']}" for k, fmt in fmts.items()),
          f"- reason on spreads: \"{sentence(v['reason'], 'spreads:')}\"",
          f"- baseline classes[].spread_pct {spreads}, detectable.target_spread_pct {d.get('target_spread_pct')} "
          f"(deprecated spread_pct {d.get('spread_pct')})",
          f"- session gain classes: {[(c['key'], c['base'], c['head'], c['ratio_x']) for c in g.get('classes', [])]}",
          f"- gain headline: {g.get('headline')}"]
    names = ("trace", "verdict", "status0", "baseline")
    leaked = {n: sorted(GPU_ONLY & set(s[n])) for n in names if GPU_ONLY & set(s[n])}
    idle = s["idle"]
    gpu_words = any(w in s["directions"] for w in ("DRAM", "occupancy", "GPU time"))
    L += ["## item 3: device-neutral names on the CPU",
          f"- GPU-only fields in trace/verdict/status/baseline: {leaked or 'none'}; "
          f"in gain: {sorted(GPU_ONLY & set(g)) or 'none'}",
          f"- find_idle_device: leased {idle['leased']}, device {idle['device'] and idle['device']['vendor']}; "
          f"find_idle_gpu description: {s['tools']['find_idle_gpu'][:60]!r}",
          f"- program.md says 'GPU wait': {'GPU wait' in s['program']}; "
          f"research_directions says DRAM/occupancy/GPU time: {gpu_words}",
          "## item 4: load judged against the cores the benchmark uses",
          f"- rounds {v['rounds']}, rounds_under_load {v['rounds_under_load']}",
          f"- reason: \"{sentence(v['reason'], 'other processes used') or sentence(v['reason'], 'foreign load')}\""]
    return L


def _items_5_to_8(cc: dict, s: dict) -> list[str]:
    L = ["## item 5: check-config previews only fresh rows"]
    for k in ("plain", "run"):
        keep = [ln for ln in cc[k].splitlines() if re.search(r"row|class|preview|stale|old-h100|never wrote|4096", ln)]
        L.append(f"- check-config{' --run' if k == 'run' else ''}: " + " | ".join(x.strip() for x in keep[:8]))
    e, g = s["end"], s["end"].get("gain") or {}
    L += ["## item 6: end_session",
          f"- stopped {e['stopped']}, stop_reason {e['stop_reason']!r}, kept {e['kept']}, kept_neutral "
          f"{e.get('kept_neutral')}, summary_commit {bool(e['summary_commit'])}, gain ratio_x {g.get('ratio_x')}; "
          f"status after: {s['status1']['phase']}",
          "## item 7: correctness outcome counts on every verdict"]
    for name in ("verdict", "tie"):
        c = s[name].get("correctness") or {}
        L.append(f"- {name} ({s[name]['verdict']}): passed {c.get('passed')}, failed {c.get('failed')}, "
                 f"skipped {c.get('skipped')}, from {c.get('counts_from')!r}")
    line = next((x for x in s["program"].splitlines() if x.startswith("- latest trace:")), "(no line)")
    said = next((x for x in s["directions"].splitlines() if x.startswith("Trace ")), "(no line)")
    return L + ["## item 8: stale traces marked", f"- program.md: {line}", f"- research_directions: {said}"]


def _items_9_to_11(u: dict, s: dict) -> list[str]:
    n, tie, st = s.get("neutral") or {}, s["tie"], u["status"]
    d = s["baseline"].get("detectable") or {}
    L = ["## item 9: neutral keep",
         f"- tie: {tie['verdict']} ({tie['code']}), classes "
         f"{[(c['key'], round(c['mean_pct'], 2)) for c in tie['classes']]}",
         f"- commit_improvement(neutral_reason): committed {n.get('committed')}, neutral {n.get('neutral')}, "
         f"code {n.get('code')}",
         "## item 10: status on a session that cannot open",
         f"- status is_error {u['status_error']}, phase {st['phase']!r}, problem {st['problem']!r}",
         f"- fix {st['fix']!r}; run_benchmark is_error {u['run_error']}: {u['run_text'][:120]!r}",
         "## item 11: smallest detectable effect, rounds asked, per-class ratio_x",
         f"- detectable: min_effect_pct {d.get('min_effect_pct')}, min_effect_x {d.get('min_effect_x')}, "
         f"rounds {d.get('rounds')}, rounds_for {[(r['effect_pct'], r['rounds']) for r in d.get('rounds_for', [])]}",
         f"- per class: {[(c['key'], c['spread_pct'], c['min_effect_pct']) for c in d.get('classes', [])]}",
         f"- rounds=50: is_error {s['too_many'].is_error}: {s['too_many'].content[0].text[:140]!r}",
         "- verdict classes ratio_x: "
         f"{[(c['key'], c['ratio_x'] and round(c['ratio_x'], 2)) for c in s['verdict']['classes']]}"]
    return L


def report(u: dict, cc: dict, s: dict) -> list[str]:
    """One block per item: what the client saw."""
    return _items_1_to_4(s) + _items_5_to_8(cc, s) + _items_9_to_11(u, s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, help="also write everything the client received here")
    a = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="kopt-agent-pass-"))
    t0 = time.monotonic()
    u = anyio.run(unconfigured, base)
    repo = make_repo(base)
    cc = check_config(repo)
    s = anyio.run(session, repo)
    print(f"# agent pass: {sys.executable} on {os.cpu_count()} cores, {time.monotonic() - t0:.0f} s, repo {repo}")
    print("\n".join(report(u, cc, s)))
    if a.json:
        s["too_many"] = s["too_many"].content[0].text
        write_json(a.json, {"unconfigured": u, "check_config": cc, "session": s})
    return 0


if __name__ == "__main__":
    sys.exit(main())
