"""Start-up errors reach the client: a server whose session could not open still answers, lists its
tools; `status` answers with phase `unconfigured`, the problem and what to do, and every other tool
returns the actionable error as a tool error."""

from __future__ import annotations

import re
import subprocess

import pytest
from mcp import Client

from kopt_mcp.app.cli import open_session
from kopt_mcp.app.server import build_server
from kopt_mcp.app.tools import all_tools
from kopt_mcp.errors import StartupError

pytestmark = pytest.mark.anyio


async def _every_tool_says(server, *words: str) -> None:
    async with Client(server) as c:
        tools = (await c.list_tools()).tools
        assert {t.name for t in tools} == {t.name for t in all_tools()}
        for t in tools:
            r = await c.call_tool(t.name, {"attempt": 1} if t.name == "get_attempt" else {})
            if t.name == "status":  # an answer, not an error: what is wrong and what to do
                s = r.structured_content
                assert not r.is_error and s["phase"] == "unconfigured" and "restart the MCP server" in s["fix"]
                text = s["problem"]
            else:
                assert r.is_error, t.name
                text = r.content[0].text
            for w in words:
                assert w in text, (t.name, text)
        with pytest.raises(Exception, match=re.escape(words[0])):
            await c.read_resource("kopt://program.md")


def _session(repo, config=None):
    ref = open_session(repo, config, "t")
    if not isinstance(ref, StartupError):
        ref.close()
        pytest.fail("the session opened")
    return ref


async def test_missing_repository_says_it_does_not_exist(tmp_path):
    err = _session(tmp_path / "nowhere")
    assert "does not exist" in str(err) and "not a git repository" not in str(err)
    await _every_tool_says(build_server(err), "does not exist", str(tmp_path / "nowhere"))


async def test_a_folder_that_is_not_git(tmp_path, lease_dir):
    (tmp_path / "plain").mkdir()
    await _every_tool_says(build_server(_session(tmp_path / "plain")), "not a git repository", "git init")


async def test_bad_config(toy_repo, lease_dir):
    (toy_repo / "kopt.toml").write_text("[benchmark]\ncommand = 'x'\nbogus = 1\n")
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qam", "bad"], cwd=toy_repo,
                   check=True)
    await _every_tool_says(build_server(_session(toy_repo)), "unknown key [benchmark] bogus")


async def test_a_second_server_on_the_same_repository(toy_repo, make_referee):
    first = make_referee(toy_repo)
    err = _session(toy_repo)
    assert "another kopt-mcp server" in str(err)
    await _every_tool_says(build_server(err), "another kopt-mcp server", "stop it first")
    assert first.status().phase == "needs_baseline"  # the first session is untouched


async def test_missing_config_file(toy_repo, lease_dir, tmp_path):
    err = _session(toy_repo, tmp_path / "none.toml")
    assert "does not exist" in str(err) and "none.toml" in str(err)


async def test_read_only_and_named_subsets(toy_repo, make_referee):
    from kopt_mcp.app.tools import select_tools

    server = build_server(make_referee(toy_repo), read_only=True)
    async with Client(server) as c:
        names = {t.name for t in (await c.list_tools()).tools}
    assert names == {"status", "get_attempt", "plot_progress", "optimization_knowledge", "measure_session_gain"}
    assert [t.name for t in select_tools(["status", "run_benchmark"])] == ["status", "run_benchmark"]
    assert [t.name for t in select_tools(["status", "run_benchmark"], read_only=True)] == ["status"]
    with pytest.raises(ValueError, match="unknown tool.*nope.*known: status"):
        select_tools(["status", "nope"])


async def test_status_on_a_command_that_cannot_start_says_what_to_fix(toy_repo, lease_dir):
    """Issue 36 item 10: a kopt.toml whose command names a missing program (or workdir): status answers."""
    cfg = (toy_repo / "kopt.toml").read_text().replace('command = "python bench.py"',
                                                        'command = "no-such-program-kopt bench.py"')
    (toy_repo / "kopt.toml").write_text(cfg)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qam", "bad command"], cwd=toy_repo,
                   check=True)
    err = _session(toy_repo)
    async with Client(build_server(err)) as c:
        s = (await c.call_tool("status", {})).structured_content
        run = await c.call_tool("run_benchmark", {})
    assert (s["phase"], s["next_actions"], s["best_commit"]) == ("unconfigured", [], "")
    assert "no-such-program-kopt" in s["problem"] and "[benchmark] command / workdir" in s["fix"]
    assert f"kopt-mcp check-config --repo {toy_repo}" in s["fix"]
    assert run.is_error and run.content[0].text.endswith(s["problem"])


async def test_status_on_a_folder_that_is_not_git_says_git_init(tmp_path, lease_dir):
    (tmp_path / "plain").mkdir()
    async with Client(build_server(_session(tmp_path / "plain"))) as c:
        s = (await c.call_tool("status", {})).structured_content
    assert s["phase"] == "unconfigured" and "not a git repository" in s["problem"] and "git init" in s["fix"]
