"""`kopt-mcp init`'s time budget and its progress lines on stderr.

On an H200 (issue 35) init printed nothing for 560 s on Liger-Kernel's SwiGLU benchmark and was
still running when the user's own limit ended it. Now every step (a benchmark run, a run of the
tests, the profiled run) is announced, ticks while it runs (a live line on a terminal, a line every
HEARTBEAT_S otherwise) and ends with its wall time; after the first benchmark run each later one
says how long the rest should take. `Budget` is the whole of init's time: each step's subprocess
gets the budget left as its time limit (kopt_mcp/bench/runner.py kills the whole process tree at
that limit), so no step runs past it; what a spent budget leaves unchecked is marked NOT CHECKED in
the proposal with the command to run by hand.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape

#: default budget (s) of the whole of init
DEFAULT_BUDGET_S = 600.0
#: default limit (s) of each of init's runs of the correctness tests: half the budget, so a long test file
#: is cut by its own limit, and stands for the tests it finished, before the budget ends init (the
#: proposed command runs once per candidate: it should not take more)
DEFAULT_TESTS_TIMEOUT_S = 300.0
#: seconds between progress lines of a running step where stderr is no terminal
HEARTBEAT_S = 15.0
#: below this many seconds of budget a step is not started: it could not finish
MIN_STEP_S = 1.0


class Budget:
    """The seconds init may take in all (`total_s`), counted from construction (monotonic clock)."""

    def __init__(self, total_s: float = DEFAULT_BUDGET_S) -> None:
        if total_s <= 0:
            raise ValueError(f"the budget must be positive seconds, got {total_s:g}: pass --budget S")
        self.total_s = float(total_s)
        self.t0 = time.monotonic()
        #: what the budget left unchecked: (what, the command to run by hand or '')
        self.unchecked: list[tuple[str, str]] = []

    def spent(self) -> float:
        """Seconds since init started."""
        return time.monotonic() - self.t0

    def left(self) -> float:
        """Seconds left (never below 0)."""
        return max(0.0, self.total_s - self.spent())

    def limit(self, step_s: float) -> float:
        """The time limit (s) of a step whose own limit is `step_s`: the smaller of it and what is left."""
        return min(step_s, self.left())

    def can_start(self, expected_s: float = 0.0) -> bool:
        """True when at least MIN_STEP_S and `expected_s` (the step's expected seconds) are left."""
        return self.left() >= max(MIN_STEP_S, expected_s)

    def not_checked(self, what: str, command: str = "") -> None:
        """Record that the budget left `what` unchecked (`command`: how to check it by hand)."""
        self.unchecked.append((what, command))


class Progress:
    """Progress lines on stderr (rich). `quiet` prints nothing (tests that read stdout only)."""

    def __init__(self, budget: Budget, console: Console | None = None, quiet: bool = False,
                 heartbeat_s: float = HEARTBEAT_S) -> None:
        self.budget = budget
        self.console = console or Console(stderr=True, soft_wrap=True, highlight=False)
        self.quiet = quiet
        self.heartbeat_s = heartbeat_s

    def say(self, text: str) -> None:
        """One line: `[init 12s]` and `text`."""
        if not self.quiet:
            self.console.print(f"[dim]\\[init {self.budget.spent():.0f}s][/dim] {escape(text)}")

    @contextmanager
    def step(self, label: str, detail: Callable[[], str] | None = None) -> Iterator[None]:
        """Announce `label`, tick while the block runs (elapsed s, budget left, and `detail()` such
        as a running test count), and say its wall time when it ends."""
        t0 = time.monotonic()
        self.say(f"{label} (budget left {self.budget.left():.0f} s)")
        stop = threading.Event()

        def line() -> str:
            extra = ""
            if detail is not None:
                try:
                    extra = detail()
                except Exception:  # a progress detail never breaks init
                    extra = ""
            return (f"  ... {label}: {time.monotonic() - t0:.0f} s, budget left {self.budget.left():.0f} s"
                    + (f"; {extra}" if extra else ""))

        def tick() -> None:
            if self.console.is_terminal:
                with self.console.status(escape(line())) as status:
                    while not stop.wait(1.0):
                        status.update(escape(line()))
            else:
                while not stop.wait(self.heartbeat_s):
                    self.console.print(escape(line()))

        thread = None if self.quiet else threading.Thread(target=tick, daemon=True)
        if thread:
            thread.start()
        try:
            yield
        finally:
            stop.set()
            if thread:
                thread.join(timeout=5)
            self.say(f"{label}: done in {time.monotonic() - t0:.1f} s")
