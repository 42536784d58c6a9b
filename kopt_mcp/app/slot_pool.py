"""Candidate slots of a streamable-HTTP server (referee/slots.py): one per HTTP client.

A client names its slot with the header `Kopt-Slot: NAME` (e.g. in its MCP config's `headers`):
its own workspace, repair counter and pending verdict, opened on its first tool call and resumed
after a restart; `main` (or no header) is the session opened at start. Where the protocol has
sessions (`Mcp-Session-Id`, protocol versions before 2026), each session without the header gets
a fresh slot (`http-1`, `http-2`, ...; the first session the main one). stdio serves one client: no pool.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable

from kopt_mcp.referee import Referee


class SlotPool:
    """Maps MCP session keys (the `Mcp-Session-Id`, any hashable) to Referees. `main`: the
    session's main slot; `open_slot(name)`: opens candidate slot `name` (raises what Referee
    raises: the caller's tool call gets that error)."""

    def __init__(self, main: Referee, open_slot: Callable[[str], Referee]) -> None:
        self.main = main
        self._open = open_slot
        self._by: dict[Hashable, Referee] = {}
        self._made: list[Referee] = []
        self._mutex = threading.Lock()

    def for_session(self, key: Hashable) -> Referee:
        """The Referee of session `key`'s slot (the same one for every call of that session)."""
        with self._mutex:
            ref = self._by.get(key)
            if ref is None:
                if not self._by:
                    ref = self.main
                else:
                    n = sum(1 for r in self._made if (r.where.slot or "").startswith("http-"))
                    ref = self._open(f"http-{n + 1}")
                    self._made.append(ref)
                self._by[key] = ref
            return ref

    def named(self, name: str) -> Referee:
        """The Referee of slot `name` (`main`: the main slot), opened on first use. Raises
        ValueError for a bad name, RefereeError when another process holds that slot."""
        with self._mutex:
            if name == "main":
                return self.main
            ref = next((r for r in self._made if r.where.slot == name), None)
            if ref is None:
                ref = self._open(name)
                self._made.append(ref)
            return ref

    def close(self) -> None:
        """Close every slot this pool opened (not the main one: its owner closes it)."""
        for ref in self._made:
            ref.close()
