"""First come, first served among kopt-mcp waiters for one GPU: one ticket file per waiter.

Why: a slot that ends its measuring call and starts the next one at once would otherwise take the
GPU back before the slot waiting for it polls again (every JOB_POLL_S s), and could starve it
(kopt_mcp.gpus.gate). A waiter therefore takes a ticket on each GPU it waits for; a free GPU goes to
the waiter with the earliest live ticket on it.

Tickets live in `<lease_dir>/<uuid>.queue/<seq>-<token>.json` ({"seq", "token", "pid", "create_time",
"host", "tag", "since"}), written atomically (ledger.atomic_write). `seq` is drawn under the
queue's file lock (`<uuid>.queue.lock`): one more than every ticket there, so the order of live
tickets is the order their waiters started waiting. A ticket counts only while its waiter lives:
its process (runner.same_process: pid with the same create time, so a reused pid is no waiter) on this host, and its file
touched within TICKET_STALE_S s (the waiter touches its tickets at every poll; a frozen or remote
waiter that stops polling loses its place). Dead tickets are deleted by whoever sees them.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid as uuidlib
from datetime import UTC, datetime
from pathlib import Path

import filelock
import psutil

from kopt_mcp.bench.runner import same_process
from kopt_mcp.gpus.lease import _LOCK_KW, _safe
from kopt_mcp.ledger import atomic_write

__all__ = ["TICKET_STALE_S", "WaitQueue", "ticket_alive"]

TICKET_STALE_S = 60.0  # a ticket not touched for this long (s, wall clock) is no waiter's any more


def ticket_alive(ticket: dict, mtime: float, now: float | None = None) -> bool:
    """Whether `ticket` (a ticket file's JSON) still stands for a waiting process.

    `mtime`: the file's modification time (s since the epoch); `now` defaults to time.time().
    False when the file is older than TICKET_STALE_S s, or (same host) when the pid is gone, a
    zombie, or another process (runner.same_process: create time more than 0.5 s off).
    """
    now = time.time() if now is None else now
    if now - mtime > TICKET_STALE_S:
        return False
    if ticket.get("host") != socket.gethostname():
        return True  # another host's process cannot be checked: the heartbeat decides
    pid, born = ticket.get("pid"), ticket.get("create_time")
    return isinstance(pid, int) and isinstance(born, (int, float)) and same_process(pid, born) is not None


class WaitQueue:
    """One waiter's tickets (one `GpuGate.acquire` call) in the wait queues of `lease_dir`.

    Two waiters of one process (two slots of one HTTP server) are two WaitQueues: each has its own
    token. Never raises for a queue that cannot be written: that waiter just has no place.
    """

    def __init__(self, lease_dir: Path, tag: str = "") -> None:
        self.lease_dir = Path(lease_dir)
        self.tag = tag
        self.token = uuidlib.uuid4().hex
        self._mine: dict[str, Path] = {}  # GPU uuid -> my ticket file

    def queue_dir(self, uuid: str) -> Path:
        """`<lease_dir>/<uuid>.queue`, the GPU's tickets."""
        return self.lease_dir / f"{_safe(uuid)}.queue"

    @property
    def joined(self) -> list[str]:
        """The GPU uuids this waiter holds a ticket on."""
        return list(self._mine)

    def _tickets(self, uuid: str) -> list[tuple[dict, Path, float]]:
        """The GPU's readable tickets with their file and mtime, in queue order (seq, token)."""
        out = []
        try:
            paths = list(self.queue_dir(uuid).glob("*.json"))
        except OSError:
            return []
        for p in paths:
            try:
                mtime = p.stat().st_mtime
                data = json.loads(p.read_text())
            except (OSError, ValueError):
                continue  # gone meanwhile, or half a file from another writer's crash
            if isinstance(data, dict) and isinstance(data.get("seq"), int):
                out.append((data, p, mtime))
        return sorted(out, key=lambda t: (t[0]["seq"], str(t[0].get("token"))))

    def join(self, uuid: str) -> bool:
        """Take a ticket on `uuid` behind every ticket there now (no-op when this waiter has one).

        Returns whether this waiter holds a ticket there now: False when the queue cannot be
        written (e.g. another user's directory); fairness is then lost, never the measurement.
        """
        if uuid in self._mine:
            return True
        qdir = self.queue_dir(uuid)
        try:
            if not qdir.is_dir():
                qdir.mkdir(parents=True, exist_ok=True)
                try:
                    os.chmod(qdir, 0o1777)  # other users' servers on the host queue here too
                except OSError:
                    pass
            with filelock.FileLock(str(self.lease_dir / f"{_safe(uuid)}.queue.lock"), **_LOCK_KW):
                seq = max((t["seq"] for t, _, _ in self._tickets(uuid)), default=0) + 1
                me = psutil.Process()
                data = {"seq": seq, "token": self.token, "pid": me.pid, "create_time": me.create_time(),
                        "host": socket.gethostname(), "tag": self.tag,
                        "since": datetime.now(UTC).isoformat(timespec="seconds")}
                path = qdir / f"{seq:012d}-{self.token}.json"
                atomic_write(path, json.dumps(data))
        except (OSError, psutil.Error):  # a ticket without this process's create time would count as dead
            return False
        self._mine[uuid] = path
        return True

    def ahead(self, uuid: str) -> list[dict]:
        """The live tickets of other waiters before this waiter's on `uuid` (all of them when it has
        none there), earliest first; dead tickets found on the way are deleted."""
        out = []
        for data, path, mtime in self._tickets(uuid):
            if data.get("token") == self.token:
                break
            if ticket_alive(data, mtime):
                out.append(data)
            else:
                try:
                    path.unlink(missing_ok=True)
                except OSError:
                    pass  # another user's file in the sticky directory: it counts for nothing anyway
        return out

    def touch(self) -> None:
        """The heartbeat: mark every ticket of this waiter as still waiting (re-joins one deleted
        by another waiter that judged it dead, at the back)."""
        for uuid, path in list(self._mine.items()):
            try:
                os.utime(path)
            except FileNotFoundError:
                del self._mine[uuid]
                self.join(uuid)
            except OSError:
                pass

    def leave(self, uuid: str | None = None) -> None:
        """Remove this waiter's ticket on `uuid`, or all its tickets when None. Never raises for a
        ticket that is gone."""
        for u in [uuid] if uuid is not None else list(self._mine):
            path = self._mine.pop(u, None)
            if path is not None:
                try:
                    path.unlink(missing_ok=True)
                except OSError:
                    pass
