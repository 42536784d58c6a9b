"""Typed ledger events: one pydantic model per event kind, one writer check, one reader.

Every line of `ledger.jsonl` is one event: `at` (UTC, ISO 8601), `event` (its kind), `id`, `prev`
(the hash chain, see kopt_mcp.ledger) and the kind's own fields. `EVENTS` maps each kind to its model;
`Event` is their union, discriminated on `event`, plus `Other`.

Writing (`ledger.new_record`, `Referee.record`, `Store.log`) goes through `check_record`:

- the kind must be in `EVENTS` (else LedgerEventError: register the model in registry.py first);
- every field is checked against the model in strict mode (a str is no number, a number no str);
- a top-level field the model does not declare is refused (`extra="forbid"`): a typo or a new
  field nobody declared is a bug in the writer, caught in the first test that writes it;
- the fields in the model's `required` must be given.

The one exception is `Store.log` with a kind that is NOT in `EVENTS`: a free-form diagnostic
(`Other`), checked only for being JSON. Nothing decides on those; every kind kopt_mcp itself
writes is registered (tests/test_events.py scans the source for them).

Nested payloads that are dumps of other modules' models (a class's change, the keep decision, the
device, a kernel row, the bottleneck) are typed on the fields readers use and allow the others
(`extra="allow"`): their producers own their shape.

Reading (`parse_event`, `as_events`, `Store.events()`) never raises and reads every version of the
ledger: fields a record lacks take their defaults (None, "", []), fields this version does not
declare are ignored (they stay in the file), a kind not in `EVENTS` reads as `Other`, and a record
that does not fit its model (edited by hand) reads as `Other` with `misfit` saying why. Readers
select events with `isinstance` (or `last(events, Trace)`), never by `.get()` on dicts.

Units: times and GPU time in us unless the field name says otherwise (`waited_s`, `cold_s`: s);
changes in % with + = better; metric values in the benchmark's own unit.

Layout, by event family: `base.py` (the bases and `Other`), `payloads.py` (nested payloads),
`transitions.py` (events of a state change), `measurements.py` and `housekeeping.py` (diagnostics),
`registry.py` (`TYPED`, `EVENTS`, `Event`), `codec.py` (the writer check and the reader). Every name is
importable from `kopt_mcp.events`.
"""


from __future__ import annotations

from kopt_mcp.events.base import Other, _Event, _OnSlot, _Payload
from kopt_mcp.events.codec import as_events, check_record, last, parse_event
from kopt_mcp.events.housekeeping import (
    BenchmarkOutputs,
    BestMoved,
    CancelledOp,
    DeviceLost,
    GpuGate,
    LeaseHeld,
    LeftoversEnded,
    StaleGitLocksRemoved,
    StateRestored,
    StopSummaryCommitFailed,
)
from kopt_mcp.events.measurements import (
    BaselineFailed,
    Confirmation,
    RunBenchmark,
    SessionGain,
    Snapshot,
    Trace,
    Warmup,
)
from kopt_mcp.events.payloads import (
    BottleneckRecord,
    ClassChange,
    DeviceRecord,
    FileChangeRecord,
    FunctionLine,
    GpuKeep,
    KernelLine,
    PerfRow,
)
from kopt_mcp.events.registry import EVENTS, TYPED, E, Event
from kopt_mcp.events.transitions import (
    Attempt,
    Baseline,
    Commit,
    CommitRefused,
    Recovered,
    Revert,
    SessionStarted,
    Stopped,
)

__all__ = [
    "EVENTS", "TYPED", "Attempt", "Baseline", "BaselineFailed", "BenchmarkOutputs", "BestMoved", "BottleneckRecord",
    "CancelledOp", "ClassChange", "Commit", "CommitRefused", "Confirmation", "DeviceLost", "DeviceRecord", "E",
    "Event", "FileChangeRecord", "FunctionLine", "GpuGate", "GpuKeep", "KernelLine", "LeaseHeld", "LeftoversEnded",
    "Other", "PerfRow", "Recovered", "Revert", "RunBenchmark", "SessionGain", "SessionStarted", "Snapshot",
    "StaleGitLocksRemoved", "StateRestored", "StopSummaryCommitFailed", "Stopped", "Trace", "Warmup", "_Event",
    "_OnSlot", "_Payload", "as_events", "check_record", "last", "parse_event",
]
