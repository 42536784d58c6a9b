"""The bases every ledger event and nested payload model derives from, and `Other` (a record of no
registered kind, or one that does not fit its model)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator


class _Payload(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class _Event(BaseModel):
    """Fields every record has. `id` and `prev` are absent in ledgers written before the hash
    chain (None when read)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    #: fields a writer must give (checked when written, not when read: old ledgers may lack them)
    required: ClassVar[tuple[str, ...]] = ()

    at: str = ""
    id: str | None = None
    prev: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _ignore_unknown_when_reading(cls, data: Any, info) -> Any:
        if isinstance(data, dict) and isinstance(info.context, dict) and info.context.get("read"):
            return {k: v for k, v in data.items() if k in cls.model_fields}
        return data


class _OnSlot(_Event):
    """A record of one run or attempt: the candidate slot it belongs to and the device it ran on
    (e.g. "nvidia:0:GPU-<uuid>"); None in single-slot sessions and older ledgers."""

    slot: str | None = None
    device: str | None = None


class Other(BaseModel):
    """A record of a kind not in EVENTS (a free-form diagnostic, or a kind of another version), or
    one that does not fit its model (`misfit` says why). Its fields are kept as extra fields."""

    model_config = ConfigDict(extra="allow", frozen=True)

    event: Any = None
    at: Any = ""
    id: Any = None
    prev: Any = None
    misfit: str | None = None
