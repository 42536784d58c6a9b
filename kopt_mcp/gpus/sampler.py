"""A sampler thread beside one measured run: the SM clock (kopt_mcp.gpus.clocks.ClockSampler) and the
device's foreign load (kopt_mcp.gpus.load) are both read from the referee's process, never from the
benchmark's, so nothing the benchmark does can write their figures."""

from __future__ import annotations

import threading


class PeriodicSampler:
    """A daemon thread calling `_read()` at `__enter__`, then every `period_s` s until `__exit__`, and
    once more at the exit where `read_at_exit`. A read that raises ends the sampling, never the run:
    `error` says why, and what was read before stays. `reads`: the reads that succeeded."""

    read_at_exit = True

    def __init__(self, period_s: float, name: str) -> None:
        self.period_s, self._name = float(period_s), name
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: str | None = None
        self.reads = 0

    def _read(self) -> None:
        raise NotImplementedError

    def _safe_read(self) -> bool:
        if self.error is not None:
            return False
        try:
            self._read()
        except Exception as e:  # noqa: BLE001 - a failing device read must never fail the run
            self.error = f"{type(e).__name__}: {e}"
            return False
        self.reads += 1
        return True

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            if not self._safe_read():
                return

    def __enter__(self):
        self._safe_read()
        self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if self.read_at_exit:
            self._safe_read()
