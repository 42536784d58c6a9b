"""Issue 27's friction log, replayed by a scripted MCP client on the CPU toy (the agent's session: a
baseline, a trace, one 2x keep, the session's measured gain, one regression that stops the run). Each
test checks that one friction point is gone, on what the client itself received:

1. a kept commit's message read `tie` (the commit re-measure's one-round reason);
2. load during a round was invisible;
3. no measured answer to "what did the session achieve?";
4. numbers an agent cannot read (99.8333%, per-class values against the mean, no baseline spread);
5. GPU words and no next step on a CPU device (issue 36 item 3: no GPU-only fields, columns or lines);
6. nothing said how to land the branch, or why `formatted: false`.

The toy's metrics are exact numbers, so every figure below is exact; its CPU gate is off
(idle_cpu_pct = 100), so no round counts as under load on a busy machine either."""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import git
import pytest
from mcp import Client

from kopt_mcp.app.server import build_server
from kopt_mcp.events import Attempt
from kopt_mcp.evidence.load import RunLoad
from kopt_mcp.referee import Referee
from kopt_mcp.testing.toy import make_toy_repo, set_kernel

#: every verdict word but `improved` (rules/decision.py)
NOT_KEPT = re.compile(r"\b(tie|regressed|divergent|incorrect|abandoned|failed|rejected|conflict)\b", re.I)


async def _replay(ref) -> dict:
    """The session as the agent ran it, over the protocol; every structured result it received."""
    out: dict = {}
    async with Client(build_server(ref)) as c:
        out["tools"] = {t.name: t.description for t in (await c.list_tools()).tools}
        out["baseline"] = (await c.call_tool("run_benchmark", {})).structured_content
        ws = Path((await c.call_tool("status", {})).structured_content["workspace"])
        out["trace"] = (await c.call_tool("kernel_trace_analysis", {})).structured_content
        set_kernel(ws, {"1": 50.0, "2": 100.0})  # 2x on both classes
        out["verdict"] = (await c.call_tool("save_and_test", {"target": "global", "hypothesis": "halve"})).structured_content
        out["commit"] = (await c.call_tool("commit_improvement", {"message": "halve both"})).structured_content
        out["gain"] = (await c.call_tool("measure_session_gain", {})).structured_content
        set_kernel(ws, {"1": 130.0, "2": 260.0})  # max_consecutive_regressions = 1: this one stops the run
        out["regression"] = (await c.call_tool("save_and_test", {"target": "global", "hypothesis": "slower"})).structured_content
        out["performance"] = (await c.read_resource("kopt://performance.md")).contents[0].text
        out["program"] = (await c.read_resource("kopt://program.md")).contents[0].text
    return out


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """(what the client received, the referee, the repository) of one replayed session."""
    tmp = tmp_path_factory.mktemp("friction")
    repo = make_toy_repo(tmp / "repo", {"1": 100.0, "2": 200.0}, extra_gates="max_consecutive_regressions = 1")
    start = git.Repo(repo).head.commit.hexsha
    ref = Referee(repo, tag="t", lease_dir=tmp / "leases")
    try:
        out = anyio.run(_replay, ref)
        out["start"] = start
        yield out, ref, repo
    finally:
        ref.close()


def test_1_a_kept_commit_carries_its_verdict_and_a_labelled_remeasure(session):
    out, _, repo = session
    v, c = out["verdict"], out["commit"]
    assert (v["verdict"], v["rounds"], c["committed"]) == ("improved", 2, True)
    msg = git.Repo(repo).commit(c["commit"]).message
    lines = msg.splitlines()
    assert [x for x in lines if x.startswith("save_and_test verdict:")] == [
        "save_and_test verdict: improved, global +50.00% (99.5% lower bound +50.00%) over 2 paired rounds; "
        "per class n=1 +50.00%, n=2 +50.00%"]
    assert [x for x in lines if x.startswith("re-measured at commit:")][0].startswith(
        "re-measured at commit: 2 run(s), script metric, global +50.00%")  # the metric that decided the verdict
    assert NOT_KEPT.search(msg) is None


def test_2_every_round_records_the_foreign_load_and_the_verdict_counts_rounds_under_it(session):
    out, ref, _ = session
    v = out["verdict"]
    assert v["rounds_under_load"] == 0  # the toy's gate is off: nothing counts as under load
    att = [e for e in ref.books.store.events() if isinstance(e, Attempt) and e.attempt == v["attempt"]][0]
    assert att.rounds_under_load == 0 and len(att.load["rounds"]) == v["rounds"]
    for rnd in att.load["rounds"]:  # each round: BEST's run and the candidate's, each with its figures
        runs = [RunLoad.model_validate(r) for r in rnd["runs"]]
        assert len(runs) == 2 and all(r.device == "cpu" and r.other_pct is not None and r.cores for r in runs)
    assert all((Path(d) / "load.json").is_file() for d in v["run_dirs"])


def test_3_the_session_gain_is_one_paired_measurement_headlined_in_the_stop_summary(session):
    out, _, repo = session
    g = out["gain"]
    assert (g["head_commit"], g["outcome"]) == (out["commit"]["commit"], "improved")
    base = git.Repo(repo).commit(g["base_commit"])  # the session's baseline commit: the start + performance.md
    assert [p.hexsha for p in base.parents] == [out["start"]] and base.message.startswith("kopt: baseline")
    assert g["rounds"] >= 2 and g["target_pct"] == pytest.approx(50.0) and g["ratio_x"] == pytest.approx(2.0)
    assert g["target_lo_pct"] == pytest.approx(50.0) and {x["key"] for x in g["classes"]} == {"n=1", "n=2"}
    summary = out["performance"].split("## Stop Summary", 1)[1]
    assert f"- session gain (measured): {g['headline']}" in summary


def test_4_numbers_an_agent_can_read(session):
    out, _, _ = session
    v = out["verdict"]
    assert re.search(r"\d\.\d{3,}%", v["reason"]) is None  # no 99.8333%: levels rounded to 0.1%
    for cls in v["classes"]:  # best/candidate are the values the mean change was computed from
        assert cls["best"] / cls["candidate"] == pytest.approx(2.0) and cls["mean_pct"] == pytest.approx(50.0)
        assert cls["interval"]["pooled"]["best_runs"] == 2 and cls["interval"]["pooled"]["candidate_runs"] == 2
    for cls in out["baseline"]["classes"]:  # the baseline gives each class's runs and spread
        assert len(cls["runs"]) == 3 and cls["spread_pct"] == 0.0
    keep_rows = [x for x in out["performance"].splitlines() if "| keep |" in x]
    assert len(keep_rows) == 2 and all("| +50.00% |" in x for x in keep_rows)  # the verdict's mean, not another


def test_5_a_cpu_session_hears_cpu_words_and_gets_a_next_step(session):
    out, _, _ = session
    t = out["trace"]
    assert (t["backend"], t["device"]["vendor"]) == ("py-spy", "cpu")
    if not t["available"]:  # the toy ends in milliseconds: too short to sample; the note says what instead
        assert len(t["notes"]) == 1 and "save_and_test" in t["notes"][0]
    assert "GPU wait" not in out["program"] and "CPU gate wait 60 s" in out["program"]
    for name, text in out["tools"].items():
        assert "GPU" not in text or "device" in text.lower() or "CPU" in text, name
    # issue 36 item 3: GPU figures only where a GPU measured them, device-neutral columns
    gpu_only = {"total_gpu_us", "target_gpu_us", "gpu_best_us", "gpu_candidate_us", "gpu_delta_pct", "gpu_floor_pct",
                "best_gpu_us", "gpu_base_us", "gpu_head_us", "gpu_gain_pct"}
    for name in ("trace", "verdict", "regression", "gain", "baseline"):
        assert gpu_only.isdisjoint(out[name]), name
    header = next(x for x in out["performance"].splitlines() if x.startswith("| Date |"))
    assert "| us_per_call | profiler time (us) |" in header and "GPU" not in out["performance"]
    assert "find_idle_device" in out["tools"] and out["tools"]["find_idle_gpu"].startswith("Deprecated")


def test_6_landing_is_spelled_out_and_formatted_says_why(session):
    out, _, _ = session
    c = out["commit"]
    assert (c["formatted"], c["format_status"]) == (False, "not_configured") and c["formatted_reason"]
    summary = out["performance"].split("## Stop Summary", 1)[1]
    assert "`git merge kernel-opt/t`" in summary and "git cherry-pick" in summary
    assert out["regression"]["stopped"] and out["regression"]["verdict"] == "regressed"
