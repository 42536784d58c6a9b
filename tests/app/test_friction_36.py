"""Issue 36's friction points 2, 6, 7, 8, 9, 10 and 11, replayed by an MCP client on the CPU toy (with a pytest
[correctness] command), each checked on what the client itself received:

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
from kopt_mcp.referee import Referee
from kopt_mcp.testing.toy import kernel_source, make_toy_repo, set_kernel

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
    assert (d["target"], d["rounds"], d["df"], d["spread_pct"], d["max_rounds_asked"]) == ("global", 3, 2, 0.0, 10)
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
