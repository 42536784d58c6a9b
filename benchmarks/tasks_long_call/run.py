"""A long save_and_test as an MCP task over streamable HTTP, and a cancelled one (CPU only, real time).

Starts `kopt-mcp serve --http` on loopback over a toy repository in a temporary folder, records the
baseline, then, as a client that declares io.modelcontextprotocol/tasks (the raw JSON-RPC client of
tests/clients/tasks_ext.py, protocol 2026-07-28):

1. a candidate whose every benchmark run sleeps so that save_and_test takes about `--minutes`: the
   call answers at once with a task; the client polls tasks/get at the task's pollIntervalMs until
   the task completes (one line per minute of status messages is printed);
2. a second such candidate, cancelled with tasks/cancel after `--cancel-after` s: the task must end
   `cancelled` and every process of the run (found by its folder under KOPT_RUN_ROOT, psutil) must
   be gone within 30 s.

Prints a JSON summary (durations, polls, statuses, the verdict, processes left) and exits 1 when a
check fails. The 10-minute version the issue asks for:

    PYTHONPATH=$PWD python benchmarks/tasks_long_call/run.py --minutes 10
    PYTHONPATH=$PWD python benchmarks/tasks_long_call/run.py --minutes 0.5 --cancel-after 5   # a quick look
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx2
import psutil

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from kopt_mcp.testing.toy import make_toy_repo, set_kernel  # noqa: E402
from tests.app.test_http import free_port, kopt_cmd, start_server  # noqa: E402
from tests.clients.tasks_ext import RawClient  # noqa: E402

TOKEN = "tasks-benchmark-token-0123456789"


def run_processes(root: Path) -> list[int]:
    """Pids of processes whose working folder is under `root` (the runs' disposable checkouts)."""
    out = []
    for p in psutil.process_iter(["cwd"]):
        try:
            if (p.info["cwd"] or "").startswith(str(root) + "/"):
                out.append(p.pid)
        except psutil.Error:
            pass
    return out


async def poll(raw: RawClient, task: dict, until_s: float | None = None) -> tuple[dict, int, list[str]]:
    """Poll tasks/get at the task's interval until terminal (or `until_s` elapsed): (last state, polls, messages)."""
    t0, polls, messages, state = time.monotonic(), 0, [], task
    while state["status"] == "working" and (until_s is None or time.monotonic() - t0 < until_s):
        await anyio.sleep(state.get("pollIntervalMs", 2000) / 1000)
        state = (await raw.task("tasks/get", task["taskId"]))["result"]
        polls += 1
        if not messages or messages[-1] != state.get("statusMessage"):
            messages.append(state.get("statusMessage"))
        if polls % max(1, int(60_000 / state.get("pollIntervalMs", 2000))) == 0:
            print(f"  {time.monotonic() - t0:6.0f} s  {state['status']}: {state.get('statusMessage')}", flush=True)
    return state, polls, messages


async def main(args) -> int:
    work = Path(tempfile.mkdtemp(prefix="kopt-tasks-bench-"))
    runs = work / "runs"
    env = {**os.environ, "KOPT_MCP_TOKEN": TOKEN, "KOPT_RUN_ROOT": str(runs), "KOPT_LEASE_DIR": str(work / "leases")}
    repo = make_toy_repo(work / "repo", {"1": 100.0, "2": 200.0}, timeout_s=args.minutes * 60 + 600)
    port = free_port()
    server = start_server([*kopt_cmd(), "serve", "--http", "--repo", str(repo), "--tag", "tasks", "--port", str(port),
                           "--host", "127.0.0.1"], port, work / "logs", env)
    summary: dict = {"minutes": args.minutes, "work": str(work)}
    ok = True
    try:
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as http:
            raw = RawClient(http, server.url)
            base = await raw.call_tool("run_benchmark")
            assert base["result"]["resultType"] == "task", base
            await poll(raw, base["result"])
            ws = Path((await raw.call_tool("status"))["result"]["structuredContent"]["workspace"])
            # a clear win runs the candidate twice (a paired round, then the confirming one; the toy BEST
            # does not sleep), so each candidate run sleeps half the time asked for
            set_kernel(ws, {"1": 50.0, "2": 100.0}, SLEEP_S=args.minutes * 60 / 2)
            t0 = time.monotonic()
            created = (await raw.call_tool("save_and_test", {"hypothesis": "twice as fast, slowly"}))["result"]
            answered = time.monotonic() - t0
            state, polls, messages = await poll(raw, created)
            summary["long"] = {"answered_s": round(answered, 2), "took_s": round(time.monotonic() - t0, 1),
                               "polls": polls, "status": state["status"], "status_messages": len(messages),
                               "verdict": (state.get("result") or {}).get("structuredContent", {}).get("verdict")}
            ok &= created["resultType"] == "task" and state["status"] == "completed"
            if state["status"] == "completed":
                await raw.call_tool("revert_to_best", {"reason": "benchmark: the next candidate is cancelled"})
            set_kernel(ws, {"1": 50.0, "2": 100.0}, SLEEP_S=args.minutes * 60)
            created = (await raw.call_tool("save_and_test", {"hypothesis": "cancelled"}))["result"]
            state, _, _ = await poll(raw, created, until_s=args.cancel_after)
            before = run_processes(runs)
            await raw.task("tasks/cancel", created["taskId"])
            state, _, _ = await poll(raw, {**state, "pollIntervalMs": 200})
            deadline = time.monotonic() + 30
            while run_processes(runs) and time.monotonic() < deadline:
                await anyio.sleep(0.2)
            left = run_processes(runs)
            summary["cancelled"] = {"status": state["status"], "processes_before": len(before),
                                    "processes_left": len(left)}
            ok &= state["status"] == "cancelled" and bool(before) and not left
    finally:
        server.stop()
    summary["ok"] = ok
    print(json.dumps(summary, indent=1))
    if ok:  # a failed run keeps its folder (server logs, the session's ledger) for a look
        shutil.rmtree(work, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="how long the long save_and_test should take")
    ap.add_argument("--cancel-after", type=float, default=30.0, help="seconds before the second task is cancelled")
    sys.exit(anyio.run(main, ap.parse_args()))
