"""Cancellation: a cancelled call kills the running process tree, releases the lease and leaves
the session as it was before the call."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import psutil
import pytest
from mcp import Client

from kopt_mcp.app.server import build_server
from kopt_mcp.testing.toy import set_kernel

pytestmark = pytest.mark.anyio


def _benchmarks_running(root: Path) -> list[psutil.Process]:
    """Toy benchmarks running in a disposable checkout under `root` (KOPT_RUN_ROOT)."""
    out = []
    for p in psutil.process_iter(["cmdline", "cwd"]):
        try:
            if (p.info["cwd"] or "").startswith(str(root) + "/") and "bench.py" in " ".join(p.info["cmdline"] or []):
                out.append(p)
        except psutil.Error:
            pass
    return out


async def _wait_until(pred, timeout_s: float = 20.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return True
        await anyio.sleep(0.1)
    return False


async def test_cancelled_save_and_test_kills_the_run_and_changes_nothing(ref, tmp_path, monkeypatch):
    runs = tmp_path / "runs"  # every run happens in a disposable checkout under KOPT_RUN_ROOT
    monkeypatch.setenv("KOPT_RUN_ROOT", str(runs))
    server = build_server(ref)
    ws = ref.where.workspace_path
    set_kernel(ws, {"1": 50.0, "2": 100.0}, SLEEP_S=300)
    before = ref.status()
    async with Client(server) as c:
        async with anyio.create_task_group() as tg:
            tg.start_soon(c.call_tool, "save_and_test", {"target": "global", "hypothesis": "hangs"})
            assert await _wait_until(lambda: _benchmarks_running(runs))
            tg.cancel_scope.cancel()
        assert await _wait_until(lambda: not _benchmarks_running(runs)), "the benchmark survived the cancel"
        assert await _wait_until(lambda: ref.lock.acquire(blocking=False))  # the worker unwound
        ref.lock.release()
        after = (await c.call_tool("status", {})).structured_content
    assert after["phase"] == before.phase and after["best_commit"] == before.best_commit
    assert after["consecutive_regressions"] == before.consecutive_regressions
    assert "SLEEP_S = 300" in (ws / "kernel.py").read_text()  # the candidate is still in place
    assert ref.jobs.job is None and ref.jobs.executor.held == []  # the job lease released
    assert list(ref.books.store.attempts.glob("*-cancelled.patch"))  # and its diff archived
    records = [(e["verdict"], e["code"]) for e in ref.books.store.ledger() if e["event"] == "attempt"]
    assert records == [("cancelled", "cancelled")]
    assert list(runs.iterdir()) == []  # the run's checkout is removed
