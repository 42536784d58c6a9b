"""The MCP surface's contracts: errors reach the client as text that says what to do, every input is
described and bounded, unknown arguments are refused, and every structured result validates against
its outputSchema (also where the domain computes inf, e.g. bounds with baseline_runs = 1)."""

from __future__ import annotations

import errno
import math
from pathlib import Path

import git
import jsonschema
import pytest
from mcp import Client

from kopt_mcp.app.server import build_server
from kopt_mcp.app.tools.errors import MAX_CHARS, error_text, git_message, os_message
from kopt_mcp.errors import InputError, KoptError, MeasurementError, SetupError, StateError
from kopt_mcp.results import ClassChange, VerdictResult
from kopt_mcp.rules.script import ClassDelta
from kopt_mcp.rules.stats import PairedInterval
from kopt_mcp.testing.toy import make_toy_repo, set_kernel

pytestmark = pytest.mark.anyio


# -- the exception tree -----------------------------------------------------------------------------------------

def test_every_error_class_has_the_root_and_a_family_and_keeps_its_old_base():
    from kopt_mcp.errors import (
        Cancelled,
        ConfigError,
        KnowledgeError,
        MetricsError,
        ProbeError,
        ProfilerError,
        RefereeError,
        SessionError,
        VcsError,
        VerdictError,
    )

    family = {ConfigError: SetupError, VcsError: SetupError, ProbeError: SetupError, SessionError: StateError,
              RefereeError: StateError, Cancelled: StateError, MetricsError: MeasurementError,
              ProfilerError: MeasurementError, VerdictError: InputError, KnowledgeError: InputError}
    for cls, fam in family.items():
        assert issubclass(cls, fam) and issubclass(cls, KoptError), cls
    assert issubclass(ConfigError, ValueError) and issubclass(VcsError, RuntimeError)


# -- the mapping ------------------------------------------------------------------------------------------------

def test_git_failure_names_the_lock_file_and_what_to_do(toy_repo):
    (toy_repo / ".git" / "index.lock").write_text("")
    with pytest.raises(git.GitCommandError) as e:
        git.Repo(toy_repo).git.add("kernel.py")
    text = git_message(e.value, toy_repo)
    assert text.startswith("git failed: ") and "index.lock" in text and "File exists" in text
    assert f"{toy_repo}/.git/index.lock" in text and "delete the lock file" in text


@pytest.mark.parametrize("code,words", [(errno.ENOSPC, "disk is full"), (errno.EROFS, "read-only"),
                                        (errno.EACCES, "permission denied")])
def test_os_errors_say_what_to_check(code, words):
    text = os_message(OSError(code, "boom", "/x/state.json"))
    assert "/x/state.json" in text and words in text


def test_unexpected_errors_are_not_bare_and_every_text_is_bounded():
    text = error_text(KeyError("phase"), tool="status")
    assert "internal error in status (KeyError" in text and "call status" in text
    assert len(error_text(StateError("y" * 100_000))) <= MAX_CHARS


async def test_an_os_error_inside_a_tool_reaches_the_client_as_advice(toy_repo, make_referee):
    ref = make_referee(toy_repo)
    ref.books.store.ledger_path.unlink(missing_ok=True)
    ref.books.store.ledger_path.mkdir(parents=True)  # the ledger is now a folder: appending to it fails (EISDIR)
    async with Client(build_server(ref)) as c:
        r = await c.call_tool("run_benchmark", {})
    assert r.is_error and "Error executing tool run_benchmark" != r.content[0].text.strip()
    assert "IsADirectoryError" in r.content[0].text and str(ref.books.store.ledger_path) in r.content[0].text


# -- inputs -----------------------------------------------------------------------------------------------------

async def test_every_parameter_is_described_numbers_bounded_and_extras_refused(server):
    async with Client(server) as c:
        tools = (await c.list_tools()).tools
    for t in tools:
        s = t.input_schema
        assert s.get("additionalProperties") is False, t.name
        for name, p in s.get("properties", {}).items():
            assert p.get("description"), (t.name, name)
            if p.get("type") == "integer":
                assert "minimum" in p and "maximum" in p, (t.name, name)
            if p.get("type") == "string":
                assert p.get("maxLength"), (t.name, name)
    knowledge = next(t for t in tools if t.name == "optimization_knowledge").input_schema["properties"]
    assert knowledge["bottleneck"]["anyOf"][0]["enum"] == ["memory-bound", "compute-bound", "latency/occupancy-bound",
                                                          "cpu-bound"]


async def test_unknown_arguments_are_errors(server):
    async with Client(server) as c:
        r = await c.call_tool("status", {"verbose": True})
        assert r.is_error and "verbose" in r.content[0].text and "Extra inputs are not permitted" in r.content[0].text
        r = await c.call_tool("save_and_test", {"target": "global", "hypotesis": "typo"})
    assert r.is_error and "hypotesis" in r.content[0].text


async def test_a_huge_argument_is_refused_without_being_echoed(server):
    async with Client(server) as c:
        r = await c.call_tool("save_and_test", {"target": "x" * 100_000, "hypothesis": "h"})
        assert r.is_error and "at most 200 characters" in r.content[0].text
        assert len(r.content[0].text) < 1000
        r = await c.call_tool("kernel_trace_analysis", {"top": 0})
    assert r.is_error and "greater than or equal to 1" in r.content[0].text


# -- outputs ----------------------------------------------------------------------------------------------------

def test_infinite_bounds_and_nan_become_null_with_a_note_and_validate():
    iv = PairedInterval(n=1, mean_pct=5.0, sd_delta_pct=None, df=0, confidence=0.995, lo_pct=-math.inf,
                        hi_pct=math.inf)
    cd = ClassDelta(key="n=1", best=0.0, candidate=1.0, deltas_pct=[math.inf], mean_pct=math.inf, interval=iv)
    out = ClassChange.model_validate(cd)
    assert out.interval.lo_pct is None and out.interval.hi_pct is None and out.mean_pct is None
    assert "noise not yet measurable" in out.interval.note
    v = VerdictResult(attempt=1, verdict="tie", code="script_noise", reason="r", target="global", metric="us", metric_used="script metric",
                      classes=[cd], target_deltas_pct=[math.nan], divergent_classes=[], gpu_best_us=None,
                      gpu_candidate_us=None, gpu_delta_pct=math.inf, rounds=1, reverted=True, repairs_left=None,
                      patch_path="p", run_dirs=[], device=None, consecutive_regressions=0, stopped=False,
                      stop_reason=None, warnings=[], next_actions=[])
    jsonschema.validate(v.model_dump(mode="json"), VerdictResult.model_json_schema(mode="serialization"))


def _validate(tools: dict, name: str, result) -> dict:
    assert not result.is_error, (name, result.content[0].text[:2000])
    jsonschema.validate(result.structured_content, tools[name].output_schema)
    return result.structured_content


@pytest.mark.slow
async def test_every_tool_result_validates_against_its_output_schema_with_baseline_runs_1(tmp_path, make_referee):
    """The path that broke a real client: baseline_runs = 1 leaves no noise estimate, so early bounds are
    infinite. Every tool, every phase: the structured result must satisfy its own outputSchema."""
    repo = make_toy_repo(tmp_path / "repo", {"1": 100.0, "2": 200.0}, extra_gates="baseline_runs = 1")
    ref = make_referee(repo)
    async with Client(build_server(ref)) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
        seen = set()

        async def run(name: str, args: dict | None = None) -> dict:
            seen.add(name)
            return _validate(tools, name, await c.call_tool(name, args or {}))

        await run("status")
        await run("find_idle_device")
        await run("find_idle_gpu")  # its deprecated name, the same result
        assert (await run("run_benchmark"))["baseline_recorded"]
        await run("kernel_trace_analysis", {"top": 3})
        await run("warm_up_harness")
        set_kernel(ref.where.workspace_path, {"1": 80.0, "2": 160.0})
        assert (await run("save_and_test", {"target": "n=1", "hypothesis": "faster"}))["verdict"] == "improved"
        committed = await run("commit_improvement", {"message": "faster"})
        assert committed["committed"] and committed["code"] == "script_only"  # the toy repo has no profiler
        assert (await run("measure_session_gain"))["head_commit"] == committed["commit"]
        set_kernel(ref.where.workspace_path, {"1": 80.0, "2": 160.0}, errors={"1": 1})
        assert (await run("save_and_test", {"hypothesis": "wrong"}))["verdict"] == "incorrect"
        await run("revert_to_best", {"reason": "give up"})
        await run("get_attempt", {"attempt": 1})
        await run("plot_progress")
        await run("optimization_knowledge", {"bottleneck": "memory-bound", "max_chars": 1000})
        assert (await run("status"))["kept"] == 1
        ended = await run("end_session", {"why": "done"})
        assert ended["stopped"] and ended["gain"]["head_commit"] == committed["commit"]
    assert seen == set(tools)


def test_interval_none_when_df_is_zero_is_what_the_domain_returns():
    """Guard that the null path above is the real one: the domain's interval at df 0 is infinite."""
    from kopt_mcp.rules.stats import NoiseEstimate, paired_interval

    iv = paired_interval([3.0], NoiseEstimate(run_sd_pct=0.0, df=0), 0.99)
    assert math.isinf(iv.lo_pct) and ClassChange(key="k", best=1, candidate=1, deltas_pct=[3.0], mean_pct=3.0,
                                                  interval=iv).interval.lo_pct is None


async def test_a_committed_sub_noise_win_does_not_read_like_a_tie(ref):
    """The commit gate re-measures one round; for a sub-noise win that round alone reads "within the
    noise threshold and not confirmed" (a tie's wording). A committed result must not say that."""
    set_kernel(ref.where.workspace_path, {"1": 99.5, "2": 199.0})  # 0.5% faster everywhere, under noise_pct 1%
    async with Client(build_server(ref)) as c:
        v = (await c.call_tool("save_and_test", {"hypothesis": "a little faster"})).structured_content
        assert v["verdict"] == "improved", v["reason"]
        r = (await c.call_tool("commit_improvement", {})).structured_content
    assert r["committed"] and r["code"] == "script_only"  # no profiler: the script metric alone kept it
    # the wording is the product here: a committed result must not read like a tie
    assert r["reason"].startswith("committed") and "tie" not in r["reason"] and "not confirmed" not in r["reason"]


def test_a_trace_with_non_finite_profiler_numbers_validates():
    from kopt_mcp.profilers.bottleneck import Bottleneck
    from kopt_mcp.results import DeviceInfo, KernelRow, TraceResult

    row = KernelRow(name="k", short_name="k", calls=1, total_us=1.0, avg_us=1.0, share_pct=100.0,
                    extra={"sm_throughput_pct": math.nan, "dram_throughput_pct": 50.0}, median_us=math.inf)
    t = TraceResult(backend="ncu", device=DeviceInfo(vendor="nvidia", index=0, name="g", env={}), available=True,
                    total_gpu_us=1.0, kernels=[row], target_kernels=["k"], target_gpu_us=1.0, notes=[], log_path="",
                    bottleneck=Bottleneck(kind="unknown", evidence={"sm": math.nan}, reason="r"))
    data = t.model_dump(mode="json")
    assert data["kernels"][0]["extra"]["sm_throughput_pct"] is None and data["bottleneck"]["evidence"]["sm"] is None
    jsonschema.validate(data, TraceResult.model_json_schema(mode="serialization"))


async def test_a_stale_lock_in_the_workspace_reaches_the_client_as_git_advice(toy_repo, make_referee):
    """A git process killed while holding the workspace's index.lock: the baseline's commit fails; the
    client reads which lock file to check, not a bare error."""
    ref = make_referee(toy_repo)
    lock = Path(ref.where.ws.git_dir) / "index.lock"
    lock.write_text("")
    async with Client(build_server(ref)) as c:
        r = await c.call_tool("run_benchmark", {})
    assert r.is_error, r.content[0].text
    text = r.content[0].text
    assert "git failed" in text and str(lock) in text and "delete the lock file" in text
