"""A stdio server whose client goes away ends its runs and exits (DESIGN.md: nothing outlives the
client): the real `kopt-mcp serve` in a subprocess, a save_and_test running a slow benchmark, then the
client's end of stdin closed (and, as a killed client leaves it, of stdout too). The server and every
process of the benchmark's tree must be gone within seconds, and the attempt recorded as cancelled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from kopt_mcp.paths import session_dir
from kopt_mcp.testing.toy import kernel_source, make_toy_repo

GONE_WITHIN_S = 8.0  # the runner's kill is immediate; a loaded 2-core machine gets some slack


class RawClient:
    """MCP over the server's stdin/stdout as JSON lines (no SDK: the test decides when each end closes)."""

    def __init__(self, repo: Path, env: dict[str, str]):
        self.proc = subprocess.Popen([sys.executable, "-m", "kopt_mcp.app.cli", "serve", "--repo", str(repo),
                                      "--tag", "eof"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env)
        self.next_id = 0

    def send(self, method: str, params: dict | None = None, notify: bool = False) -> int | None:
        msg: dict = {"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})}
        if not notify:
            self.next_id += 1
            msg["id"] = self.next_id
        self.proc.stdin.write((json.dumps(msg) + "\n").encode())
        self.proc.stdin.flush()
        return msg.get("id")

    def reply(self, rid: int, timeout_s: float = 120.0) -> dict:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            line = self.proc.stdout.readline()
            assert line, "the server closed stdout"
            msg = json.loads(line)
            if msg.get("id") == rid:
                return msg
        raise AssertionError(f"no reply to request {rid}")

    def call(self, name: str, args: dict | None = None) -> dict:
        rid = self.send("tools/call", {"name": name, "arguments": args or {}})
        return self.reply(rid)["result"]


def _cmdline(p: psutil.Process) -> str:
    """The process's command line, or "" once it has exited or is a zombie (a child of the
    setup steps can exit between children() and cmdline(); CI hit that on 2026-12-02)."""
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def _benchmark_procs(server: psutil.Process, timeout_s: float = 60.0) -> list[psutil.Process]:
    """The server's descendants once `python bench.py` runs among them."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        kids = server.children(recursive=True)
        if any("bench.py" in _cmdline(k) for k in kids):
            return kids
        time.sleep(0.1)
    raise AssertionError("the benchmark never started")


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.parametrize("closed", ["stdin", "stdin and stdout"])
def test_closing_stdin_ends_the_running_benchmark_and_the_server(tmp_path, lease_dir, closed):
    repo = make_toy_repo(tmp_path / "repo", {"1": 100.0})
    c = RawClient(repo, {**os.environ, "KOPT_LEASE_DIR": str(lease_dir)})
    server = psutil.Process(c.proc.pid)
    procs: list[psutil.Process] = []
    try:
        c.reply(c.send("initialize", {"protocolVersion": "2025-06-18", "capabilities": {},
                                      "clientInfo": {"name": "eof-test", "version": "0"}}))
        c.send("notifications/initialized", notify=True)
        assert c.call("run_benchmark")["structuredContent"]["baseline_recorded"]
        workspace = repo / ".kopt" / "worktrees" / "eof"
        (workspace / "kernel.py").write_text(kernel_source({"1": 50.0}, SLEEP_S=120))  # a 2-minute benchmark
        c.send("tools/call", {"name": "save_and_test", "arguments": {"hypothesis": "slow"}})
        procs = _benchmark_procs(server)
        c.proc.stdin.close()
        if closed == "stdin and stdout":
            c.proc.stdout.close()
        end = time.monotonic() + GONE_WITHIN_S
        while (c.proc.poll() is None or _alive(procs)) and time.monotonic() < end:
            time.sleep(0.1)
        assert c.proc.poll() is not None, f"the server still runs {GONE_WITHIN_S} s after its stdin closed"
        assert _alive(procs) == [], [_cmdline(p) for p in _alive(procs)]
        ledger = (session_dir(repo, "eof") / "ledger.jsonl").read_text().splitlines()
        attempts = [json.loads(x) for x in ledger if '"event": "attempt"' in x or '"event":"attempt"' in x]
        assert [a["verdict"] for a in attempts] == ["cancelled"]  # the operation unwound before the exit
    finally:
        for p in [server, *procs]:
            try:
                p.kill()
            except psutil.Error:
                pass
