"""The one writer check (`check_record`) and the one reader (`parse_event`, `as_events`, `last`) of
ledger records; the rules they keep are in kopt_mcp/events/__init__.py's docstring."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import PurePath
from typing import Any

from pydantic import BaseModel, ValidationError

from kopt_mcp.errors import LedgerEventError
from kopt_mcp.events.base import Other
from kopt_mcp.events.registry import EVENTS, E

# -- writing ----------------------------------------------------------------------------------


def _jsonable(v: Any) -> Any:
    """json.dumps' fallback for the few non-JSON values writers pass: paths, pydantic models."""
    if isinstance(v, PurePath):
        return str(v)
    if isinstance(v, BaseModel):
        return v.model_dump(mode="json")
    if isinstance(v, (set, frozenset)):
        return sorted(v)
    raise TypeError(f"{type(v).__name__} is not JSON: pass a str, number, bool, list or dict")


def check_record(record: dict, free_form: bool = False) -> dict:
    """`record` (with `event`) as the JSON-ready dict the ledger stores, after checking it against
    its kind's model (see the module docstring). `free_form`: a kind not in EVENTS is accepted as a
    diagnostic (Store.log). Raises LedgerEventError naming the kind and the bad field."""
    kind = record.get("event")
    try:
        line = json.dumps(record, default=_jsonable)
    except (TypeError, ValueError) as e:
        raise LedgerEventError(f"ledger event {kind!r}: a field is not JSON ({e})") from e
    model = EVENTS.get(kind) if isinstance(kind, str) else None
    if model is None:
        if free_form and isinstance(kind, str) and kind:
            return json.loads(line)
        raise LedgerEventError(f"unknown ledger event {kind!r}: declare its model in kopt_mcp/events/ "
                               f"(EVENTS), or write a free-form diagnostic with Store.log")
    missing = [f for f in model.required if f not in record]
    if missing:
        raise LedgerEventError(f"ledger event {kind!r} lacks required field(s) {', '.join(missing)}")
    try:
        model.model_validate_json(line, strict=True)
    except ValidationError as e:
        bad = "; ".join(f"{'.'.join(map(str, x['loc'])) or '(record)'}: {x['msg']}" for x in e.errors()[:5])
        raise LedgerEventError(f"ledger event {kind!r} does not fit {model.__name__}: {bad}") from e
    return json.loads(line)


# -- reading ----------------------------------------------------------------------------------


def parse_event(raw: Any) -> BaseModel | None:
    """One ledger record (a dict as read from the file, or an event already parsed) as its typed
    event, `Other` for an unregistered kind or a record that does not fit (with `misfit`), or
    None when `raw` is no record at all (not a dict). Never raises."""
    if isinstance(raw, BaseModel):
        return raw
    if not isinstance(raw, dict):
        return None
    model = EVENTS.get(raw.get("event")) if isinstance(raw.get("event"), str) else None
    if model is None:
        return _other(raw)
    try:
        return model.model_validate(raw, context={"read": True})
    except ValidationError as e:
        bad = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors()[:3])
        return _other({**raw, "misfit": f"does not fit {model.__name__}: {bad}"})


def _other(raw: dict) -> Other:
    try:
        return Other.model_validate(raw)
    except ValidationError as e:  # a `misfit` field of another type, keys that are no names
        return Other(event=raw.get("event"), misfit=f"unreadable record: {e.errors()[0]['msg']}")


def as_events(records: Iterable[Any] | None) -> list:
    """`parse_event` of each record, oldest first; entries that are no record are skipped."""
    return [e for e in map(parse_event, records or []) if e is not None]


def last(events: Iterable[Any], kind: type[E]) -> E | None:
    """The newest event of model `kind` (e.g. `Trace`) among `events` (oldest first), or None."""
    found = None
    for e in events:
        if isinstance(e, kind):
            found = e
    return found
