"""The session's jobs: the executor handing out job leases, this call's lease and its device, and
the running operation's cancel event (kopt_mcp.bench.executor)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kopt_mcp.bench.executor import Executor, JobLease
from kopt_mcp.errors import Cancelled, LedgerEventError
from kopt_mcp.gpus.gate import GateOutcome
from kopt_mcp.results import DeviceInfo
from kopt_mcp.rules.shadowing import ModuleNames

Progress = Callable[[float, float, str], None]


class Jobs:
    """One device for one measuring call. `executor` grants job leases; `job` is this call's
    (None between calls), granted at `since` (epoch s) with `outcome` (the gate's wait); `device`
    is the device of the latest lease (kept for status), `last_device` the one preferred at the
    next; `cancel` is the running operation's cancel event; `module_names` the benchmark
    interpreter's module names (bench/modules.py), asked once, at the first attempt. `log(event,
    **fields)` writes an informational ledger event (kopt_mcp.ledger.Store.log); `slot` names the
    candidate slot in it."""

    def __init__(self, executor: Executor, log: Callable[..., object], slot: str | None = None) -> None:
        self.executor = executor
        self.log = log
        self.slot = slot
        self.cancel = threading.Event()
        self.job: JobLease | None = None
        self.outcome: GateOutcome | None = None
        self.since: float = 0.0
        self.device: DeviceInfo | None = None
        self.last_device: str | None = None
        self.module_names: ModuleNames | None = None

    def lease(self, progress: Progress | None) -> GateOutcome:
        """Take the job lease for this measuring call (or keep the one it holds): every run of the
        call goes to that device, so A/B pairs share one GPU; the device used last is preferred.
        With none after the whole wait (`outcome.lease` None) the session must stop (reason `no
        idle GPU: ...`): `recovery.lease_or_stop` does so at once, save_and_test after its own
        clean-up. Raises Cancelled when the client cancelled the wait. The lease ends with the
        operation (`release`, called by referee.operation)."""
        if self.job is not None:
            return self.outcome
        grant = self.executor.acquire(progress=progress, cancel=self.cancel, prefer=self.last_device)
        outcome = grant.outcome
        if grant.lease is None:
            if outcome.reason == "cancelled":
                raise Cancelled("cancelled while waiting for an idle GPU")
            return outcome
        self.job, self.outcome, self.since = grant.lease, outcome, time.time()
        self.device = grant.lease.device
        self.last_device = getattr(grant.lease, "uuid", None) or grant.lease.device_id
        return outcome

    def release(self) -> None:
        """End this call's job lease (no-op without one) and log it (`job_lease`: device, wait, held
        span); the device stays in `device` for status. A ledger that cannot be written loses the
        record, never the release."""
        device, outcome = self.device_id, self.outcome
        job, self.job, self.outcome = self.job, None, None
        if job is None:
            return
        try:
            self.log("job_lease", slot=self.slot, device=device,
                     waited_s=round(outcome.waited_s, 3) if outcome else None,
                     held_from=round(self.since, 3), held_until=round(time.time(), 3))
        except (OSError, LedgerEventError):
            pass  # informational: the lease must still be given back
        finally:
            job.release()

    def device_lost(self, error: Exception, retrying: bool) -> None:
        """The job lease's device went away (DeviceLost): log it, drop the lease and the preference
        for that device; the caller retries the whole measuring call once (`retrying`) or gives up."""
        self.log("device_lost", device=self.device_id, error=str(error)[:500], retrying=retrying)
        self.last_device = None
        self.release()

    @property
    def device_id(self) -> str | None:
        """The ledger's name of the device this call holds (`nvidia:0:<uuid>`), or None."""
        return self.job.device_id if self.job is not None else None

    def close(self) -> None:
        """Release the job lease and close the executor (every lease it holds)."""
        self.release()
        self.executor.close()
