"""referee.cancel_all (what a stdio server does when its client goes away, app/stdio.py): every
operation of the process, running or waiting for the session lock, ends; a waiting one never starts."""

from __future__ import annotations

import threading
import time

from kopt_mcp.errors import Cancelled
from kopt_mcp.referee import cancel_all, running_count
from kopt_mcp.testing.toy import set_kernel


def test_a_running_and_a_waiting_operation_both_end(ref):
    set_kernel(ref.where.workspace_path, {"1": 50.0, "2": 100.0}, SLEEP_S=120)  # a 2-minute candidate run
    out: dict[str, BaseException | object] = {}

    def call(name, fn):
        try:
            out[name] = fn()
        except BaseException as e:  # noqa: BLE001 -- the test inspects it
            out[name] = e

    running = threading.Thread(target=call, args=("save", lambda: ref.save_and_test("global", "slow")))
    running.start()
    deadline = time.monotonic() + 30
    while not list(ref.books.store.runs.glob("0001-candidate*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    waiting = threading.Thread(target=call, args=("bench", ref.run_benchmark))  # queued behind the lock
    waiting.start()
    while running_count() < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cancel_all() == 2
    running.join(20)
    waiting.join(20)
    assert isinstance(out["save"], Cancelled) and isinstance(out["bench"], Cancelled)
    assert "before it started" in str(out["bench"])
    assert running_count() == 0
    assert [e["verdict"] for e in ref.books.store.ledger() if e["event"] == "attempt"] == ["cancelled"]
