"""Everything the session writes to disk: state (atomic), ledger, attempt archive, performance.md.

Layout inside the workspace (git-excluded `.kopt/`): `state.json`, `ledger.jsonl` (one JSON object
per event, every attempt included), `attempts/NNNN-<verdict>.patch`, `runs/NNNN-<label>/` (logs,
CSV copies, traces). `performance.md` (tracked) holds only the baseline, real keeps and the Stop
Summary, in program.md's table form.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel

PERF_HEADER = (
    "| Date | Commit | Status | Benchmark command | Target config class | Kernel | {metric} | GPU time (us) "
    "| change vs previous best | explanation |\n"
    "|---|---|---|---|---|---|---|---|---|---|\n"
)


def latest_event(events: list[dict], event: str) -> dict | None:
    """The last of `events` (oldest first) whose kind is `event`, or None."""
    return next((e for e in reversed(events) if e.get("event") == event), None)


def now_iso() -> str:
    """UTC time, ISO 8601 to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def atomic_write(path: Path, text: str) -> None:
    """Write `text` to `path` via a temp file in the same folder, fsync, then rename (atomic)."""
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


class Store:
    """The `.kopt/` folder of one workspace."""

    def __init__(self, workspace: Path):
        self.workspace = workspace
        self.root = workspace / ".kopt"
        self.state_path = self.root / "state.json"
        self.ledger_path = self.root / "ledger.jsonl"
        self.attempts = self.root / "attempts"
        self.runs = self.root / "runs"

    def save_state(self, state: BaseModel) -> None:
        """Write the state atomically (a crash leaves the old or the new file, never half)."""
        atomic_write(self.state_path, state.model_dump_json(indent=2))

    def load_state_json(self) -> dict | None:
        """The saved state as a dict, or None when there is none."""
        if not self.state_path.exists():
            return None
        return json.loads(self.state_path.read_text(encoding="utf-8"))

    def log(self, event: str, **fields) -> None:
        """Append one event to the ledger (flushed and fsynced)."""
        self.root.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"at": now_iso(), "event": event, **fields}, default=str)
        with self.ledger_path.open("a", encoding="utf-8") as f:
            f.write(line + "\n")
            f.flush()
            os.fsync(f.fileno())

    def ledger(self) -> list[dict]:
        """Every ledger event, oldest first."""
        if not self.ledger_path.exists():
            return []
        return [json.loads(x) for x in self.ledger_path.read_text(encoding="utf-8").splitlines() if x.strip()]

    def latest(self, event: str) -> dict | None:
        """The newest ledger event of kind `event`, or None."""
        return latest_event(self.ledger(), event)

    def archive(self, attempt: int, label: str, patch: str) -> Path:
        """Write the attempt's patch as `attempts/NNNN-<label>.patch` (atomic); returns its path."""
        path = self.attempts / f"{attempt:04d}-{label}.patch"
        atomic_write(path, patch)
        return path

    def relabel(self, attempt: int, old: str, new: str) -> Path:
        """Rename an archived patch once its verdict is known."""
        src = self.attempts / f"{attempt:04d}-{old}.patch"
        dst = self.attempts / f"{attempt:04d}-{new}.patch"
        if src.exists():
            os.replace(src, dst)
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


class PerfRow(BaseModel):
    """One row of performance.md. Metric and GPU time per class are joined into one cell."""

    date: str
    commit: str
    status: str
    command: str
    target: str
    kernel: str
    metric: str
    gpu_time: str
    change: str
    explanation: str


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def append_perf_rows(path: Path, metric: str, rows: list[PerfRow]) -> None:
    """Append rows to performance.md, creating it with its title and table header if missing."""
    text = path.read_text(encoding="utf-8") if path.exists() else (
        "# performance.md\n\nWritten by kopt-mcp: the baseline, every kept improvement and the Stop "
        "Summary. Every attempt is in `.kopt/ledger.jsonl`.\n\n" + PERF_HEADER.format(metric=metric))
    for r in rows:
        cells = [r.date, r.commit[:12] if r.commit.isalnum() else r.commit, r.status, f"`{r.command}`", r.target, r.kernel, r.metric,
                 r.gpu_time, r.change, r.explanation]
        text += "| " + " | ".join(_cell(c) for c in cells) + " |\n"
    atomic_write(path, text)


def append_perf_text(path: Path, text: str) -> None:
    """Append a free-form block (the Stop Summary) to performance.md."""
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    atomic_write(path, old + ("\n" if old and not old.endswith("\n\n") else "") + text)
