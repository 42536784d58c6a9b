"""Chaos on candidate slots (issue 13, done-when): three slot servers (`kopt-mcp serve --slot`,
subprocesses) measure at once; one is SIGKILLed while its benchmark runs. The other two finish
their verdicts and commits; the BEST line, best.json and every ledger stay consistent; the killed
slot's server restarts, archives the interrupted attempt, and the agent's re-applied patch is
judged and kept on top of the others' keeps."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import psutil
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from kopt_mcp.ledger import Store
from kopt_mcp.testing.toy import make_toy_repo

SLOTS = ("s1", "s2", "s3")
SPACER = "#\n#\n#\n"  # three lines between two classes' lines: their edits merge cleanly
SLEEP_S = 1.5  # each benchmark run sleeps this long: the window in which s2 is killed


def _kernel(values: dict[int, float]) -> str:
    return "TIMES = {}\nERRORS = {}\n" + f"SLEEP_S = {SLEEP_S}\n" + SPACER + SPACER.join(
        f'TIMES["{k}"] = {v}\n' for k, v in values.items())


def _set_line(ws: Path, k: int, value: float) -> None:
    p = ws / "kernel.py"
    p.write_text(re.sub(rf'^TIMES\["{k}"\] = .*$', f'TIMES["{k}"] = {value}', p.read_text(), flags=re.MULTILINE))


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout


def _params(repo: Path, slot: str) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if k != "KOPT_FAULT"}
    return StdioServerParameters(command=sys.executable, env=env, args=[
        "-m", "kopt_mcp.app.cli", "serve", "--repo", str(repo), "--tag", "t", "--slot", slot])


def _server_pid(slot: str) -> int:
    """The pid of this test's `kopt-mcp serve --slot <slot>` child (started by the mcp client)."""
    for p in psutil.Process().children(recursive=True):
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if "serve" in cmd and "--slot" in cmd and cmd[cmd.index("--slot") + 1] == slot:
            return p.pid
    raise AssertionError(f"no server process for slot {slot}")


def test_killing_one_of_three_slot_servers_mid_run_leaves_the_others_and_best_consistent(tmp_path, make_referee):
    repo = make_toy_repo(tmp_path / "repo", {"1": 1.0}, timeout_s=60)
    (repo / "kernel.py").write_text(_kernel({1: 100.0, 2: 200.0, 3: 300.0}))
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qam", "three classes")
    main = make_referee(repo)
    assert main.run_benchmark().ok  # the session's baseline; the slots adopt it
    root = repo / ".git" / "kopt" / "t"
    results: dict[str, object] = {}

    async def agent(slot: str, k: int) -> None:
        try:
            async with Client(_params(repo, slot)) as c:
                ws = Path((await c.call_tool("status", {})).structured_content["workspace"])
                _set_line(ws, k, 50.0 * k)  # 2x faster on its own class: a clear win
                v = (await c.call_tool("save_and_test", {"target": f"n={k}", "hypothesis": slot})).structured_content
                cm = (await c.call_tool("commit_improvement", {"message": slot})).structured_content
                results[slot] = (v["verdict"], cm["committed"])
        except Exception as e:  # noqa: BLE001 -- the killed server's client fails under it
            results[slot] = e

    async def killer() -> None:
        runs = root / "slots" / "s2" / "runs"
        while not (runs.exists() and any(runs.iterdir())):  # s2's first benchmark run has started
            await anyio.sleep(0.05)
        await anyio.sleep(0.3)
        pid = _server_pid("s2")
        os.kill(pid, signal.SIGKILL)
        results["killed_at"] = time.time()
        results["killed_pid"] = pid

    async def drive() -> None:
        with anyio.fail_after(300):
            async with anyio.create_task_group() as tg:
                for k, slot in enumerate(SLOTS, 1):
                    tg.start_soon(agent, slot, k)
                tg.start_soon(killer)

    anyio.run(drive)
    assert results["s1"] == ("improved", True) and results["s3"] == ("improved", True), results
    assert isinstance(results["s2"], BaseException), results["s2"]  # killed mid-run: no verdict
    state = json.loads((root / "slots" / "s2" / "state.json").read_text())
    assert state.get("in_progress", {}).get("tool") == "save_and_test"  # it died inside the job

    # the two survivors' keeps are on one linear line; best.json at its head
    line = _git(repo, "log", "--reverse", "--format=%s", "main..kernel-opt/t").splitlines()
    assert len(line) == 3 and line[0] == "kopt: baseline" and sorted(line[1:]) == ["s1", "s3"], line
    head = _git(repo, "rev-parse", "kernel-opt/t").strip()
    assert json.loads((root / "best.json").read_text())["commit"] == head

    async def restart() -> dict:
        with anyio.fail_after(180):
            async with Client(_params(repo, "s2")) as c:
                st = (await c.call_tool("status", {})).structured_content
                ws = Path(st["workspace"])
                patch = next((root / "slots" / "s2" / "attempts").glob("*-interrupted.patch"))
                await anyio.run_process(["git", "apply", str(patch)], cwd=ws, check=True)  # the agent redoes it
                v = (await c.call_tool("save_and_test", {"target": "n=2", "hypothesis": "s2 again"})).structured_content
                cm = (await c.call_tool("commit_improvement", {"message": "s2"})).structured_content
                return {"status": st, "verdict": v["verdict"], "committed": cm["committed"]}

    out = anyio.run(restart)
    assert out["status"]["phase"] == "ready" and out["verdict"] == "improved" and out["committed"], out
    events = Store(root / "slots" / "s2").ledger()
    assert [e["verdict"] for e in events if e["event"] == "attempt"] == ["interrupted", "improved"]
    assert any(e["event"] == "recovered" for e in events)

    line = _git(repo, "log", "--reverse", "--format=%s", "main..kernel-opt/t").splitlines()
    assert line[:3] == _git(repo, "log", "--reverse", "--format=%s", f"main..{head}").splitlines() and line[3] == "s2"
    assert _git(repo, "rev-list", "--merges", "kernel-opt/t").strip() == ""
    head = _git(repo, "rev-parse", "kernel-opt/t").strip()
    assert json.loads((root / "best.json").read_text())["commit"] == head
    text = _git(repo, "show", "kernel-opt/t:kernel.py")
    assert all(f'TIMES["{k}"] = {50.0 * k}' in text for k in (1, 2, 3))  # all three keeps on the line
    perf = _git(repo, "show", "kernel-opt/t:performance.md")
    assert perf.count("| keep |") == 3 * 3 and perf.count("| baseline |") == 3  # 3 keeps x 3 classes
    for d in [root, *(root / "slots" / s for s in SLOTS)]:
        store = Store(d)
        store.load_state_json()
        assert store.verify() == [], d
    assert main.run_benchmark().ok and main.books.state.best.commit == head  # the main slot follows
    assert not psutil.pid_exists(results["killed_pid"]) or psutil.Process(results["killed_pid"]).status() == "zombie"
