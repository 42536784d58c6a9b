"""Everything the session writes to disk: state (atomic), ledger, attempt archive, performance.md.

The session's files live in its state folder, OUTSIDE every tree a benchmark runs in: under the
repository's common git directory, `<git-common-dir>/kopt/<tag>/` (`kopt_mcp.paths.session_dir`):
`state.json`, `ledger.jsonl` (one JSON record per event, every attempt included),
`attempts/NNNN-<verdict>.patch`, `runs/NNNN-<label>/` (logs, CSV copies, traces).
`performance.md` (tracked, in the workspace) holds only the baseline, real keeps and the Stop
Summary, in program.md's table form, and is rendered from the ledger (`render_performance`).

The ledger is append-only and hash-chained: every record carries `prev`, the sha256 of the previous
line (the first record chains from GENESIS), and `id`, a unique record id. state.json carries the
anchor `ledger_anchor` = {records, sha256} of the ledger as it was when the state was saved, so a
ledger cut back (or deleted) below what the state saw is detected as well as an edited, inserted or
removed line (`verify_ledger`).

Records are typed (kopt_mcp.events): `new_record` and `Store.log` check each record against its
event model before it is written (LedgerEventError for an unknown kind, a wrong field type or an
undeclared field), and `Store.events()` is the one reader: every record as its typed event, every
version of the ledger readable. `Store.ledger()` stays the raw view (dicts, as in the file) for the
JSONL resource, the hash chain and tools that check the file itself.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import uuid
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel

from kopt_mcp.events import (  # PerfRow re-exported: performance.md rows are built from it
    Baseline,
    Commit,
    E,
    PerfRow,
    SessionStarted,
    Stopped,
    as_events,
    check_record,
    last,
)
from kopt_mcp.testing import faults

PERF_HEADER = (
    "| Date | Commit | Status | Benchmark command | Target config class | Kernel | {metric} | {time} "
    "| change vs previous best | explanation |\n"
    "|---|---|---|---|---|---|---|---|---|---|\n"
)
#: performance.md's profiler-time column: GPU time of the target kernels on a GPU; on the CPU, where no
#: kernel profiler measures (the script metric decides), the device-neutral name (issue 36 item 3)
TIME_COLUMN_GPU = "GPU time (us)"
TIME_COLUMN_CPU = "profiler time (us)"
PERF_TITLE = ("# performance.md\n\nWritten by kopt-mcp from its ledger: the baseline, every kept improvement "
              "and the Stop Summary. Every attempt is in the session's ledger (resource kopt://ledger.jsonl).\n\n")
#: `prev` of the ledger's first record
GENESIS = "0" * 64


def latest_event(events: list[dict], event: str) -> dict | None:
    """The last of the raw records `events` (oldest first) whose kind is `event`, or None. Typed
    readers use `kopt_mcp.events.last(events, Model)` instead."""
    return next((e for e in reversed(events) if e.get("event") == event), None)


def now_iso() -> str:
    """UTC time, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` via a temp file in the same folder, fsync, then rename (atomic).
    Raises OSError (disk full, read-only) with the old file left as it was."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), path.stat().st_mode & 0o777 if path.exists() else 0o666 & ~_umask())
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    """The process umask, read without changing it (Linux /proc); 0o022 where unreadable."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def line_hash(line: str) -> str:
    """sha256 (hex) of one ledger line, without its newline: the next record's `prev`."""
    return hashlib.sha256(line.encode("utf-8")).hexdigest()


def new_record(event: str, **fields) -> dict:
    """A ledger record not yet chained: `at`, `event`, a fresh `id` and `fields`, checked against
    the event's model and made JSON-ready (paths as text). Raises LedgerEventError (a ValueError)
    for a kind not in `kopt_mcp.events.EVENTS`, a field of the wrong type, an undeclared field or a
    missing required one: a bug in the caller."""
    return check_record({"at": now_iso(), "event": event, "id": uuid.uuid4().hex[:16], **fields})


def verify_ledger(path: Path, anchor: dict | None = None) -> list[str]:
    """Check the hash chain of the ledger at `path` and, given the state's `anchor` ({records,
    sha256}), that the ledger still holds what the state saw. Returns the problems found (empty:
    intact), each naming the record (0-based line) and what to do; never raises on bad content."""
    saw = int((anchor or {}).get("records") or 0)
    if not path.exists():
        return [f"the ledger {path} is missing but the state saw {saw} record(s): it was deleted; the "
                "verdicts recorded there are lost (the archived patches and git history remain)"] if saw else []
    try:
        raw = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError) as e:
        return [f"the ledger {path} cannot be read ({e}): restore it from a backup"]
    problems: list[str] = []
    lines = raw.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    elif lines:
        problems.append(f"the ledger's last record (line {len(lines) - 1}) has no line end: cut off while "
                        "written, or truncated")
    prev = GENESIS
    for i, line in enumerate(lines):
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
        except ValueError:
            problems.append(f"ledger record {i} is not a JSON record: edited or cut off")
        else:
            if rec.get("prev") != prev:
                problems.append(f"ledger record {i} does not chain to record {i - 1}" if i else
                                "ledger record 0 does not start the chain")
        prev = line_hash(line)
        if len(problems) >= 20:
            problems.append("... (more problems not listed)")
            break
    if saw > len(lines):
        problems.append(f"the ledger holds {len(lines)} record(s) but the state saw {saw}: it was truncated "
                        "or records were deleted")
    elif saw and line_hash(lines[saw - 1]) != (anchor or {}).get("sha256"):
        problems.append(f"ledger record {saw - 1} differs from the one the state saw: the ledger was edited")
    return [f"{p} ({path})" for p in problems]


class Store:
    """One session's state folder (see module docstring): `root` = `<git-common-dir>/kopt/<tag>`."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.state_path = self.root / "state.json"
        self.ledger_path = self.root / "ledger.jsonl"
        self.attempts = self.root / "attempts"
        self.runs = self.root / "runs"
        self.anchor: dict | None = None  # the ledger anchor read from state.json
        self.last_saved: dict | None = None  # the state as last written (or read): what a failed save rolls back to
        self._tip: tuple[int, str] | None = None  # (records, sha256 of the last line)
        self._ids: set[str] | None = None

    # -- state -----------------------------------------------------------------------------------

    def save_state(self, state: BaseModel) -> None:
        """Write the state atomically (a crash leaves the old or the new file, never half), with the
        ledger anchor as it will be once the state's `outbox` records are appended. Raises OSError (disk full, read-only) leaving the old file as it was."""
        count, tip = self._chain_tip()
        data = json.loads(state.model_dump_json())
        for rec in data.get("outbox") or []:  # the anchor covers the records committed with this state
            if not self.has_record(rec.get("id", "")):
                count, tip = count + 1, line_hash(self._line(rec, tip))
        data["ledger_anchor"] = {"records": count, "sha256": tip}
        atomic_write(self.state_path, json.dumps(data, indent=2))
        self.last_saved, self.anchor = data, data["ledger_anchor"]

    def load_state_json(self) -> dict | None:
        """The saved state as a dict (the ledger anchor taken out into `self.anchor`), or None."""
        if not self.state_path.exists():
            return None
        data = json.loads(self.state_path.read_text(encoding="utf-8"))
        self.last_saved = dict(data)
        self.anchor = data.pop("ledger_anchor", None)
        return data

    # -- ledger ----------------------------------------------------------------------------------

    def _chain_tip(self) -> tuple[int, str]:
        if self._tip is None:
            lines = self._lines()
            self._tip = (len(lines), line_hash(lines[-1]) if lines else GENESIS)
        return self._tip

    def _lines(self) -> list[str]:
        if not self.ledger_path.exists():
            return []
        return [x for x in self.ledger_path.read_text(encoding="utf-8").split("\n") if x]

    def has_record(self, record_id: str) -> bool:
        """True if a record with this `id` is already in the ledger."""
        if self._ids is None:
            self._ids = set()
            for line in self._lines():
                try:
                    self._ids.add(json.loads(line).get("id"))
                except (ValueError, AttributeError):
                    continue
        return record_id in self._ids

    def append(self, record: dict) -> dict:
        """Chain `record` (sets `prev`) and append it as one line (flushed and fsynced); returns it.
        Raises OSError when it cannot be written."""
        self.root.mkdir(parents=True, exist_ok=True)
        count, tip = self._chain_tip()
        if self.ledger_path.exists() and self.ledger_path.stat().st_size:
            with self.ledger_path.open("rb") as f:
                f.seek(-1, os.SEEK_END)
                torn = f.read(1) != b"\n"
        else:
            torn = False
        line = self._line(record, tip)
        with self.ledger_path.open("a", encoding="utf-8") as f:
            f.write(("\n" if torn else "") + line + "\n")
            f.flush()
            os.fsync(f.fileno())
        self._tip = (count + 1, line_hash(line))
        if self._ids is not None and record.get("id"):
            self._ids.add(record["id"])
        faults.point(f"ledger.after_append:{record.get('event')}")
        return record

    @staticmethod
    def _line(record: dict, prev: str) -> str:
        return json.dumps({**record, "prev": prev}, default=str)

    def log(self, event: str, **fields) -> None:
        """Append one informational event (no state change goes with it) to the ledger. A kind in
        `kopt_mcp.events.EVENTS` is checked like `new_record`; any other kind is a free-form
        diagnostic (read back as `events.Other`). Raises LedgerEventError, OSError."""
        self.append(check_record({"at": now_iso(), "event": event, "id": uuid.uuid4().hex[:16], **fields},
                                 free_form=True))

    def ledger(self) -> list[dict]:
        """Every ledger event, oldest first (a line that is not JSON is skipped: see verify)."""
        out = []
        for line in self._lines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out

    def events(self) -> list:
        """Every ledger record as its typed event (`kopt_mcp.events.Event`), oldest first: the one
        reader. Never raises on content (a line that is not JSON is skipped: see verify; a record
        that does not fit its model reads as `events.Other` with `misfit` set)."""
        return as_events(self.ledger())

    def last(self, kind: type[E]) -> E | None:
        """The newest event of model `kind` (e.g. `events.Trace`), or None."""
        return last(self.events(), kind)

    def verify(self) -> list[str]:
        """`verify_ledger` of this store against the anchor of the loaded state."""
        return verify_ledger(self.ledger_path, self.anchor)

    def latest(self, event: str) -> dict | None:
        """The newest raw ledger record of kind `event`, or None (typed: `last`)."""
        return latest_event(self.ledger(), event)

    # -- archive and runs ------------------------------------------------------------------------

    def archive(self, attempt: int, label: str, patch: str) -> Path:
        """Write the attempt's patch as `attempts/NNNN-<label>.patch` (atomic); returns its path."""
        path = self.attempts / f"{attempt:04d}-{label}.patch"
        atomic_write(path, patch)
        faults.point(f"archive.after_write:{label}")
        return path

    def relabel(self, attempt: int, old: str, new: str) -> Path:
        """Rename an archived patch once its verdict is known."""
        src = self.attempts / f"{attempt:04d}-{old}.patch"
        dst = self.attempts / f"{attempt:04d}-{new}.patch"
        if src.exists():
            os.replace(src, dst)
            faults.point(f"archive.after_relabel:{new}")
        return dst

    def find_patch(self, attempt: int) -> Path | None:
        """The archived patch of `attempt`, whatever its label, or None."""
        hits = sorted(self.attempts.glob(f"{attempt:04d}-*.patch"))
        return hits[-1] if hits else None

    def run_dir(self, attempt: int, label: str) -> Path:
        """A fresh folder for one run's logs and outputs."""
        d = self.runs / f"{attempt:04d}-{label}"
        n = 1
        while d.exists():
            n += 1
            d = self.runs / f"{attempt:04d}-{label}-{n}"
        d.mkdir(parents=True)
        return d


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def perf_row_line(r: PerfRow | dict) -> str:
    """One performance.md table line of `r` (a PerfRow or its dict from a ledger record)."""
    r = r if isinstance(r, PerfRow) else PerfRow.model_validate(r)
    cells = [r.date, r.commit[:12] if r.commit.isalnum() else r.commit, r.status, f"`{r.command}`", r.target,
             r.kernel, r.metric, r.gpu_time, r.change, r.explanation]
    return "| " + " | ".join(_cell(c) for c in cells) + " |\n"


def render_performance(events: list, metric: str, time_column: str = TIME_COLUMN_GPU) -> str:
    """performance.md as a function of ledger events (oldest first; typed events or raw records,
    read with `events.as_events`): the text the session started from (the first
    `session_started.performance_md`, else title + table header, its profiler-time column named
    `time_column`: TIME_COLUMN_CPU on a CPU session), then the `rows` of every
    `baseline` and `commit` record in order, then each `stopped` record's `summary`. Records without
    those fields add nothing, nor does a record that does not fit its model; a candidate's edit of
    the file cannot survive a re-render."""
    typed = as_events(events)
    base = next((e.performance_md for e in typed if isinstance(e, SessionStarted) and e.performance_md is not None),
                None)
    text = base if base is not None else PERF_TITLE + PERF_HEADER.format(metric=metric, time=time_column)
    for e in typed:
        if isinstance(e, (Baseline, Commit)):
            text += "".join(perf_row_line(r) for r in e.rows)
        elif isinstance(e, Stopped) and e.summary is not None:
            text += ("\n" if text and not text.endswith("\n\n") else "") + e.summary
    return text


def append_perf_rows(path: Path, metric: str, rows: list[PerfRow], time_column: str = TIME_COLUMN_GPU) -> None:
    """Append rows to performance.md, creating it with its title and table header (its profiler-time
    column named `time_column`) if missing."""
    text = (path.read_text(encoding="utf-8") if path.exists()
            else PERF_TITLE + PERF_HEADER.format(metric=metric, time=time_column))
    for r in rows:
        text += perf_row_line(r)
    atomic_write(path, text)


def append_perf_text(path: Path, text: str) -> None:
    """Append a free-form block (the Stop Summary) to performance.md."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    atomic_write(path, old + ("\n" if old and not old.endswith("\n\n") else "") + text)
