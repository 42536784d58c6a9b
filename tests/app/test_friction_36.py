"""Issue 36's friction points 1 to 11, replayed by an MCP client on the CPU toy (with a pytest
[correctness] command), each checked on what the client itself received:

1. the CPU profile named the protected reference provider (benchmark/scripts/) the hottest own function, with
   imports mixed in and one line per function: kernel_trace_analysis, replaying a real py-spy recording of a planted
   numpy kernel whose reference is 4x hotter (tests/fixtures/pyspy/softmax_ref, source.txt says how it was made),
   gives the kernel's row_softmax as the hottest own function, the reference apart, imports apart, the 6 runs and
   418 samples behind it, and the kernel's lines ranked by their sample counts;
4. the CPU gate at 50% of 2 cores took a whole busy foreign core for "no foreign load", and blamed a shell that
   only reaped its children: with a neighbour at 49.6% of 2 cores (pid 4243 stress on one core), a benchmark that
   used 1.9 cores has every round under load (limit 12.5%: measured again up to 6 rounds, the neighbour named in
   each), a single-threaded one none (each round's 50% still reported); attribution itself: tests/gpus/test_cpu_attribution.py;
3. GPU words on a CPU target (the rest is tests/app/test_friction_replay.py test_5): research_directions on the
   CPU asks about the sampled functions and lines, never DRAM/SM throughput, occupancy or GPU time; status
   carries no best_gpu_us;
5. check-config previewed each class from stale rows of a committed results file of another GPU (0.051 ms) and
   listed classes the benchmark never runs: on the appended-harness example with such a row planted and committed,
   check-config previews none of the committed rows, `check-config --run` previews only the 3 classes its run wrote
   and names the 1 it never wrote, and init says 1 of the file's 13 rows was not written by its run;
6. no way to end a session on purpose: `end_session` measures the gain (the toy's exact 2x) and
   commits the Stop Summary; candidate tools then refuse with `ended by the agent`;
7. a verdict never said what the correctness command found: `correctness` gives 2 passed, 0 failed;
8. a trace from before the last keep read as the latest: program.md's `latest trace` line says
   which (the toy ends too soon to sample: none yet; tests/referee/test_trace_stale.py: STALE);
10. `status` failed on a session that could not open: it answers `unconfigured` with the fix;
2. the statistics contradicted themselves: the reason's numbers are `target_interval`'s fields (2 looks,
   0.9975 each, 0.995 overall, as the classes' 0.995 in 1 look), the 2x is written `+50.00% (2.00x)`, the
   session gain's classes say base/head (best/candidate stay one release as deprecated aliases);
9. a speed-neutral fix could not be kept: a `tie` is kept by name as neutral (neutral_kept), refused with a
   class 5% worse (neutral_refused_worse_class), and never counted as a gain;
11. no detectable effect, no more rounds, no ratio: the baseline says what 3 rounds detect and the rounds
   for 2 and 5%; `rounds` 4 measures a promising tie a 4th round, 50 is refused beyond [gates]
   max_rounds_asked; classes give ratio_x."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client

from kopt_mcp.app.cli import open_session
from kopt_mcp.app.server import build_server
from kopt_mcp.evidence.load import ForeignProcess, RunLoad
from kopt_mcp.profilers import PySpyProfiler, make_profiler
from kopt_mcp.profilers.pyspy import parse_speedscope
from kopt_mcp.referee import Referee
from kopt_mcp.referee.services import Services
from kopt_mcp.testing.toy import kernel_source, make_toy_repo, set_kernel
from tests.fixed_load import FixedLoad

TESTS = "import kernel\ndef test_no_errors():\n    assert not kernel.ERRORS\ndef test_positive():\n" \
        "    assert min(kernel.TIMES.values()) > 0\n"


async def _replay(ref) -> dict:
    out: dict = {}
    async with Client(build_server(ref)) as c:
        out["baseline"] = (await c.call_tool("run_benchmark", {})).structured_content
        ws = Path((await c.call_tool("status", {})).structured_content["workspace"])
        set_kernel(ws, {"1": 50.0, "2": 100.0})
        out["verdict"] = (await c.call_tool("save_and_test", {"hypothesis": "halve"})).structured_content
        out["commit"] = (await c.call_tool("commit_improvement", {})).structured_content
        out["program"] = (await c.read_resource("kopt://program.md")).contents[0].text
        out["directions"] = (await c.get_prompt("research_directions", {})).messages[0].content.text
        out["end"] = (await c.call_tool("end_session", {"why": "2x is enough"})).structured_content
        out["after"] = await c.call_tool("save_and_test", {"hypothesis": "more"})
        out["status"] = (await c.call_tool("status", {})).structured_content
        out["performance"] = (await c.read_resource("kopt://performance.md")).contents[0].text
    return out


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("friction36")
    repo = make_toy_repo(tmp / "repo", {"1": 100.0, "2": 200.0})
    (repo / "test_kernel.py").write_text(TESTS)
    with (repo / "kopt.toml").open("a") as f:
        f.write(f'\n[correctness]\ncommand = "{sys.executable} -m pytest -q -p no:cacheprovider test_kernel.py"\n')
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qm", "tests"], cwd=repo, check=True)
    ref = Referee(repo, tag="t", lease_dir=tmp / "leases")
    try:
        yield anyio.run(_replay, ref)
    finally:
        ref.close()


def test_6_end_session_measures_the_gain_and_commits_the_stop_summary(replay):
    e = replay["end"]
    assert (e["stopped"], e["stop_reason"], e["kept"]) == (True, "ended by the agent: 2x is enough", 1)
    assert e["gain"]["ratio_x"] == pytest.approx(2.0) and e["gain"]["head_commit"] == replay["commit"]["commit"]
    assert e["summary_commit"] and e["best_commit"] == replay["commit"]["commit"]
    summary = replay["performance"].split("## Stop Summary", 1)[1]
    assert "- reason: ended by the agent: 2x is enough" in summary
    assert f"- session gain (measured): {e['gain']['headline']}" in summary
    assert replay["after"].is_error and "ended by the agent" in replay["after"].content[0].text
    assert replay["status"]["phase"] == "stopped"


def test_7_the_verdict_says_what_the_correctness_command_found(replay):
    c = replay["verdict"]["correctness"]
    assert replay["verdict"]["verdict"] == "improved"
    assert (c["ok"], c["passed"], c["failed"], c["skipped"], c["counts_from"]) == (True, 2, 0, 0, "pytest summary line")
    assert c["wall_s"] > 0


def test_8_program_md_says_how_old_the_latest_trace_is(replay):
    line = next(x for x in replay["program"].splitlines() if x.startswith("- latest trace:"))
    assert line.startswith("- latest trace: none yet") and "kernel_trace_analysis" in line


def test_2_every_number_of_the_reason_is_a_field_and_a_speed_up_reads_as_a_ratio(replay):
    v = replay["verdict"]
    iv = v["target_interval"]  # the keep's interval, whose numbers the reason shows
    assert (iv["looks"], iv["confidence"], iv["overall_confidence"]) == (2, pytest.approx(0.9975), 0.995)
    assert "over 2 looks at a keep (Bonferroni: 99.8% each)" in v["reason"] and "one-sided at 99.5%" in v["reason"]
    for c in v["classes"]:  # each class tested once at the same overall level the reason names
        assert (c["interval"]["looks"], c["interval"]["overall_confidence"]) == (1, 0.995)
    assert "mean +50.00% (2.00x)" in v["reason"] and iv["ratio_x"] == pytest.approx(2.0)
    gain = replay["end"]["gain"]
    assert [(c["base"], c["head"], c["ratio_x"]) for c in gain["classes"]] == [(100.0, 50.0, 2.0), (200.0, 100.0, 2.0)]
    assert "n=1 +50.00% (2.00x)" in gain["headline"]


def test_11_the_baseline_says_what_a_verdict_detects_and_classes_give_ratios(replay):
    d = replay["baseline"]["detectable"]
    # the toy's 3 baseline runs are identical: no spread, so 3 rounds detect any gain
    assert (d["target"], d["rounds"], d["df"], d["target_spread_pct"], d["max_rounds_asked"]) == ("global", 3, 2, 0.0, 10)
    assert d["min_effect_pct"] == 0.0 and d["min_effect_x"] == 1.0
    assert [(r["effect_pct"], r["rounds"]) for r in d["rounds_for"]][:2] == [(2.0, 1), (5.0, 1)]
    assert [c["ratio_x"] for c in replay["verdict"]["classes"]] == [pytest.approx(2.0), pytest.approx(2.0)]


FIX = "correctness fix: non-1-D weights"


async def _neutral(ref) -> dict:
    out: dict = {}
    async with Client(build_server(ref)) as c:
        await c.call_tool("run_benchmark", {})
        ws = Path((await c.call_tool("status", {})).structured_content["workspace"])
        set_kernel(ws, {"1": 99.5, "2": 210.0})  # n=1 +0.5% (within the 1% noise), n=2 5% worse
        out["too_many"] = await c.call_tool("save_and_test", {"hypothesis": "fix", "rounds": 50})
        out["worse"] = (await c.call_tool("save_and_test", {"target": "n=1", "hypothesis": "fix",
                                                            "rounds": 2})).structured_content
        out["worse_kept"] = (await c.call_tool("commit_improvement", {"neutral_reason": FIX})).structured_content
        set_kernel(ws, {"1": [99.9, 99.1] * 6, "2": 200.0})  # a promising tie: +0.1%, +0.9%, ... on n=1
        out["longer"] = (await c.call_tool("save_and_test", {"target": "n=1", "rounds": 4})).structured_content
        (ws / "kernel.py").write_text(kernel_source({"1": 100.0, "2": 200.0}) + "# handles non-1-D weights\n")
        out["tie"] = (await c.call_tool("save_and_test", {"hypothesis": "fix", "rounds": 2})).structured_content
        out["kept"] = (await c.call_tool("commit_improvement", {"neutral_reason": FIX})).structured_content
        out["performance"] = (await c.read_resource("kopt://performance.md")).contents[0].text
        out["ledger"] = (await c.read_resource("kopt://ledger.jsonl")).contents[0].text
        out["end"] = (await c.call_tool("end_session", {})).structured_content
    return out


@pytest.fixture(scope="module")
def neutral(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("neutral36")
    repo = make_toy_repo(tmp / "repo", {"1": 100.0, "2": 200.0})
    ref = Referee(repo, tag="t", lease_dir=tmp / "leases")
    try:
        yield anyio.run(_neutral, ref), repo
    finally:
        ref.close()


def test_9_a_tie_is_kept_as_neutral_by_name_and_never_counts_as_a_gain(neutral):
    out, repo = neutral
    w, refused = out["worse"], out["worse_kept"]
    assert w["verdict"] == "tie" and [c["key"] for c in w["classes"] if c["mean_pct"] <= -1.0] == ["n=2"]
    assert (refused["committed"], refused["code"]) == (False, "neutral_refused_worse_class")
    t, k = out["tie"], out["kept"]
    assert t["verdict"] == "tie" and [c["mean_pct"] for c in t["classes"]] == [0.0, 0.0]
    assert (k["committed"], k["neutral"], k["code"]) == (True, True, "neutral_kept")
    msg = subprocess.run(["git", "log", "-1", "--format=%B", k["commit"]], cwd=repo,
                         capture_output=True, text=True, check=True).stdout
    assert f"kept as neutral (not a gain): {FIX}" in msg
    assert sum("| neutral |" in line for line in out["performance"].splitlines()) == 2  # one row per class
    assert '"code": "neutral_kept"' in out["ledger"] or '"code":"neutral_kept"' in out["ledger"]
    e = out["end"]
    assert (e["kept"], e["kept_neutral"], e["gain"]) == (0, 1, None) and "only neutral keeps" in e["gain_note"]
    assert "neutral keeps (not a gain): 1" in e["summary"] and "- kept improvements: 0" in e["summary"]


def test_11_more_rounds_are_asked_within_the_human_set_bound(neutral):
    out, _ = neutral
    assert out["too_many"].is_error and "max_rounds_asked" in out["too_many"].content[0].text
    assert "1 .. 10" in out["too_many"].content[0].text
    longer = out["longer"]  # [gates] max_rounds is 3: the 4th round is the one asked for
    assert (longer["verdict"], longer["code"], longer["rounds"]) == ("tie", "script_not_confirmed", 4)
    assert all(d > 0 for d in longer["target_deltas_pct"]) and longer["target_interval"]["looks"] == 3


def test_10_status_answers_on_a_session_that_cannot_open(tmp_path):
    (tmp_path / "plain").mkdir()

    async def ask():
        async with Client(build_server(open_session(tmp_path / "plain", None, "t"))) as c:
            return (await c.call_tool("status", {})), (await c.call_tool("run_benchmark", {}))

    status, run = anyio.run(ask)
    s = status.structured_content
    assert not status.is_error and s["phase"] == "unconfigured" and "not a git repository" in s["problem"]
    assert "git init" in s["fix"] and run.is_error


RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "pyspy" / "softmax_ref"


class _RecordedPySpy(PySpyProfiler):
    """py-spy replayed: the benchmark runs as usual, then the recorded run's files (py-spy's output and the
    wrapper's) land in the run's folder; scoping and parsing are the real PySpyProfiler's."""

    def available(self) -> bool:
        return True

    def scoped(self, protect):
        return _RecordedPySpy(protect)

    def wrap(self, command: str, out_dir: Path) -> str:
        return f"( {command} ) && cp {RECORDED}/pyspy.* {out_dir}/"


def test_1_the_cpu_profile_keeps_the_protected_reference_and_imports_apart(tmp_path):
    repo = make_toy_repo(tmp_path / "repo", {"1": 100.0, "2": 200.0})
    cfg = repo / "kopt.toml"  # the recorded repository's harness: benchmark/ (bench.py and scripts/reference.py)
    cfg.write_text(cfg.read_text().replace('paths = ["bench.py"]', 'paths = ["bench.py", "benchmark/"]'))
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qam", "harness"], cwd=repo, check=True)
    recorded = Services(profiler=lambda b, v, detail: _RecordedPySpy() if detail else make_profiler(b, v, detail))
    ref = Referee(repo, tag="t", lease_dir=tmp_path / "leases", services=recorded)

    async def trace():
        async with Client(build_server(ref)) as c:
            await c.call_tool("run_benchmark", {})
            return (await c.call_tool("kernel_trace_analysis", {"top": 10})).structured_content

    try:
        t = anyio.run(trace)
    finally:
        ref.close()
    p = t["cpu"]
    assert (t["available"], t["backend"], p["runs"], p["samples"]) == (True, "py-spy", 6, 48 + 61 + 44 + 40 + 59 + 166)
    parts = ("own", "library", "harness", "import", "no_python")
    assert [p[f"{k}_samples"] for k in parts] == [27, 32, 208, 94, 57] and sum(p[f"{k}_samples"] for k in parts) == 418
    assert (p["harness_pct"], p["import_pct"]) == (49.76, 22.49)
    h = p["harness_functions"][0]
    assert (h["function"], h["file"], h["self_samples"], h["own"]) == (
        "reference_softmax.<locals>.<listcomp>", "benchmark/scripts/reference.py", 110, False)
    assert not any(f["file"].startswith("benchmark/") for f in p["functions"])
    top = next(f for f in p["functions"] if f["own"])
    assert (top["function"], top["file"], top["self_samples"], top["total_samples"]) == ("row_softmax", "kernel.py", 26, 58)
    assert [(ln["line"], ln["samples"]) for ln in top["lines"]] == [(10, 13), (9, 11), (6, 1), (8, 1)]
    assert [(ln["file"], ln["line"], ln["samples"]) for ln in p["lines"]][:2] == [("kernel.py", 10, 13), ("kernel.py", 9, 11)]
    imports = [f for f in p["functions"] if f["file"].startswith("<frozen importlib")]
    assert imports and not any(f["own"] for f in imports)
    assert t["bottleneck"]["evidence"]["hottest_own_self_samples"] == 26
    assert any("ran 6 times" in n and "418 samples" in n for n in t["notes"])


def test_1_without_the_harness_apart_the_reference_would_be_the_hottest_own_function():
    files = sorted(RECORDED.glob("pyspy.*.speedscope.json"))
    bare = parse_speedscope(files, (RECORDED / "pyspy.cwd").read_text(), runs=6)
    top = next(f for f in bare.functions if f.own)
    assert (top.function, top.file, top.self_samples, bare.harness_samples) == (
        "reference_softmax.<locals>.<listcomp>", "benchmark/scripts/reference.py", 110, 0)


def _neighbour(cores: float) -> FixedLoad:
    """Every run beside a neighbour holding one core of two (49.6% of all cores, pid 4243 stress), the
    benchmark using `cores` cores at its peak."""
    return FixedLoad(RunLoad(device="cpu", duration_s=1.0, samples=3, other_pct=49.6, cores=2, bench_cores=cores,
                             processes=[ForeignProcess(pid=4243, name="stress", pct=49.5)], unattributed_pct=0.1))


class _NoCpuGate:
    """The gate's CPU probe, quiet: the gate is tests/gpus/test_cpu_attribution.py's; this replays the rounds."""

    name = "cpu-load"

    def read(self, own_pids=frozenset()):
        from kopt_mcp.gpus.cpu import CpuLoad

        return CpuLoad(cores=2, interval_s=1.0, other_pct=0.0, own_pct=0.0)


@pytest.mark.parametrize("bench_cores", [1.0, 1.9])
def test_4_a_whole_foreign_core_is_load_for_a_multi_core_benchmark_and_reported_either_way(
        tmp_path, monkeypatch, bench_cores):
    monkeypatch.setattr("kopt_mcp.referee.opening.CpuLoadProbe", _NoCpuGate)
    repo = make_toy_repo(tmp_path / "repo", {"1": 100.0, "2": 200.0}, idle_cpu_pct=50.0)
    loads = Services(loads=lambda vendor, uuid, probe: (lambda: _neighbour(bench_cores)))
    ref = Referee(repo, tag="t", lease_dir=tmp_path / "leases", services=loads)

    async def verdict():
        async with Client(build_server(ref)) as c:
            await c.call_tool("run_benchmark", {})
            ws = Path((await c.call_tool("status", {})).structured_content["workspace"])
            set_kernel(ws, {"1": 50.0, "2": 100.0})
            return (await c.call_tool("save_and_test", {"hypothesis": "halve"})).structured_content

    try:
        v = anyio.run(verdict)
    finally:
        ref.close()
    if bench_cores == 1.0:  # one core: the other one is free, the 50% gate holds
        assert (v["verdict"], v["rounds_under_load"]) == ("improved", 0)
        assert v["rounds"] == 2 and "other processes used 50%, 50% of the cores in the rounds" in v["reason"]
    else:  # 1.9 cores: the neighbour takes what the benchmark uses; every round under load
        assert (v["rounds"], v["rounds_under_load"]) == (6, 6)  # measured again up to the bound, each loaded
        assert "6 of 6 paired rounds ran under foreign load" in v["reason"] and "all 6 were counted" in v["reason"]
        assert "12.5% of 2 cores for a benchmark using up to 1.9 cores" in v["reason"]
        assert "pid 4243 stress 50%" in v["reason"] and "benchmark used up to 1.9 cores" in v["reason"]


FOREIGN_ROW = ('rms_norm,ours,forward,speed,ms,H,hidden size,8192,0.051,0.05,0.06,"{""M"": 32, ""dtype"": ""float64""}",'
               'NVIDIA H100,2026-11-20 10:00:00,0.1.0\n')


def test_5_check_config_and_init_preview_only_the_rows_the_benchmark_writes_now(tmp_path, capsys):
    from kopt_mcp.app.cli import main
    from kopt_mcp.commands.demo import prepare_repo
    from kopt_mcp.commands.init.propose import propose

    repo = prepare_repo(Path(__file__).resolve().parents[2] / "examples" / "appended_harness", tmp_path / "repo")
    with (repo / "data" / "all_benchmark_data.csv").open("a") as f:  # another GPU's row of a class never run here
        f.write(FOREIGN_ROW)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qam", "h100 row"], cwd=repo, check=True)
    assert main(["check-config", "--repo", str(repo)]) == 0
    out = capsys.readouterr().out
    assert "4 counted row(s), 4 config class(es)" in out and "not previewed" in out and "x_value=" not in out
    assert "all_benchmark_data.csv: committed to git or older than kopt.toml" in out
    assert main(["check-config", "--repo", str(repo), "--run"]) == 0
    out = capsys.readouterr().out
    assert "wrote: 3 counted row(s), 3 config class(es) over columns ['x_value'], unit ms" in out
    shown = [ln.split(":")[0].strip() for ln in out.splitlines() if ln.startswith("  x_value=")]
    assert shown == ["x_value=256", "x_value=1024", "x_value=2048"]
    assert "1 config class(es) in the result files that this run never wrote" in out and "x_value=8192" in out
    assert subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout == ""
    (repo / "kopt.toml").unlink()
    p = propose(repo, "python benchmark/benchmark_rms_norm.py --overwrite", profile=False, run_tests=False)
    assert any("1 of its 13 rows were not written by the run" in f for f in p.findings)


def test_3_research_directions_and_status_speak_of_the_cpu_on_a_cpu_session(replay, monkeypatch):
    text = replay["directions"]
    for gpu_word in ("DRAM", "SM throughput", "occupancy", "GPU time", "warps"):
        assert gpu_word not in text, gpu_word
    assert "the script metric: no kernel profiler on the CPU" in text and "vectorization" in text
    assert "best_gpu_us" not in replay["status"] and "gpu_base_us" not in replay["end"]["gain"]


def test_3_on_a_gpu_the_directions_keep_their_gpu_words(tmp_path, monkeypatch):
    from kopt_mcp.app import prompts
    from kopt_mcp.app.program import TRACE_GPU

    ref = Referee(make_toy_repo(tmp_path / "repo", {"1": 100.0}), tag="t", lease_dir=tmp_path / "leases")
    try:
        monkeypatch.setattr(prompts, "device_words", lambda r: ("nvidia GPU (H100)", TRACE_GPU))
        text = prompts.research_directions(ref)
    finally:
        ref.close()
    assert "DRAM throughput near peak" in text and "GPU time of the target kernel(s): - us" in text
    assert "vectorization (whole-array numpy" not in text
