"""Heartbeat for long tool calls: progress notifications at least every `interval_s` while the referee works.

MCP clients time a request out after a fixed time (60 s in the TypeScript SDK and the Inspector)
unless progress notifications arrive and the client resets its timer on them
(`resetTimeoutOnProgress`). The referee reports a step only when one begins (a benchmark run, a
profile, a GPU poll every `gpu_poll_s`), and one step can take many minutes. The heartbeat is an
anyio task that runs beside the worker thread of one tool call (started by `_adapter.call`): it
re-sends the latest referee step with the elapsed time every `interval_s` seconds, and sends every
new step at once, until the worker returns; then it sends progress == total.

Progress values (what `ProgressScale` computes):
- strictly increasing with every notification, as MCP requires;
- a referee step `(done, total)` maps to `offset + done`; between steps the value creeps towards
  `offset + done + 1` (`done + e/(e + tau)` after `e` seconds on the step), never reaching it;
- a new stage (the referee's total changes, or `done` goes back, e.g. a GPU wait counted in
  seconds followed by benchmark runs counted in runs) continues above the last value sent:
  `offset` = the next whole number, and the total sent is `offset + total`;
- the last notification of a call has progress == total.

The interval is `KOPT_MCP_HEARTBEAT_S` seconds (default 5; clients time out after 60 s, and the
project promises at most 10 s between notifications).
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, TypeVar

import anyio
import anyio.from_thread

from kopt_mcp.app.logs import send_log
from kopt_mcp.app.tasks import current_task

T = TypeVar("T")
log = logging.getLogger("kopt_mcp.progress")

INTERVAL_ENV = "KOPT_MCP_HEARTBEAT_S"
DEFAULT_INTERVAL_S = 5.0
CREEP_TAU_S = 30.0  # after 30 s on a step the value is halfway to the next step, after 270 s 90%

Send = Callable[[float, float, str], Awaitable[None]]
Phase = Callable[[str], Awaitable[None]]


def interval_from_env() -> float:
    """Seconds between heartbeats from `KOPT_MCP_HEARTBEAT_S` (default 5). Raises ValueError unless 0 < s <= 10."""
    raw = os.environ.get(INTERVAL_ENV, "").strip()
    if not raw:
        return DEFAULT_INTERVAL_S
    s = float(raw)
    if not 0 < s <= 10:
        raise ValueError(f"{INTERVAL_ENV}={raw!r}: give seconds between heartbeats, more than 0 and at most 10 "
                         "(clients time out after 60 s without progress)")
    return s


class ProgressScale:
    """Maps the referee's steps `(done, total)` onto one strictly increasing progress value per call.

    `step(done, total, now)` records a step (now in seconds, any monotonic clock);
    `value(now)` -> (progress, total) for the next notification, strictly above the last one;
    `final()` -> (progress, total) with progress == total, strictly above the last one.
    """

    def __init__(self, tau_s: float = CREEP_TAU_S) -> None:
        self.tau_s = tau_s
        self.offset = 0.0
        self.done = 0.0
        self.total = 1.0  # before the referee's first step: one step, "starting"
        self.step_start: float | None = None
        self.last: float | None = None
        self.real = False  # a referee step has been recorded

    def step(self, done: float, total: float, now: float) -> None:
        """Record the referee's step `done` of `total` (same units as the referee's callback)."""
        total = max(float(total), float(done), 0.0)
        new_stage = not self.real or total != self.total or done < self.done
        if new_stage:
            self.offset = 0.0 if self.last is None else math.floor(self.last) + 1.0
            self.total = total
        if new_stage or done != self.done or self.step_start is None:
            self.step_start = now  # the same step reported again keeps creeping from where it was
        self.done = float(done)
        self.real = True

    def value(self, now: float) -> tuple[float, float]:
        """(progress, total) for a notification sent at `now`."""
        if self.step_start is None:
            self.step_start = now
        e = max(0.0, now - self.step_start)
        p = self.offset + self.done + e / (e + self.tau_s)
        return self._emit(p), self.offset + self.total

    def final(self) -> tuple[float, float]:
        """(progress, total) with progress == total for the call's last notification."""
        p = self._emit(self.offset + self.total)
        return p, p

    def _emit(self, p: float) -> float:
        if self.last is not None and p <= self.last:
            p = math.nextafter(self.last, math.inf)
        self.last = p
        return p


@dataclass
class _Latest:
    done: float = 0.0
    total: float = 1.0
    message: str = "starting"
    at: float = 0.0
    seq: int = 0


class Heartbeat:
    """One tool call's progress pump.

    `update(done, total, message)` is the referee's progress callback (called from the worker
    thread; never blocks on the client). `run()` is the anyio task: it sends each new step at
    once (and announces it through `phase`, e.g. an MCP log message) and re-sends the latest one
    every `interval_s` seconds with the elapsed time; cancel it when the worker returns, then
    await `finish()` for the final progress == total. `send(progress, total, message)` errors are
    swallowed: a client that went away must not break the measurement.
    """

    def __init__(self, send: Send, what: str, interval_s: float | None = None, phase: Phase | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.send, self.what, self.phase, self.clock = send, what, phase, clock
        self.interval_s = interval_s if interval_s is not None else interval_from_env()
        self.scale = ProgressScale()
        self.started = clock()
        self._latest = _Latest(at=self.started)
        self._phases: list[str] = []  # step messages not yet announced (two quick steps are both logged)
        self._lock = threading.Lock()
        self._wake = anyio.Event()
        self._sent_seq = 0
        self.sent = 0  # notifications sent (for tests and the log)

    def update(self, done: float, total: float, message: str) -> None:
        """The referee's progress callback: record step `done` of `total` and wake the pump."""
        with self._lock:
            self._latest = _Latest(done, total, message, self.clock(), self._latest.seq + 1)
            self._phases.append(message)
        try:
            anyio.from_thread.run_sync(lambda: self._wake.set())
        except Exception:  # noqa: BLE001 - no event loop to wake (direct call, server gone): the next tick finds it
            pass

    async def run(self) -> None:
        """Send progress until cancelled: each new step at once, the latest again every interval_s."""
        while True:
            with anyio.move_on_after(self.interval_s):
                await self._wake.wait()
            self._wake = anyio.Event()  # before reading: an update after this line wakes the next wait
            await self._beat()

    async def finish(self) -> None:
        """The call's last notification: progress == total, message 'done after N s'."""
        await self._beat()  # a step reported just before the worker returned is not lost
        p, total = self.scale.final()
        await self._send(p, total, f"{self.what}: done after {self.clock() - self.started:.0f} s")

    async def _beat(self) -> None:
        with self._lock:
            latest, phases, self._phases = self._latest, self._phases, []
        now = self.clock()
        fresh = latest.seq != self._sent_seq
        if fresh:
            self._sent_seq = latest.seq
            self.scale.step(latest.done, latest.total, latest.at)
        for message in phases:
            log.info("%s: %s", self.what, message)
            if self.phase is not None:
                try:
                    await self.phase(message)
                except Exception:  # noqa: BLE001 - logging to a client that went away
                    pass
        p, total = self.scale.value(now)
        message = (f"{latest.message} [{now - latest.at:.0f} s on this step, "
                   f"{now - self.started:.0f} s since {self.what} began]")
        if not fresh:
            log.debug("%s: %s", self.what, message)
        await self._send(p, total, message)

    async def _send(self, p: float, total: float, message: str) -> None:
        try:
            await self.send(p, total, message)
            self.sent += 1
        except Exception:  # noqa: BLE001 - a client that went away must not break the measurement
            pass


def for_call(ctx: Any, fn: Callable[..., Any]) -> Heartbeat:
    """A Heartbeat for one tool call: progress through `ctx.report_progress` (a no-op when the client
    sent no progress token), each new step also as an MCP log message at level info. A call running
    as an MCP task (app/tasks.py) reports into the task instead: its status message and progress
    (the extension has no progress or log notifications)."""
    async def phase(message: str) -> None:
        await send_log(ctx, "info", message)

    what = getattr(fn, "__name__", None) or "the tool call"
    try:
        interval = interval_from_env()
    except ValueError as e:  # a bad setting must not fail the tool call: say so, use the default
        log.warning("%s; using %g s", e, DEFAULT_INTERVAL_S)
        interval = DEFAULT_INTERVAL_S
    task = current_task()
    if task is not None:
        return Heartbeat(task.report, what, interval_s=interval)
    return Heartbeat(ctx.report_progress, what, interval_s=interval, phase=phase)


async def run_beside(beat: Heartbeat | None, work: Callable[[], Awaitable[T]]) -> T:
    """Await `work()` while `beat` pumps progress; on success send the final progress == total.

    Exceptions of `work()` propagate unchanged (not wrapped in an ExceptionGroup); cancellation too.
    """
    if beat is None:
        return await work()
    error: Exception | None = None
    async with anyio.create_task_group() as tg:
        tg.start_soon(beat.run)
        try:
            result = await work()
        except Exception as e:  # noqa: BLE001 - re-raised below, outside the task group
            error = e
        finally:
            tg.cancel_scope.cancel()
    if error is not None:
        raise error
    await beat.finish()
    return result
