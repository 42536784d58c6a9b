"""The examples in claude_config_examples/ work as written: each is resolved the way its client resolves it
(Claude Code: `${VAR}`, `${VAR:-default}`; Cursor: `${env:NAME}`, `${workspaceFolder}`, `${userHome}`), then
exactly what it says is started (stdio) or connected to (HTTP, after starting serve_http.sh), and the
official MCP client lists the tools. The `claude mcp add` lines must parse into the same servers.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import anyio
import pytest
from mcp import Client, StdioServerParameters

from tests.app.test_http import free_port, list_tools_over_http, registered_tools, start_server

EXAMPLES = Path(__file__).resolve().parents[2] / "claude_config_examples"
CLAUDE_STDIO = EXAMPLES / "claude_code" / ".mcp.json"
CLAUDE_HTTP = EXAMPLES / "claude_code" / ".mcp.http.json"
CLAUDE_ADD = EXAMPLES / "claude_code" / "claude_mcp_add.sh"
CURSOR_STDIO = EXAMPLES / "cursor" / ".cursor" / "mcp.json"
CURSOR_HTTP = EXAMPLES / "cursor" / "mcp.http.json"
SERVE_HTTP = EXAMPLES / "serve_http.sh"
EXPANDED_FIELDS = ("command", "args", "env", "url", "headers")  # what both clients interpolate
TOKEN = "client-config-token-0123456789abcdef"


# ---- the clients' placeholder rules ------------------------------------------------------------------------

_CLAUDE_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")
_CURSOR_VAR = re.compile(r"\$\{(env:[A-Za-z_][A-Za-z0-9_]*|workspaceFolder|workspaceFolderBasename|userHome)\}")


def resolve_claude(text: str, env: dict[str, str]) -> str:
    """Claude Code .mcp.json: `${VAR}`; `${VAR:-default}` (default when VAR is unset or empty); an unset
    `${VAR}` without a default stays literal text (Claude Code warns), which the tests treat as an error."""

    def sub(m: re.Match) -> str:
        name, default = m.group(1), m.group(2)
        if env.get(name):
            return env[name]
        if default is not None:
            return default
        raise KeyError(f"{m.group(0)} is unset")

    return _CLAUDE_VAR.sub(sub, text)


def resolve_cursor(text: str, env: dict[str, str], workspace: Path) -> str:
    """Cursor mcp.json: `${env:NAME}`, `${workspaceFolder}`, `${workspaceFolderBasename}`, `${userHome}`."""

    def sub(m: re.Match) -> str:
        key = m.group(1)
        if key.startswith("env:"):
            return env[key[4:]]
        return {"workspaceFolder": str(workspace), "workspaceFolderBasename": workspace.name,
                "userHome": str(Path.home())}[key]

    return _CURSOR_VAR.sub(sub, text)


def resolved_servers(path: Path, resolve) -> dict[str, dict]:
    """mcpServers of `path`, with `resolve` applied to every string of the fields the client expands."""

    def walk(v):
        if isinstance(v, str):
            return resolve(v)
        if isinstance(v, list):
            return [walk(x) for x in v]
        if isinstance(v, dict):
            return {k: walk(x) for k, x in v.items()}
        return v

    servers = json.loads(path.read_text())["mcpServers"]
    out = {name: {k: (walk(v) if k in EXPANDED_FIELDS else v) for k, v in entry.items()}
           for name, entry in servers.items()}
    assert "${" not in json.dumps(out), f"unresolved placeholder in {path}: {out}"
    return out


# ---- running what a config says ----------------------------------------------------------------------------

def stdio_tools(entry: dict, env: dict[str, str], cwd: Path) -> set[str]:
    """Start `command` + `args` (+ `env`) as the client would, in the project folder; list the tools."""
    params = StdioServerParameters(command=entry["command"], args=entry.get("args", []),
                                   env={**env, **entry.get("env", {})}, cwd=cwd)

    async def main():
        with anyio.fail_after(90):
            async with Client(params) as c:
                return {t.name for t in (await c.list_tools()).tools}

    return anyio.run(main)


def start_serve_http(repo: Path, port: int, logs: Path, env: dict[str, str]):
    """Start the server the README says to start on the GPU host: serve_http.sh, settings in the environment."""
    script_env = {**env, "KOPT_MCP_TOKEN": TOKEN, "KOPT_REPO": str(repo), "KOPT_MCP_PORT": str(port)}
    return start_server(["sh", str(SERVE_HTTP)], port, logs, script_env, cwd=repo)


def with_port(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.hostname}:{port}"))


@pytest.fixture
def env(lease_dir) -> dict[str, str]:
    """The environment the editor was started with (KOPT_* settings removed; the lease dir is the test's)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("KOPT_MCP_", "KOPT_REPO"))}


# ---- Claude Code --------------------------------------------------------------------------------------------

@pytest.mark.timeout(180)
def test_claude_code_stdio_mcp_json(toy_repo, env, tmp_path):
    # Claude Code starts stdio servers in the project folder: unset KOPT_REPO -> "." is the repository
    servers = resolved_servers(CLAUDE_STDIO, lambda s: resolve_claude(s, env))
    assert list(servers) == ["kopt"] and servers["kopt"]["args"] == ["serve", "--repo", "."]
    assert registered_tools() == stdio_tools(servers["kopt"], env, cwd=toy_repo)
    # KOPT_REPO set: the repository is named explicitly, whatever the folder
    env2 = {**env, "KOPT_REPO": str(toy_repo)}
    servers = resolved_servers(CLAUDE_STDIO, lambda s: resolve_claude(s, env2))
    assert servers["kopt"]["args"] == ["serve", "--repo", str(toy_repo)]
    # the first server has exited (its session lock with it): this one resumes the same session
    assert registered_tools() == stdio_tools(servers["kopt"], env2, cwd=tmp_path)


@pytest.mark.timeout(180)
def test_claude_code_http_mcp_json(toy_repo, env, tmp_path):
    default = resolved_servers(CLAUDE_HTTP, lambda s: resolve_claude(s, {**env, "KOPT_MCP_TOKEN": TOKEN}))
    assert default["kopt-remote"]["type"] == "http"
    assert default["kopt-remote"]["url"] == "http://127.0.0.1:8765/mcp"  # serve_http.sh's defaults
    assert default["kopt-remote"]["headers"] == {"Authorization": f"Bearer {TOKEN}"}
    port = free_port()
    server = start_serve_http(toy_repo, port, tmp_path / "logs", env)
    try:
        client_env = {**env, "KOPT_MCP_TOKEN": TOKEN, "KOPT_MCP_URL": f"http://127.0.0.1:{port}/mcp"}
        entry = resolved_servers(CLAUDE_HTTP, lambda s: resolve_claude(s, client_env))["kopt-remote"]
        assert registered_tools() == list_tools_over_http(entry["url"], entry["headers"])[0]
        assert server.stdout() == ""
    finally:
        server.stop()


def _claude_add_lines() -> list[list[str]]:
    text = CLAUDE_ADD.read_text().replace("\\\n", " ")
    return [shlex.split(line) for line in text.splitlines() if line.strip().startswith("claude mcp add")]


def _parse_claude_add(argv: list[str]) -> dict:
    """A model of `claude mcp add [options] <name> <commandOrUrl> [args...]` (commander.js): --transport and
    --scope take one value; --header and --env are variadic (they take every following token up to the next
    option or `--`), which is why they must not come before the positionals."""
    assert argv[:3] == ["claude", "mcp", "add"], argv
    rest, opts, pos, i = argv[3:], {"header": [], "env": []}, [], 0
    while i < len(rest):
        a = rest[i]
        if a == "--":
            pos += rest[i + 1:]
            break
        if a in ("--transport", "-t", "--scope", "-s"):
            opts["transport" if a in ("--transport", "-t") else "scope"] = rest[i + 1]
            i += 2
        elif a in ("--header", "-H", "--env", "-e"):
            key = "header" if a in ("--header", "-H") else "env"
            i += 1
            while i < len(rest) and not rest[i].startswith("-"):
                opts[key].append(rest[i])
                i += 1
        else:
            assert not a.startswith("-"), f"unknown option {a}"
            pos.append(a)
            i += 1
    assert len(pos) >= 2, f"name and command/url missing (a variadic option swallowed them?): {argv}"
    return {"transport": "stdio", **opts, "name": pos[0], "target": pos[1:]}


def _shell_expand(token: str, env: dict[str, str]) -> str:
    """The shell's expansion of "$VAR" / "${VAR}" inside double quotes (all these lines use)."""
    return re.sub(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?", lambda m: env[m.group(1)], token)


def test_claude_mcp_add_lines_match_the_json(toy_repo, env):
    shell_env = {**env, "PWD": str(toy_repo), "KOPT_MCP_TOKEN": TOKEN}
    adds = [_parse_claude_add([_shell_expand(t, shell_env) for t in argv]) for argv in _claude_add_lines()]
    by_transport = {a["transport"]: a for a in adds}
    assert sorted(by_transport) == ["http", "stdio"] and len(adds) == 2

    stdio = by_transport["stdio"]
    entry = resolved_servers(CLAUDE_STDIO, lambda s: resolve_claude(s, {**env, "KOPT_REPO": str(toy_repo)}))
    assert [stdio["name"]] == list(entry)
    assert stdio["target"] == [entry["kopt"]["command"], *entry["kopt"]["args"]]

    http = by_transport["http"]
    entry = resolved_servers(CLAUDE_HTTP, lambda s: resolve_claude(s, shell_env))
    assert [http["name"]] == list(entry)
    assert http["target"] == [entry["kopt-remote"]["url"]]
    assert [h.split(": ", 1) for h in http["header"]] == [list(kv) for kv in entry["kopt-remote"]["headers"].items()]


# ---- Cursor -------------------------------------------------------------------------------------------------

@pytest.mark.timeout(180)
def test_cursor_stdio_mcp_json(toy_repo, env, tmp_path):
    servers = resolved_servers(CURSOR_STDIO, lambda s: resolve_cursor(s, env, toy_repo))
    assert servers["kopt"]["args"] == ["serve", "--repo", str(toy_repo)]
    assert registered_tools() == stdio_tools(servers["kopt"], env, cwd=tmp_path)


@pytest.mark.timeout(180)
def test_cursor_http_mcp_json(toy_repo, env, tmp_path):
    port = free_port()
    server = start_serve_http(toy_repo, port, tmp_path / "logs", env)
    try:
        client_env = {**env, "KOPT_MCP_TOKEN": TOKEN}
        entry = resolved_servers(CURSOR_HTTP, lambda s: resolve_cursor(s, client_env, tmp_path))["kopt-remote"]
        assert entry["url"] == "http://127.0.0.1:8765/mcp" and entry["headers"] == {"Authorization": f"Bearer {TOKEN}"}
        # the example names serve_http.sh's default port; this test's server got a free one instead
        assert registered_tools() == list_tools_over_http(with_port(entry["url"], port), entry["headers"])[0]
    finally:
        server.stop()


def test_serve_http_defaults_match_the_examples():
    text = SERVE_HTTP.read_text()
    assert '"${KOPT_MCP_HOST:-127.0.0.1}"' in text and '"${KOPT_MCP_PORT:-8765}"' in text
    assert "kopt-mcp serve --http" in text and os.access(SERVE_HTTP, os.X_OK)
