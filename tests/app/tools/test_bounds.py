"""Every tool result stays well under an MCP client's 25k-token cap (tools/bounds.py): on a benchmark with
more config classes than a result shows, the per-class tables are cut to the classes that matter, with
the count left out and where all of them are."""

from __future__ import annotations

import json

import pytest
from mcp import Client

from kopt_mcp.app.server import build_server
from kopt_mcp.app.tools.bounds import MAX_CLASSES, bound_verdict
from kopt_mcp.results import ClassChange, VerdictResult
from kopt_mcp.testing.toy import make_toy_repo, set_kernel

pytestmark = pytest.mark.anyio
CLASSES = 60
#: what one result may send, content text and structuredContent together (MCPServer sends both):
#: 40k characters is under 14k tokens even at 3 characters per token, against a 25k-token cap
MAX_RESULT_CHARS = 40_000


def _size(r) -> int:
    return sum(len(b.text) for b in r.content if getattr(b, "text", None)) + len(json.dumps(r.structured_content))


def _change(key: str, mean: float) -> ClassChange:
    return ClassChange(key=key, best=100.0, candidate=100.0 / (1 + mean / 100), deltas_pct=[mean], mean_pct=mean)


def _verdict(classes, target="global", divergent=()) -> VerdictResult:
    return VerdictResult(attempt=1, code="script_noise", verdict="divergent", reason="r", target=target, metric="us", metric_used="m",
                         classes=classes, target_deltas_pct=[], divergent_classes=list(divergent),
                         gpu_best_us=None, gpu_candidate_us=None, gpu_delta_pct=None, rounds=1, reverted=True,
                         repairs_left=None, patch_path="p", run_dirs=[], device=None, consecutive_regressions=0,
                         stopped=False, stop_reason=None, warnings=[], next_actions=[])


def test_a_verdict_keeps_the_target_the_divergent_classes_then_the_largest_changes():
    classes = [_change(f"n={i}", float(i % 50) / 10) for i in range(100)]
    classes[7] = _change("n=7", 40.0)  # the largest change
    v = bound_verdict(_verdict(classes, target="n=3", divergent=["n=90", "n=91"]))
    keys = [c.key for c in v.classes]
    assert len(keys) == MAX_CLASSES and {"n=3", "n=90", "n=91", "n=7"} <= set(keys)
    assert keys == sorted(keys, key=lambda k: int(k[2:]))  # the benchmark's order
    assert v.omitted.counts == {"classes": 100 - MAX_CLASSES} and "report.html" in v.omitted.see
    small = _verdict(classes[:5])
    assert bound_verdict(small) is small and small.omitted is None


@pytest.mark.slow
async def test_every_result_of_a_60_class_session_stays_small(tmp_path, make_referee):
    repo = make_toy_repo(tmp_path / "repo", {str(i): 100.0 + i for i in range(CLASSES)})
    ref = make_referee(repo)
    async with Client(build_server(ref)) as c:
        sizes = {"run_benchmark": await c.call_tool("run_benchmark", {})}
        set_kernel(ref.where.workspace_path, {str(i): (100.0 + i) / 2 for i in range(CLASSES)})
        sizes["save_and_test"] = await c.call_tool("save_and_test", {"hypothesis": "twice as fast"})
        assert sizes["save_and_test"].structured_content["verdict"] == "improved"
        sizes["commit_improvement"] = await c.call_tool("commit_improvement", {})
        sizes["status"] = await c.call_tool("status", {})
        sizes["get_attempt"] = await c.call_tool("get_attempt", {"attempt": 1})
        sizes["run_benchmark again"] = await c.call_tool("run_benchmark", {})
        sizes["plot_progress"] = await c.call_tool("plot_progress", {})  # text and numbers beside the PNG
    for name, r in sizes.items():
        assert not r.is_error, (name, r.content[0].text[:500])
        assert _size(r) < MAX_RESULT_CHARS, (name, _size(r))
    for name in ("run_benchmark", "save_and_test", "commit_improvement", "status"):
        om = sizes[name].structured_content["omitted"]
        assert om["counts"]["classes"] == CLASSES - MAX_CLASSES, name
    assert sizes["plot_progress"].structured_content["classes_omitted"] == CLASSES - MAX_CLASSES
