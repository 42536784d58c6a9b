"""MCP protocol tests: the server in memory through the official client, one behaviour each."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from mcp import Client

from kopt_mcp.app.server import build_server
from kopt_mcp.testing.toy import set_kernel

SNAPSHOT = Path(__file__).parent / "tools_snapshot.json"
SEVEN = {"find_idle_gpu", "run_benchmark", "kernel_trace_analysis", "warm_up_harness", "save_and_test",
         "revert_to_best", "commit_improvement"}
pytestmark = pytest.mark.anyio


def _listing(tools) -> list[dict]:
    """The whole tools/list result as the client sees it (JSON), sorted by name."""
    return [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in sorted(tools, key=lambda t: t.name)]


async def test_tool_list_matches_snapshot(server):
    """Names, descriptions, input and output schemas, annotations: any change must be deliberate.
    Regenerate with KOPT_UPDATE_SNAPSHOT=1 and review the diff."""
    async with Client(server) as c:
        listing = _listing((await c.list_tools()).tools)
    if not SNAPSHOT.exists() or os.environ.get("KOPT_UPDATE_SNAPSHOT"):
        SNAPSHOT.write_text(json.dumps(listing, indent=1) + "\n")
    assert listing == json.loads(SNAPSHOT.read_text())


async def test_seven_tools_with_output_schemas_and_annotations(server):
    async with Client(server) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert SEVEN | {"status", "get_attempt", "plot_progress", "optimization_knowledge", "measure_session_gain",
                    "end_session", "find_idle_device"} == set(tools)  # find_idle_gpu: its deprecated name
    for t in tools.values():
        assert t.output_schema and t.annotations is not None and len(t.description) > 80
        assert len(t.description) < 500  # the model reads every character of tools/list
    assert tools["status"].annotations.read_only_hint
    assert tools["save_and_test"].annotations.destructive_hint


async def test_status_is_structured(server):
    async with Client(server) as c:
        r = await c.call_tool("status", {})
    assert not r.is_error and r.structured_content["phase"] == "needs_baseline"


async def test_wrong_phase_is_a_tool_error_saying_what_to_do(server):
    async with Client(server) as c:
        r = await c.call_tool("save_and_test", {"target": "global", "hypothesis": "x"})
    assert r.is_error and "run_benchmark first" in r.content[0].text


async def test_progress_reported_on_benchmark(server):
    seen = []

    async def progress(done, total, message):
        seen.append(message)

    async with Client(server) as c:
        r = await c.call_tool("run_benchmark", {}, progress_callback=progress)
    assert not r.is_error and r.structured_content["baseline_recorded"]
    assert any("baseline" in (m or "") for m in seen)


async def baseline_then_regression(c: Client, hypothesis: str):
    """Over the protocol: record the baseline, then test a candidate 20% slower on every class."""
    await c.call_tool("run_benchmark", {})
    ws = (await c.call_tool("status", {})).structured_content["workspace"]
    set_kernel(Path(ws), {"1": 120.0, "2": 240.0})
    return await c.call_tool("save_and_test", {"target": "global", "hypothesis": hypothesis})


async def test_verdict_over_the_protocol(server, toy_repo):
    async with Client(server) as c:
        r = await baseline_then_regression(c, "slower")
    v = r.structured_content
    assert v["verdict"] == "regressed" and v["reverted"] and v["classes"][0]["key"] == "n=1"


async def test_program_md_rendered_with_live_values(server):
    async with Client(server) as c:
        res = await c.read_resource("kopt://program.md")
    text = res.contents[0].text
    assert "python bench.py" in text and "noise threshold 1%" in text and "$" not in text.split("## The loop")[0]


async def test_prompt_contains_program(server):
    async with Client(server) as c:
        p = await c.get_prompt("optimization_loop", {})
    assert "save_and_test" in p.messages[0].content.text


async def test_research_directions_prompt_is_advisory_and_carries_the_session(server):
    async with Client(server) as c:
        await baseline_then_regression(c, "unroll everything")
        p = await c.get_prompt("research_directions", {})
    text = p.messages[0].content.text
    assert "ADVICE" in text and "None of it is an order" in text
    assert "| n=1 | 100 |" in text  # the per-class best table
    assert "unroll everything" in text and "regressed" in text  # past attempts
    assert "vectorization" in text and "DRAM" not in text  # the toy's device is the CPU (issue 36 item 3)


PNG = b"\x89PNG\r\n\x1a\n"


async def test_chart_resources_are_png_blobs(server):
    import base64

    from kopt_mcp.app.tools.charts import LAST_VERDICT_URI, PROGRESS_URI

    async with Client(server) as c:
        await c.call_tool("run_benchmark", {})
        listed = {str(r.uri): r.mime_type for r in (await c.list_resources()).resources}
        read = [(await c.read_resource(uri)).contents[0] for uri in (PROGRESS_URI, LAST_VERDICT_URI)]
    assert listed[PROGRESS_URI] == listed[LAST_VERDICT_URI] == "image/png"
    for blob in read:
        assert blob.mime_type == "image/png" and base64.b64decode(blob.blob)[:8] == PNG


async def test_plot_progress_returns_an_image_and_a_summary(server):
    import base64

    async with Client(server) as c:
        await baseline_then_regression(c, "slower")
        r = await c.call_tool("plot_progress", {})
    assert not r.is_error and [b.type for b in r.content] == ["image", "text"]
    image, text = r.content
    assert image.mime_type == "image/png" and base64.b64decode(image.data)[:8] == PNG
    assert "1 attempt(s): regressed 1" in text.text and "n=1: baseline 100 -> BEST 100 us_per_call" in text.text
    assert r.structured_content["verdicts"] == {"regressed": 1} and r.structured_content["commits"] == 0


async def test_knowledge_tool_uses_the_latest_trace_class_and_stays_in_budget(server, toy_repo):
    async with Client(server) as c:
        r = await c.call_tool("optimization_knowledge", {"max_chars": 4000})
        assert not r.is_error and r.structured_content["bottleneck"] is None  # no trace yet
        assert r.structured_content["hits"] == [] and "no bottleneck class" in r.structured_content["note"]
        r = await c.call_tool("optimization_knowledge", {"bottleneck": "memory-bound", "max_chars": 4000,
                                                         "vendor": "amd"})
        sc = r.structured_content
        assert sc["hits"] and sc["total_chars"] <= 4000 and sc["hits"][0]["classes"][0] == "memory-bound"
        assert "ck" in sc["skills"] and "cuda" not in sc["skills"]
        r = await c.call_tool("optimization_knowledge", {"bottleneck": "slow"})
        assert r.is_error and "memory-bound" in r.content[0].text


async def test_knowledge_tool_reads_the_bottleneck_of_the_last_trace_report(toy_repo, make_referee):
    ref = make_referee(toy_repo)
    ref.books.store.log("trace", kernels=[], bottleneck={"kind": "latency/occupancy-bound", "evidence": {}, "reason": "x"})
    async with Client(build_server(ref)) as c:
        r = await c.call_tool("optimization_knowledge", {"query": "register spills"})
    sc = r.structured_content
    assert sc["bottleneck"] == "latency/occupancy-bound" and sc["bottleneck_source"] == "latest kernel_trace_analysis"
    assert sc["hits"][0]["id"] == "register-pressure"


async def test_skill_and_knowledge_pages_are_resources(server):
    async with Client(server) as c:
        uris = {str(r.uri) for r in (await c.list_resources()).resources}
        assert {f"kopt://skills/{n}/SKILL.md" for n in ("flydsl", "tilelang", "ck", "asm", "triton", "cuda")} <= uris
        assert "kopt://knowledge/README.md" in uris and "kopt://knowledge/pid-swizzle" in uris
        page = await c.read_resource("kopt://knowledge/pid-swizzle")
    assert "## Example" in page.contents[0].text


async def test_progress_ends_at_its_total_and_announces_no_profiling_without_a_profiler(server):
    """The toy session has no profiler: the baseline never says "profiling", and every call's
    progress ends with done == total."""
    calls: dict[str, list] = {"run_benchmark": [], "save_and_test": []}

    def recorder(seen):
        async def progress(done, total, message):
            seen.append((done, total, message or ""))
        return progress

    async with Client(server) as c:
        await c.call_tool("run_benchmark", {}, progress_callback=recorder(calls["run_benchmark"]))
        ws = (await c.call_tool("status", {})).structured_content["workspace"]
        set_kernel(Path(ws), {"1": 120.0, "2": 240.0})
        await c.call_tool("save_and_test", {"hypothesis": "slower"}, progress_callback=recorder(calls["save_and_test"]))
    for name, seen in calls.items():
        assert seen and seen[-1][0] == seen[-1][1], (name, seen)
        assert all(a[0] <= b[0] for a, b in zip(seen, seen[1:])), (name, seen)  # never goes back
    assert not any("profil" in m for _, _, m in calls["run_benchmark"])
