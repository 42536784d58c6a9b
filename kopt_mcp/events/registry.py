"""Every registered event kind: `TYPED` (the models, in registration order), `EVENTS` (kind -> model)
and `Event` (their union, discriminated on `event`, plus `Other`)."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar, Union, get_args

from pydantic import BaseModel, Discriminator, Tag

from kopt_mcp.events.base import Other, _Event
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

TYPED = (SessionStarted, Baseline, Attempt, Commit, CommitRefused, Revert, Stopped, Recovered, Snapshot,
         RunBenchmark, BaselineFailed, Trace, Warmup, GpuGate, LeaseHeld, Confirmation, SessionGain, BestMoved, DeviceLost, BenchmarkOutputs, CancelledOp, LeftoversEnded,
         StaleGitLocksRemoved, StateRestored, StopSummaryCommitFailed)
#: event kind -> its model
EVENTS: dict[str, type[_Event]] = {get_args(m.model_fields["event"].annotation)[0]: m for m in TYPED}


def _kind(v: Any) -> str:
    kind = v.get("event") if isinstance(v, dict) else getattr(v, "event", None)
    return kind if isinstance(kind, str) and kind in EVENTS else "other"


#: one ledger event: the typed model of its kind, or Other
_MEMBERS = tuple(Annotated[m, Tag(k)] for k, m in EVENTS.items()) + (Annotated[Other, Tag("other")],)
Event = Annotated[Union[_MEMBERS], Discriminator(_kind)]  # noqa: UP007 -- the members come from EVENTS

E = TypeVar("E", bound=BaseModel)
