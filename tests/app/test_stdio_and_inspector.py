"""Out-of-process tests: the real `kopt-mcp serve` over stdio, and through the MCP Inspector CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.stdio import stdio_client

INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"


def _inspector_env() -> list[str]:
    """The Inspector starts the server with a minimal environment: pass PYTHONPATH on (so a checkout's
    code is what runs) and the lease folder."""
    return [arg for k in ("PYTHONPATH", "KOPT_LEASE_DIR") if os.environ.get(k)
            for arg in ("-e", f"{k}={os.environ[k]}")]


def _serve_cmd(repo) -> list[str]:
    exe = shutil.which("kopt-mcp")
    base = [exe] if exe else [sys.executable, "-m", "kopt_mcp.app.cli"]
    return [*base, "serve", "--repo", str(repo), "--tag", "stdio"]


def test_stdio_server_lists_tools_and_answers_status(toy_repo, lease_dir):
    cmd = _serve_cmd(toy_repo)

    async def main():
        async with Client(StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))) as c:
            tools = {t.name for t in (await c.list_tools()).tools}
            status = await c.call_tool("status", {})
            return tools, status

    tools, status = anyio.run(main)
    assert {"save_and_test", "commit_improvement", "find_idle_gpu", "status"} <= tools
    assert status.structured_content["phase"] == "needs_baseline"


def test_serve_with_bad_config_still_answers_status_and_every_other_tool_returns_the_error(toy_repo, lease_dir, tmp_path):
    """Clients hide stderr: the error must arrive as a tool result. stderr still carries it, and the
    exit status is 2 once the client disconnects."""
    (toy_repo / "kopt.toml").write_text("[benchmark]\ncommand = 'x'\nbogus = 1\n")
    cmd = _serve_cmd(toy_repo)
    errlog = tmp_path / "stderr.txt"

    async def main():
        with errlog.open("w") as err:
            params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
            async with Client(stdio_client(params, errlog=err)) as c:
                tools = {t.name for t in (await c.list_tools()).tools}
                return tools, await c.call_tool("status", {}), await c.call_tool("run_benchmark", {})

    tools, status, bench = anyio.run(main)
    assert "status" in tools and "save_and_test" in tools
    assert not status.is_error and status.structured_content["phase"] == "unconfigured"  # status answers
    assert "unknown key [benchmark] bogus" in status.structured_content["problem"]
    assert bench.is_error and "unknown key [benchmark] bogus" in bench.content[0].text
    assert "unknown key [benchmark] bogus" in errlog.read_text()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "unknown key [benchmark] bogus" in r.stderr and r.stdout == ""


@pytest.mark.skipif(shutil.which("npx") is None, reason="npm/npx not installed")
def test_mcp_inspector_cli_on_the_cpu_example(tmp_path, lease_dir):
    from kopt_mcp.commands.demo import prepare_repo
    from kopt_mcp.paths import examples_dir

    repo = prepare_repo(examples_dir() / "cpu_softmax", tmp_path / "cpu_softmax")

    def inspector(*method: str) -> dict:
        r = subprocess.run(["npx", "-y", INSPECTOR, "--cli", *_inspector_env(), *_serve_cmd(repo), *method],
                           capture_output=True, text=True, timeout=600, check=False)
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout)

    tools = inspector("--method", "tools/list")["tools"]
    assert {"save_and_test", "status"} <= {t["name"] for t in tools}
    assert all(t.get("outputSchema") and t.get("annotations") for t in tools)
    uris = {r["uri"] for r in inspector("--method", "resources/list")["resources"]}
    assert {"kopt://program.md", "kopt://performance.md"} <= uris
    program = inspector("--method", "resources/read", "--uri", "kopt://program.md")["contents"][0]["text"]
    assert "python bench.py" in program and "noise threshold 7%" in program
    status = inspector("--method", "tools/call", "--tool-name", "status")
    assert status["structuredContent"]["phase"] == "needs_baseline"
    assert status["structuredContent"]["benchmark_command"] == "python bench.py"


@pytest.mark.skipif(shutil.which("npx") is None, reason="npm/npx not installed")
def test_mcp_inspector_cli_shows_a_startup_error_as_a_tool_result(tmp_path, lease_dir):
    """Clients hide the server's stderr: the Inspector must show why the session did not open."""
    r = subprocess.run(["npx", "-y", INSPECTOR, "--cli", *_inspector_env(), *_serve_cmd(tmp_path / "missing"),
                        "--method", "tools/call", "--tool-name", "status"],
                       capture_output=True, text=True, timeout=600, check=False)
    result, _ = json.JSONDecoder().raw_decode(r.stdout.lstrip())  # the result, then an error line
    assert not result.get("isError")  # status answers: phase unconfigured, the problem, the fix
    s = result["structuredContent"]
    assert s["phase"] == "unconfigured" and "does not exist" in s["problem"] and str(tmp_path / "missing") in s["problem"]
