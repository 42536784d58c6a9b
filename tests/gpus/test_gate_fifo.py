"""First come, first served between kopt-mcp waiters for one GPU (kopt_mcp.gpus.waitqueue): real
lease files and wait tickets in a tmp dir, recorded nvidia-smi output, the gate's fake clock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from kopt_mcp.gpus.gate import JOB_GRACE_S, JOB_POLL_S, GpuGate, IdleThresholds
from kopt_mcp.gpus.lease import LeaseManager
from kopt_mcp.gpus.smi import NvidiaSmiProbe
from kopt_mcp.gpus.waitqueue import TICKET_STALE_S, WaitQueue
from tests.gpus.conftest import BUSY, IDLE, SmiReplay, child_env

TH = IdleThresholds()
UUID = "GPU-12d4823c-c93c-be36-630b-84be7a395e90"  # the GPU of the IDLE recording


def _gate(tmp_path, tag, *polls, wait_s=3600.0, poll_s=600.0, sleep=None, clock=None):
    timing = {k: v for k, v in (("sleep", sleep), ("clock", clock)) if v is not None}
    return GpuGate(NvidiaSmiProbe(SmiReplay(*(polls or (IDLE,)))), LeaseManager(tmp_path, tag), TH,
                   wait_s=wait_s, poll_s=poll_s, **timing)


def _tickets(tmp_path, uuid=UUID):
    return sorted((tmp_path / f"{uuid}.queue").glob("*.json"))


def test_a_slot_that_releases_and_asks_again_at_once_lets_the_waiting_slot_in_first(tmp_path, fake_time):
    """The starvation seen with two slots on one H100: A holds the GPU, B waits (polls every
    JOB_POLL_S), A ends its call and starts the next one at once. Without a queue A wins again."""
    gate_a = _gate(tmp_path, "a", wait_s=0, sleep=lambda s: pytest.fail("A must not wait"), clock=fake_time)
    assert gate_a.acquire().lease is not None
    a_again = []

    def b_sleep(s: float) -> None:
        fake_time.sleep(s)
        if len(fake_time.slept) == 1:  # while B waits: A's call ends, its next one starts at once
            assert len(_tickets(tmp_path)) == 1  # B's place
            gate_a.release()
            a_again.append(gate_a.acquire())

    out_b = _gate(tmp_path, "b", sleep=b_sleep, clock=fake_time).acquire()
    [a2] = a_again
    assert out_b.lease is not None and out_b.polls == 2 and fake_time.slept == [JOB_POLL_S]
    assert a2.lease is None and gate_a.held is None
    # the gate's message is the product: it names what keeps each device busy
    assert a2.reason.startswith(f"no idle GPU after 0 s: GPU 0: promised to an earlier waiter: kopt-mcp pid "
                                f"{os.getpid()} (tag b) waiting since ")
    assert _tickets(tmp_path) == []  # B's ticket went with its lease, A's with its give-up


def test_two_slots_that_ask_again_at_once_alternate_on_one_gpu(tmp_path):
    """Two threads (two slots of one HTTP server, one pid), real time: each holds the GPU until the
    other waits for it, releases and asks again at once. The GPU goes A, B, A, B, ..."""
    order, lock, done = [], threading.Lock(), {"a": threading.Event(), "b": threading.Event()}
    errors = []

    def slot(tag: str, other: str, rounds: int, started: threading.Event | None) -> None:
        try:
            for _ in range(rounds):
                gate = _gate(tmp_path, tag, wait_s=60.0, poll_s=0.01)
                out = gate.acquire()
                assert out.lease is not None, out.reason
                with lock:
                    order.append(tag)
                if started is not None:
                    started.set()
                    started = None
                deadline = time.monotonic() + 30  # the call lasts until the other slot waits
                while not _tickets(tmp_path) and not done[other].is_set():
                    assert time.monotonic() < deadline, f"{other} never queued"
                    time.sleep(0.005)
                gate.release()
        except BaseException as e:  # noqa: BLE001 - reported by the test thread
            errors.append(e)
        finally:
            done[tag].set()

    a_started = threading.Event()
    ta = threading.Thread(target=slot, args=("a", "b", 4, a_started))
    ta.start()
    assert a_started.wait(30)
    tb = threading.Thread(target=slot, args=("b", "a", 4, None))
    tb.start()
    ta.join(120)
    tb.join(120)
    assert not errors, errors
    assert order == ["a", "b"] * 4
    assert _tickets(tmp_path) == []


def test_a_dead_waiters_ticket_never_blocks(tmp_path, fake_time):
    code = f"from kopt_mcp.gpus.waitqueue import WaitQueue; WaitQueue({str(tmp_path)!r}, 'gone').join({UUID!r})"
    subprocess.run([sys.executable, "-c", code], check=True, env=child_env(), timeout=120)
    [dead] = _tickets(tmp_path)  # its process exited without leaving the queue (as a SIGKILL would)
    out = _gate(tmp_path, "b", sleep=lambda s: pytest.fail("must not wait"), clock=fake_time).acquire()
    assert out.lease is not None and not dead.exists()  # taken at once; the dead ticket swept


def test_a_ticket_of_a_reused_pid_or_a_frozen_waiter_never_blocks(tmp_path, fake_time):
    other = WaitQueue(tmp_path, "x")
    other.join(UUID)  # a live waiter of this process ...
    [t] = _tickets(tmp_path)
    data = json.loads(t.read_text())
    t.write_text(json.dumps({**data, "create_time": data["create_time"] - 100.0}))  # ... but another process's pid
    gate = _gate(tmp_path, "b", wait_s=0, sleep=lambda s: pytest.fail("must not wait"), clock=fake_time)
    out = gate.acquire()
    assert out.lease is not None and not t.exists()
    gate.release()
    other = WaitQueue(tmp_path, "x")
    other.join(UUID)
    [t] = _tickets(tmp_path)
    old = time.time() - TICKET_STALE_S - 5
    os.utime(t, (old, old))  # a waiter that stopped polling (SIGSTOP, a hung probe) loses its place
    assert gate.acquire().lease is not None


def test_a_live_ticket_blocks_and_its_waiter_keeps_its_place_by_polling(tmp_path, fake_time):
    first = WaitQueue(tmp_path, "x")
    first.join(UUID)
    out = _gate(tmp_path, "b", wait_s=10, poll_s=600, sleep=fake_time.sleep, clock=fake_time).acquire()
    # the gate's message is the product: it names what keeps each device busy
    assert out.lease is None and "promised to an earlier waiter: kopt-mcp pid" in out.reason
    assert set(fake_time.slept) == {JOB_POLL_S}  # a kopt-mcp waiter takes it within its poll: check soon
    first.leave()
    assert _tickets(tmp_path) == [] and first.joined == []


def test_cancel_removes_the_waiters_ticket(tmp_path, fake_time):
    holder = _gate(tmp_path, "a", wait_s=0, clock=fake_time)
    assert holder.acquire().lease is not None
    cancel = threading.Event()
    seen = []

    def sleep(s: float) -> None:
        seen.append(len(_tickets(tmp_path)))
        cancel.set()

    out = _gate(tmp_path, "b", sleep=sleep, clock=fake_time).acquire(cancel=cancel)
    # "cancelled" is the gate's marker of a cancelled wait (GateOutcome has no code)
    assert out.reason == "cancelled" and seen == [1] and _tickets(tmp_path) == []


def _b_waits_while_as_load_lingers(tmp_path, fake_time, wait_s: float):
    """A holds the one GPU of the BUSY recording; B waits `wait_s` s; A's lease ends after B's first
    poll while its process still shows on the GPU. Returns B's outcome, B's ticket count at each
    pause, and the GPU's uuid."""
    [gpu] = NvidiaSmiProbe(SmiReplay(BUSY)).read()
    a = LeaseManager(tmp_path, "a")
    assert a.try_acquire(gpu) is not None
    tickets = []

    def sleep(s: float) -> None:
        tickets.append(len(_tickets(tmp_path, gpu.uuid)))
        fake_time.sleep(s)
        a.release()  # A's call ended after B's first poll; its process still shows on the GPU

    out = _gate(tmp_path, "b", BUSY, wait_s=wait_s, sleep=sleep, clock=fake_time).acquire()
    return out, tickets, gpu.uuid


def test_the_place_is_kept_while_a_finished_runs_load_lingers(tmp_path, fake_time):
    """A's lease ends while the GPU still shows its benchmark's load (the BUSY recording, one GPU):
    B keeps its place and polls every JOB_POLL_S, instead of sleeping poll_s and losing the GPU."""
    out, tickets, uuid = _b_waits_while_as_load_lingers(tmp_path, fake_time, wait_s=10)
    assert out.lease is None and fake_time.slept == [JOB_POLL_S] * 5 and tickets == [1] * 5
    assert _tickets(tmp_path, uuid) == []


def test_a_foreign_job_after_a_kopt_job_is_polled_every_poll_s_after_the_grace(tmp_path, fake_time):
    out, tickets, _ = _b_waits_while_as_load_lingers(tmp_path, fake_time, wait_s=1000)
    fast = int(JOB_GRACE_S / JOB_POLL_S)
    assert out.lease is None and fake_time.slept == [JOB_POLL_S] * fast + [600.0, 1000.0 - 600.0 - JOB_GRACE_S]
    assert tickets == [1] * fast + [0, 0]


def test_a_foreign_job_alone_makes_no_ticket(tmp_path, fake_time):
    tickets = []

    def sleep(s: float) -> None:
        tickets.append(len(_tickets(tmp_path)))
        fake_time.sleep(s)

    out = _gate(tmp_path, "b", BUSY, IDLE, sleep=sleep, clock=fake_time).acquire()
    assert out.lease is not None and fake_time.slept == [600.0] and tickets == [0]


def test_the_queue_is_open_to_every_user_and_one_that_cannot_be_written_costs_fairness_only(tmp_path, fake_time):
    holder = LeaseManager(tmp_path, "a")
    [gpu] = NvidiaSmiProbe(SmiReplay(IDLE)).read()
    assert holder.try_acquire(gpu) is not None
    q = WaitQueue(tmp_path, "b")
    assert q.join(UUID) and (tmp_path / f"{UUID}.queue").stat().st_mode & 0o1777 == 0o1777
    q.leave()
    holder.release()
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / f"{UUID}.queue").write_text("not a directory")  # the queue's place cannot be made
    holder = LeaseManager(blocked, "a")
    assert holder.try_acquire(gpu) is not None
    assert not WaitQueue(blocked, "b").join(UUID)

    def sleep(s: float) -> None:
        fake_time.sleep(s)
        holder.release()

    out = _gate(blocked, "b", sleep=sleep, clock=fake_time).acquire()  # no error: the gate goes on without a place
    assert out.lease is not None and out.polls == 2 and fake_time.slept == [JOB_POLL_S]  # still the job poll


def test_another_live_process_keeps_its_place_until_it_dies(tmp_path, fake_time):
    code = ("import sys; from kopt_mcp.gpus.waitqueue import WaitQueue; "
            f"q = WaitQueue({str(tmp_path)!r}, 'other'); q.join({UUID!r}); print('queued', flush=True); sys.stdin.read()")
    child = subprocess.Popen([sys.executable, "-c", code], env=child_env(), stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "queued"
        gate = _gate(tmp_path, "b", wait_s=0, clock=fake_time)
        out = gate.acquire()
        # the gate's message is the product: it names what keeps each device busy
        assert out.lease is None and f"promised to an earlier waiter: kopt-mcp pid {child.pid} (tag other)" in out.reason
    finally:
        child.kill()
        child.wait(60)
    assert gate.acquire().lease is not None  # its ticket is left, but its process is gone


def test_two_slots_of_one_server_through_the_local_executor(tmp_path, fake_time):
    """The executor builds a gate (and a waiter) per measuring call: slot a's next call, started while
    slot b waits, queues behind b."""
    from kopt_mcp.bench.local import LocalExecutor

    def executor(tag, wait_s, **timing):
        return LocalExecutor(probe=NvidiaSmiProbe(SmiReplay(IDLE)), lease_dir=tmp_path, tag=tag, wait_s=wait_s,
                             **timing)

    slot_a = executor("a", 0.0)
    job = slot_a.acquire().lease
    a_next = []

    def b_sleep(s: float) -> None:
        fake_time.sleep(s)
        if len(fake_time.slept) == 1:
            job.release()
            a_next.append(slot_a.acquire())

    grant = executor("b", 3600.0, sleep=b_sleep, clock=fake_time).acquire()
    assert grant.lease is not None and [g.lease for g in a_next] == [None]
    # the gate's message is the product: it names what keeps each device busy
    assert "promised to an earlier waiter" in a_next[0].outcome.reason and fake_time.slept == [JOB_POLL_S]


def test_a_waiter_wakes_when_the_job_lease_it_waits_on_ends_or_is_cancelled(tmp_path, monkeypatch):
    """Real sleep: the pause on a kopt-mcp job lease ends as soon as the lease is given back (its lock
    is tried every LEASE_WATCH_S s), not at the next JOB_POLL_S; raised to 60 s here, so a gate that
    slept it out would take 60 s (the bounds below leave a loaded machine 30 s)."""
    from kopt_mcp.gpus import gate as gate_module

    monkeypatch.setattr(gate_module, "JOB_POLL_S", 60.0)
    holder = LeaseManager(tmp_path, "a")
    [gpu] = NvidiaSmiProbe(SmiReplay(IDLE)).read()
    assert holder.try_acquire(gpu) is not None
    timer = threading.Timer(0.3, holder.release)
    timer.start()
    waiter = _gate(tmp_path, "b")
    out = waiter.acquire()
    timer.join()
    assert out.lease is not None and out.polls == 2 and out.waited_s < 30.0
    cancel = threading.Event()
    other = _gate(tmp_path, "c")  # b holds it now and never gives it back
    threading.Timer(0.3, cancel.set).start()
    out = other.acquire(cancel=cancel)
    # "cancelled" is the gate's marker of a cancelled wait (GateOutcome has no code)
    assert out.reason == "cancelled" and out.waited_s < 30.0 and waiter.held is not None
