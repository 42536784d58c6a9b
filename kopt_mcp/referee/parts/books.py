"""The session's books: its state (state.json) and its hash-chained ledger, committed together.

Crash consistency (referee/core.py tells the whole story): `record` queues a transition's ledger
records in `state.outbox`; `save` writes state.json with them in one atomic rename (the commit
point), then appends them to the ledger (`flush_outbox`)."""

from __future__ import annotations

import json

from kopt_mcp.errors import StateSaveError
from kopt_mcp.ledger import Store, new_record
from kopt_mcp.session import SessionState
from kopt_mcp.testing import faults


class Books:
    """`state` (kopt_mcp.session.SessionState: phase, BEST, counters, the queued records), its
    `store` (kopt_mcp.ledger.Store: state.json, ledger.jsonl, attempts/, runs/ in the state folder)
    and `problems`: what recovery or a run found and could not fix (shown by status). The state
    object is changed in place, never replaced (callers hold references to it)."""

    def __init__(self, store: Store, state: SessionState, problems: list[str] | None = None) -> None:
        self.store = store
        self.state = state
        self.problems: list[str] = problems if problems is not None else []

    def record(self, event: str, **fields) -> dict:
        """Queue a ledger record of the current transition; `save()` commits it with the state."""
        rec = new_record(event, **fields)
        self.state.outbox.append(json.loads(json.dumps(rec, default=str)))
        return self.state.outbox[-1]

    def save(self) -> None:
        """The commit point: write the state (with its queued ledger records) atomically, then
        append those records to the ledger. On OSError the in-memory state is rolled back to the
        last saved one and StateSaveError says what to do."""
        try:
            self.store.save_state(self.state)
        except OSError as e:
            self._rollback()
            raise StateSaveError(
                f"could not save the session state to {self.store.state_path} ({e}): nothing changed. Free "
                "disk space or fix the folder's permissions, then call again (the interrupted job is "
                "recovered first)") from e
        faults.point("state.after_save")
        self.flush_outbox()

    def _rollback(self) -> None:
        """Put the in-memory state back to the last saved one (in place: callers hold references)."""
        if self.store.last_saved is None:
            return
        saved = SessionState.model_validate({k: v for k, v in self.store.last_saved.items() if k != "ledger_anchor"})
        saved.outbox = [r for r in saved.outbox if not self.store.has_record(r.get("id", ""))]  # already appended
        for name in SessionState.model_fields:
            setattr(self.state, name, getattr(saved, name))

    def flush_outbox(self) -> None:
        """Append the committed records the ledger lacks (by `id`), then clear the outbox. A record
        that cannot be written stays queued (a problem is listed) and is retried at the next save."""
        for rec in list(self.state.outbox):
            if not self.store.has_record(rec.get("id", "")):
                try:
                    self.store.append(rec)
                except OSError as e:
                    self.problems.append(f"a ledger record ({rec.get('event')}) could not be appended ({e}); "
                                         "it stays queued in state.json and is retried at the next save")
                    return
            self.state.outbox.remove(rec)
