"""Long calls as MCP tasks (app/tasks.py): a client that declares io.modelcontextprotocol/tasks gets a
task for a long tool, polls it to its result, and can cancel it (the run's process tree ends); a
client that does not gets the plain result with progress, as before. Both the Python SDK's client
(in memory) and a raw JSON-RPC client over streamable HTTP on loopback."""

from __future__ import annotations

import anyio
import httpx2
import mcp_types
import psutil
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError

from kopt_mcp.app.server import build_server
from kopt_mcp.app.tasks import PROGRESS_META, TASK_TOOLS
from kopt_mcp.testing.toy import set_kernel
from tests.app.test_http import TOKEN, _env, _serve_argv, free_port, start_server
from tests.app.tools.test_cancel import _benchmarks_running, _wait_until
from tests.clients.tasks_ext import EXT, CreateTask, RawClient, TaskCancel, TaskGet, TaskRef, TasksClient, TaskState

pytestmark = pytest.mark.anyio
FAST = {"1": 50.0, "2": 100.0}  # twice as fast as the toy baseline: a clear improvement


@pytest.fixture
def quick_heartbeat(monkeypatch):
    monkeypatch.setenv("KOPT_MCP_HEARTBEAT_S", "0.3")


async def test_a_long_save_and_test_runs_as_a_task_with_status_and_completes(ref, quick_heartbeat):
    set_kernel(ref.where.workspace_path, FAST, SLEEP_S=1.0)  # each candidate run takes over a second
    tasks = TasksClient(poll_s=0.2)
    async with Client(build_server(ref), extensions=[tasks]) as c:
        r = await c.call_tool("save_and_test", {"target": "global", "hypothesis": "twice as fast"})
    assert not r.is_error and r.structured_content["verdict"] == "improved"
    assert len(tasks.created) == 1 and tasks.created[0].status == "working"
    statuses = [s for s, _, _ in tasks.seen]
    assert statuses[-1] == "completed" and statuses.count("working") >= 2
    steps = [m for s, m, _ in tasks.seen if s == "working" and "since save_and_test began" in (m or "")]
    assert steps, tasks.seen  # the heartbeat's step and elapsed time are the status message
    progress = [meta[PROGRESS_META] for s, _, meta in tasks.seen if s == "working" and PROGRESS_META in (meta or {})]
    assert progress and all(0 <= p["progress"] <= p["total"] for p in progress)


async def test_a_cancelled_task_kills_the_process_tree_and_leaves_the_session_as_it_was(ref, tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.setenv("KOPT_RUN_ROOT", str(runs))
    set_kernel(ref.where.workspace_path, FAST, SLEEP_S=300)
    before = ref.status()
    async with Client(build_server(ref), extensions=[TasksClient()]) as c:
        handle = await c.session.call_tool("save_and_test", {"hypothesis": "hangs"}, allow_claimed=True)
        assert isinstance(handle, CreateTask) and handle.status == "working"
        assert await _wait_until(lambda: _benchmarks_running(runs)), "the benchmark never started"
        tree = [p.pid for p in _benchmarks_running(runs)]
        ack = await c.session.send_request(TaskCancel(params=TaskRef(task_id=handle.task_id)), mcp_types.Result)
        assert ack.model_dump(exclude_none=True, exclude={"meta"}) == {}  # an empty acknowledgement
        get = TaskGet(params=TaskRef(task_id=handle.task_id))
        for _ in range(100):
            state = await c.session.send_request(get, TaskState)
            if state.status != "working":
                break
            await anyio.sleep(0.1)
        assert state.status == "cancelled"
        assert await _wait_until(lambda: not any(psutil.pid_exists(p) for p in tree)), "the benchmark survived the cancel"
        assert await _wait_until(lambda: ref.lock.acquire(blocking=False))  # the worker unwound
        ref.lock.release()
        after = (await c.call_tool("status", {})).structured_content
    assert after["phase"] == before.phase and after["best_commit"] == before.best_commit
    assert ref.jobs.job is None and list(ref.books.store.attempts.glob("*-cancelled.patch"))


async def test_a_client_without_the_extension_gets_the_plain_result_with_progress(ref):
    set_kernel(ref.where.workspace_path, FAST)
    seen = []

    async def progress(done, total, message):
        seen.append(message)

    async with Client(build_server(ref)) as c:
        r = await c.call_tool("save_and_test", {"hypothesis": "faster"}, progress_callback=progress)
        assert not r.is_error and r.structured_content["verdict"] == "improved" and seen
        with pytest.raises(MCPError) as err:  # tasks/* from a client that did not declare the extension
            await c.session.send_request(TaskGet(params=TaskRef(task_id="x")), TaskState)
    assert err.value.error.code == -32021


async def test_short_tools_never_become_tasks_and_an_unknown_task_is_invalid_params(server):
    assert "status" not in TASK_TOOLS and "save_and_test" in TASK_TOOLS
    tasks = TasksClient()
    async with Client(server, extensions=[tasks]) as c:
        assert EXT in (c.server_capabilities.extensions or {})  # advertised in server/discover
        r = await c.call_tool("status", {})
        assert not r.is_error and tasks.created == []
        with pytest.raises(MCPError) as err:
            await c.session.send_request(TaskGet(params=TaskRef(task_id="no-such-task")), TaskState)
    assert err.value.error.code == -32602


@pytest.mark.timeout(180)
async def test_over_streamable_http_a_raw_json_rpc_client_runs_a_task_and_one_without_gets_a_result(
        toy_repo, lease_dir, tmp_path):
    port = free_port()
    server = start_server(_serve_argv(toy_repo, port, "--host", "127.0.0.1"), port, tmp_path / "logs",
                          _env(KOPT_MCP_TOKEN=TOKEN))
    try:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as http:
            plain = RawClient(http, server.url, tasks=False)
            first = await plain.call_tool("run_benchmark")  # the baseline, no task
            assert first["result"]["resultType"] == "complete" and first["result"]["structuredContent"][
                "baseline_recorded"]
            raw = RawClient(http, server.url)
            created = (await raw.call_tool("run_benchmark"))["result"]
            assert created["resultType"] == "task" and created["status"] == "working"
            for _ in range(300):
                state = (await raw.task("tasks/get", created["taskId"]))["result"]
                if state["status"] != "working":
                    break
                await anyio.sleep(0.1)
            assert state["status"] == "completed" and state["resultType"] == "complete"
            assert state["result"]["structuredContent"]["what"] == "workspace"
            assert (await raw.task("tasks/cancel", created["taskId"]))["result"]["resultType"] == "complete"
            assert (await raw.task("tasks/get", "nope"))["error"]["code"] == -32602
            assert (await plain.task("tasks/get", created["taskId"]))["error"]["code"] == -32021
    finally:
        server.stop()
