"""`kopt-mcp serve --http`: the real server as a subprocess on loopback, its bearer token and its host rule.

Every server started here listens on 127.0.0.1 on a free port and is terminated by a fixture finalizer.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from kopt_mcp.app.http import StaticTokenVerifier, check_policy, is_loopback, read_token_file, resolve_token
from kopt_mcp.app.tools import all_tools
from kopt_mcp.errors import TokenError

TOKEN = "test-token-0123456789abcdefghijklmnop"
START_S = 60
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
PROTOCOL = "2025-06-18"
# the nine tools of the design (seven from the card + status + get_attempt); the server may have more
DESIGN_TOOLS = {"find_idle_gpu", "run_benchmark", "kernel_trace_analysis", "warm_up_harness", "save_and_test",
                "revert_to_best", "commit_improvement", "status", "get_attempt"}


# ---- helpers (also used by test_client_configs.py) -------------------------------------------------------------

def kopt_cmd() -> list[str]:
    """How to run `kopt-mcp` here: the console script when installed, else the module."""
    exe = shutil.which("kopt-mcp")
    return [exe] if exe else [sys.executable, "-m", "kopt_mcp.app.cli"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """A running server subprocess; its stdout and stderr go to files (never a pipe that could fill)."""

    proc: subprocess.Popen
    port: int
    out: Path
    err: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_listening(self, timeout_s: float = START_S) -> None:
        """Bounded: until the port accepts a connection; fails early if the process exits."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"server exited with {self.proc.returncode}:\n{self.stderr()[-3000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.2)
        pytest.fail(f"server did not listen on {self.port} within {timeout_s}s:\n{self.stderr()[-3000:]}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


def start_server(argv: list[str], port: int, logs: Path, env: dict[str, str], cwd: Path | None = None) -> Server:
    """Start `argv` (a command that serves on 127.0.0.1:`port`) and wait until it listens."""
    logs.mkdir(parents=True, exist_ok=True)
    out, err = logs / f"server-{port}.out", logs / f"server-{port}.err"
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen(argv, stdout=o, stderr=e, stdin=subprocess.DEVNULL, env=env, cwd=cwd)
    server = Server(proc, port, out, err)
    try:
        server.wait_listening()
    except BaseException:
        server.stop()
        raise
    return server


def list_tools_over_http(url: str, headers: dict[str, str], call_status: bool = False) -> tuple[set[str], dict]:
    """The official client over streamable HTTP, with `headers` on every request: tool names (+ status)."""

    async def main():
        with anyio.fail_after(60):
            async with (httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http,
                        Client(streamable_http_client(url, http_client=http)) as c):
                tools = {t.name for t in (await c.list_tools()).tools}
                status = (await c.call_tool("status", {})).structured_content if call_status else {}
                return tools, status

    return anyio.run(main)


def registered_tools() -> set[str]:
    """Every tool kopt-mcp registers (the in-process list the HTTP server must expose in full)."""
    return {t.name for t in all_tools()}


def snapshot(root: Path) -> dict[str, str]:
    """sha256 of every file under `root` (the sessions' state folders: state, ledger, attempts, runs)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "KOPT_MCP_TOKEN"}
    env.update(extra)
    return env


def _serve_argv(repo: Path, port: int, *extra: str) -> list[str]:
    return [*kopt_cmd(), "serve", "--http", "--repo", str(repo), "--tag", "http", "--port", str(port), *extra]


@pytest.fixture
def server(toy_repo, lease_dir, tmp_path):
    """`kopt-mcp serve --http` on the toy repository, token in $KOPT_MCP_TOKEN; always stopped."""
    port = free_port()
    s = start_server(_serve_argv(toy_repo, port, "--host", "127.0.0.1"), port, tmp_path / "logs",
                     _env(KOPT_MCP_TOKEN=TOKEN))
    yield s
    s.stop()


def _rpc(id_: int, method: str, params: dict | None = None) -> dict:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params or {}}


def _result(r: httpx2.Response) -> dict:
    """The JSON-RPC message of a POST answer (JSON, or SSE `data:` lines)."""
    if r.headers.get("content-type", "").startswith("application/json"):
        return r.json()
    data = [line[5:].strip() for line in r.text.splitlines() if line.startswith("data:")]
    return json.loads(data[-1])


# ---- the server ---------------------------------------------------------------------------------------------

@pytest.mark.timeout(180)
def test_right_token_lists_the_tools_and_calls_status(server):
    tools, status = list_tools_over_http(server.url, {"Authorization": f"Bearer {TOKEN}"}, call_status=True)
    assert tools == registered_tools() and DESIGN_TOOLS <= tools
    assert status["phase"] == "needs_baseline"
    assert "bearer token required" in server.stderr()
    assert server.stdout() == ""


@pytest.mark.timeout(180)
def test_missing_or_wrong_token_gets_401_and_runs_nothing(server, toy_repo):
    kopt = toy_repo / ".git" / "kopt"  # <git-common-dir>/kopt: every session's files
    ledger = kopt / "http" / "ledger.jsonl"
    good = {**ACCEPT, "authorization": f"Bearer {TOKEN}"}
    bad_headers = [ACCEPT, {**ACCEPT, "authorization": "Bearer wrong-token"},
                   {**ACCEPT, "authorization": f"Bearer {TOKEN}x"}, {**ACCEPT, "authorization": TOKEN},
                   {**ACCEPT, "authorization": f"Basic {TOKEN}"}]
    init = _rpc(1, "initialize", {"protocolVersion": PROTOCOL, "capabilities": {},
                                  "clientInfo": {"name": "test", "version": "0"}})
    call = _rpc(2, "tools/call", {"name": "run_benchmark", "arguments": {}})
    with httpx2.Client(base_url=f"http://127.0.0.1:{server.port}", timeout=60) as http:
        before, events_before = snapshot(kopt), ledger.read_text().splitlines()
        for h in bad_headers:  # no session can even be opened
            assert http.post("/mcp", json=init, headers=h).status_code == 401
            assert http.get("/mcp", headers=h).status_code == 401
        # a session opened with the right token; a tool call on it without the right token runs nothing
        r = http.post("/mcp", json=init, headers=good)
        assert r.status_code == 200, r.text
        session = {"mcp-session-id": r.headers["mcp-session-id"], "mcp-protocol-version": PROTOCOL}
        assert http.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                         headers={**good, **session}).status_code == 202
        for h in bad_headers:
            r = http.post("/mcp", json=call, headers={**h, **session})
            assert r.status_code == 401 and r.json()["error"] == "invalid_token"
            assert "www-authenticate" in r.headers
            assert http.delete("/mcp", headers={**h, **session}).status_code == 401
        assert snapshot(kopt) == before
        assert not (toy_repo / ".kopt" / "worktrees" / "http" / "results" / ".runs").exists()
        # control: the very same call with the right token does run, and the ledger records it
        r = http.post("/mcp", json=call, headers={**good, **session})
        assert r.status_code == 200 and "error" not in _result(r), r.text
    assert snapshot(kopt) != before
    assert len(ledger.read_text().splitlines()) > len(events_before)
    assert server.stdout() == ""


@pytest.mark.timeout(120)
def test_refuses_a_non_loopback_host_without_a_token(toy_repo, lease_dir):
    r = subprocess.run(_serve_argv(toy_repo, free_port(), "--host", "0.0.0.0"), check=False,
                       capture_output=True, text=True, timeout=60, env=_env())
    assert r.returncode == 2 and r.stdout == ""
    assert "refusing to serve on non-loopback host '0.0.0.0' without a bearer token" in r.stderr
    assert "KOPT_MCP_TOKEN" in r.stderr
    assert not (toy_repo / ".kopt" / "worktrees").exists()  # refused before the session was opened


@pytest.mark.timeout(180)
def test_loopback_without_a_token_starts_with_a_warning(toy_repo, lease_dir, tmp_path):
    port = free_port()
    s = start_server(_serve_argv(toy_repo, port), port, tmp_path / "logs", _env())
    try:
        tools, _ = list_tools_over_http(s.url, {})
        assert "status" in tools
        assert httpx2.get(f"http://127.0.0.1:{port}/.well-known/oauth-authorization-server").status_code == 404
        assert httpx2.post(f"http://127.0.0.1:{port}/register", json={}).status_code == 404
        assert "warning: no bearer token set" in s.stderr() and "NO AUTHENTICATION" in s.stderr()
        assert s.stdout() == ""
    finally:
        s.stop()


@pytest.mark.timeout(180)
def test_token_file_is_used_and_wins_over_the_environment(toy_repo, lease_dir, tmp_path):
    tf = tmp_path / "token"
    tf.write_text("from-the-file-0123456789abcdef\nsecond line ignored\n")
    tf.chmod(0o600)
    port = free_port()
    s = start_server(_serve_argv(toy_repo, port, "--token-file", str(tf)), port, tmp_path / "logs",
                     _env(KOPT_MCP_TOKEN=TOKEN))
    try:
        assert "status" in list_tools_over_http(s.url, {"Authorization": "Bearer from-the-file-0123456789abcdef"})[0]
        r = httpx2.post(s.url, json=_rpc(1, "initialize", {}), headers={**ACCEPT, "authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 401
    finally:
        s.stop()


def test_token_file_readable_by_others_is_refused(toy_repo, lease_dir, tmp_path):
    tf = tmp_path / "token"
    tf.write_text("from-the-file-0123456789abcdef\n")
    tf.chmod(0o644)
    r = subprocess.run(_serve_argv(toy_repo, free_port(), "--token-file", str(tf)), check=False,
                       capture_output=True, text=True, timeout=60, env=_env())
    assert r.returncode == 2 and r.stdout == ""
    assert "accessible by group/others" in r.stderr and f"chmod 600 {tf}" in r.stderr


# ---- the policy pieces, in process --------------------------------------------------------------------------

@pytest.mark.parametrize("host,loop", [("127.0.0.1", True), ("127.5.6.7", True), ("localhost", True),
                                       ("::1", True), ("[::1]", True), ("0.0.0.0", False), ("::", False),
                                       ("10.0.0.1", False), ("gpu-host.example", False), ("", False)])
def test_is_loopback(host, loop):
    assert is_loopback(host) is loop


def test_policy_and_token_sources(tmp_path, monkeypatch):
    assert check_policy("127.0.0.1", None)  # allowed, with a warning
    with pytest.raises(TokenError, match="non-loopback"):
        check_policy("0.0.0.0", None)
    assert any("clear text" in w for w in check_policy("0.0.0.0", TOKEN))
    assert any("short" in w for w in check_policy("127.0.0.1", "abc"))
    monkeypatch.delenv("KOPT_MCP_TOKEN", raising=False)
    assert resolve_token() is None
    monkeypatch.setenv("OTHER_TOKEN", f"  {TOKEN}\n")
    assert resolve_token("OTHER_TOKEN") == TOKEN
    monkeypatch.setenv("OTHER_TOKEN", "has space")
    with pytest.raises(TokenError, match="printable ASCII"):
        resolve_token("OTHER_TOKEN")
    tf = tmp_path / "t"
    tf.write_text("\n")
    tf.chmod(0o600)
    with pytest.raises(TokenError, match="empty"):
        read_token_file(tf)
    with pytest.raises(TokenError, match="cannot read"):
        read_token_file(tmp_path / "missing")


def test_verifier_accepts_exactly_the_token():
    v = StaticTokenVerifier(TOKEN)
    ok = anyio.run(v.verify_token, TOKEN)
    assert ok is not None and ok.client_id == "kopt-mcp-bearer"
    for wrong in ["", TOKEN[:-1], TOKEN + "x", TOKEN.upper(), "é" * 5]:
        assert anyio.run(v.verify_token, wrong) is None


# ---- OAuth discovery and registration paths: 404, token or not ------------------------------------------------

OAUTH_PATHS = ["/.well-known/oauth-authorization-server", "/.well-known/oauth-protected-resource",
               "/.well-known/oauth-protected-resource/mcp", "/.well-known/openid-configuration", "/register"]


@pytest.mark.parametrize("token", [None, TOKEN])
def test_oauth_discovery_and_registration_answer_404(token):
    """A 401 here makes Claude Code report "Dynamic Client Registration rejected"; 404 lets it use the
    configured bearer header. /mcp keeps its auth: 401 without the token when one is set."""
    from mcp.server.mcpserver import MCPServer

    from kopt_mcp.app.http import build_http_app

    app = build_http_app(MCPServer("t"), "127.0.0.1", token)

    async def main():
        async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://127.0.0.1:8765") as c:
            got = {p: (await c.get(p)).status_code for p in OAUTH_PATHS}
            got["POST /register"] = (await c.post("/register", json={"client_name": "x"})).status_code
            # with a token, /mcp still refuses a request without it (without a token /mcp needs the running
            # session manager; the subprocess tests above cover it)
            mcp = (await c.post("/mcp", json=_rpc(1, "initialize", {}), headers=ACCEPT)).status_code if token else None
            return got, mcp

    got, mcp = anyio.run(main)
    assert set(got.values()) == {404}, got
    if token is not None:
        assert mcp == 401


@pytest.mark.timeout(180)
def test_http_server_with_a_missing_repository_still_serves_the_error(tmp_path, lease_dir):
    """Over HTTP too: the session did not open, the server answers: status with phase unconfigured and
    the problem, every other tool with the error."""
    port = free_port()
    s = start_server(_serve_argv(tmp_path / "missing", port), port, tmp_path / "logs", _env())

    async def main():
        async with Client(s.url) as c:
            return ({t.name for t in (await c.list_tools()).tools}, await c.call_tool("status", {}),
                    await c.call_tool("run_benchmark", {}))

    try:
        tools, status, bench = anyio.run(main)
        assert tools == registered_tools()
        assert not status.is_error and status.structured_content["phase"] == "unconfigured"
        assert "does not exist" in status.structured_content["problem"]
        assert bench.is_error and "does not exist" in bench.content[0].text
        assert "does not exist" in s.stderr() and s.stdout() == ""
    finally:
        s.stop()


@pytest.mark.timeout(240)
def test_two_http_clients_get_two_candidate_slots(server):
    """Two HTTP clients at once, each naming its slot (header Kopt-Slot): each has its own workspace,
    so one's revert never archives the other's candidate; a client without the header is the main slot."""
    auth = {"Authorization": f"Bearer {TOKEN}"}

    async def main():
        with anyio.fail_after(120):
            async with (httpx2.AsyncClient(headers={**auth, "Kopt-Slot": "alice"}, timeout=120) as h1,
                        httpx2.AsyncClient(headers={**auth, "Kopt-Slot": "bob"}, timeout=120) as h2,
                        httpx2.AsyncClient(headers=auth, timeout=120) as h3,
                        Client(streamable_http_client(server.url, http_client=h1)) as c1,
                        Client(streamable_http_client(server.url, http_client=h2)) as c2,
                        Client(streamable_http_client(server.url, http_client=h3)) as c3):
                ws_b = Path((await c2.call_tool("status", {})).structured_content["workspace"])
                (ws_b / "kernel.py").write_text("TIMES = {}\n")  # bob's edit in progress
                r = (await c1.call_tool("revert_to_best", {"reason": "alice gives up"})).structured_content
                s = [(await c.call_tool("status", {})).structured_content for c in (c1, c2, c3)]
                return r, s, ws_b

    r, (alice, bob, main_slot), ws_b = anyio.run(main)
    assert alice["workspace"].endswith("http@alice") and bob["workspace"].endswith("http@bob")
    assert main_slot["workspace"].endswith("worktrees/http")
    assert r["changed_files"] == [] and (ws_b / "kernel.py").read_text() == "TIMES = {}\n"  # bob's edit stays
    assert {s["slot"] for s in main_slot["slots"]} == {"main", "alice", "bob"}
