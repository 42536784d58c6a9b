"""Run one shell command contained, with a timeout, whole-process-tree kill and bounded log capture.

Containment: the command runs under the launcher `kopt_mcp/bench/contain.py`, a child subreaper in a
session of its own. Whatever the command leaves behind (a child started with setsid, a
double-forked daemon) stays in the launcher's tree and is killed when the command ends, times out
or is cancelled; if the server dies, the kernel tells the launcher (PDEATHSIG) and it does the
same. With `pid_dir` each run is recorded there (launcher pid and start time) while it lasts, so a
restarted server can end what a dead one left running (`end_leftovers`).

Output (stdout + stderr) goes to a log file as it comes; only the tail is kept in memory, and once
the command ends the file is cut to its first and last MiB (`bound_log`) so a chatty benchmark
cannot fill the disk across hundreds of runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import psutil
from pydantic import BaseModel

from kopt_mcp.bench.sandbox import Sandbox

TAIL_BYTES = 4000
LOG_KEEP_BYTES = 1 << 20  # the run log on disk keeps the first and the last MiB of the output
LAUNCHER = Path(__file__).with_name("contain.py")
STOP_GRACE_S = 10.0  # how long the launcher may take to end its tree after SIGTERM before it is SIGKILLed
CONTAINED = sys.platform.startswith("linux")  # the subreaper is Linux's; elsewhere: process-group kill only


class RunResult(BaseModel):
    """One finished command. Times: `started_at` epoch s, `duration_s` wall seconds."""

    command: str
    exit_code: int | None
    timed_out: bool
    cancelled: bool
    started_at: float
    duration_s: float
    log_path: str
    log_tail: str


def kill_tree(pid: int) -> None:
    """SIGKILL `pid`, its process group and every descendant still alive. Never raises."""
    try:
        parent = psutil.Process(pid)
        kids = parent.children(recursive=True)
    except psutil.NoSuchProcess:
        kids = []
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    kill_all(kids)


def kill_all(procs: Iterable[psutil.Process]) -> list[int]:
    """SIGKILL each of `procs`, then wait up to 5 s for them to end. Returns the pids killed (a
    process already gone, or not ours to kill, is skipped). Never raises."""
    procs, out = list(procs), []
    for q in procs:
        try:
            q.kill()
            out.append(q.pid)
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)
    return out


def bound_log(path: Path, keep: int = LOG_KEEP_BYTES) -> int:
    """Cut a log longer than 2 x `keep` bytes down to its first and last `keep` bytes, with one marker
    line between them saying how many bytes were dropped. Bytes are kept as written (no decoding, so
    non-UTF-8 output is neither an error nor altered). Returns the number of bytes dropped."""
    size = path.stat().st_size
    if size <= 2 * keep:
        return 0
    dropped = size - 2 * keep
    marker = (f"\n[kopt-mcp: {dropped} bytes of output omitted here; this log keeps the first {keep} and the "
              f"last {keep} bytes]\n").encode()
    tmp = path.with_name(f".{path.name}.bound")
    with path.open("rb") as src, tmp.open("wb") as dst:
        dst.write(src.read(keep))
        dst.write(marker)
        src.seek(size - keep)
        dst.write(src.read(keep))
    os.replace(tmp, path)
    return dropped


def _tail(path: Path) -> str:
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - TAIL_BYTES))
        return f.read().decode("utf-8", errors="replace")


def _launcher_argv(command: str, sandbox: Sandbox | None = None) -> list[str]:
    argv = ["bash", "-c", command] if sandbox is None else sandbox.argv(["bash", "-c", command])
    return argv if not CONTAINED else [sys.executable, "-I", str(LAUNCHER), "--", *argv]


def _stop_launcher(proc: subprocess.Popen) -> None:
    """Ask the launcher to end its tree (SIGCONT first: a stopped launcher cannot act), wait up to
    STOP_GRACE_S, then SIGKILL whatever is left of the tree."""
    if CONTAINED:
        for sig in (signal.SIGCONT, signal.SIGTERM):
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                break
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
    kill_tree(proc.pid)
    proc.wait()


def _record_run(pid_dir: Path, pid: int, command: str) -> Path | None:
    """Write pid_dir/<pid>.json (atomically): the launcher's pid and create time (psutil, epoch s),
    the server's pid and create time, the command. None if the launcher is already gone."""
    try:
        created = psutil.Process(pid).create_time()
        me = psutil.Process()
    except psutil.NoSuchProcess:
        return None
    pid_dir.mkdir(parents=True, exist_ok=True)
    path = pid_dir / f"{pid}.json"
    tmp = pid_dir / f".{pid}.json.tmp"
    tmp.write_text(json.dumps({"pid": pid, "create_time": created, "server_pid": me.pid,
                               "server_create_time": me.create_time(), "command": command[:500],
                               "started_at": time.time()}))
    os.replace(tmp, path)
    return path


def same_process(pid: int, create_time: float) -> psutil.Process | None:
    """The live process `pid` if it is the one started at `create_time` (epoch s, as psutil reads
    it; 0.5 s tolerance for the boot-time rounding between readers), else None (gone or recycled)."""
    try:
        p = psutil.Process(pid)
        if abs(p.create_time() - float(create_time)) > 0.5 or p.status() == psutil.STATUS_ZOMBIE:
            return None
        return p
    except (psutil.NoSuchProcess, psutil.AccessDenied, TypeError, ValueError):
        return None


def end_leftovers(pid_dir: Path) -> list[int]:
    """End the runs a dead server left behind: for each pid file in `pid_dir` whose server is gone,
    SIGKILL the launcher (only if its pid still names the process started at the recorded time, so
    a recycled pid is never touched) with every descendant and every process still in its session,
    then delete the file. Runs of a live server are left alone. Call it once at server start,
    before any job. Returns the pids killed (empty when nothing was left). Never raises for
    unreadable files (they are removed); raises OSError only if `pid_dir` exists but cannot be listed.
    """
    return _end_recorded(pid_dir, lambda rec: not (
        rec.get("server_pid") is not None and same_process(int(rec["server_pid"]), rec.get("server_create_time", 0))))


def end_own_runs(pid_dir: Path) -> list[int]:
    """End the runs THIS process recorded in `pid_dir` (as `end_leftovers` does for a dead server's):
    for a server about to exit while an operation has not unwound (app/stdio.py), so no benchmark
    outlives it. Returns the pids killed. Raises OSError only if `pid_dir` cannot be listed."""
    me = os.getpid()
    return _end_recorded(pid_dir, lambda rec: rec.get("server_pid") == me)


def _end_recorded(pid_dir: Path, select) -> list[int]:
    """Kill the recorded runs in `pid_dir` whose record `select(record)` picks (see end_leftovers)."""
    pid_dir = Path(pid_dir)
    if not pid_dir.is_dir():
        return []
    killed: list[int] = []
    for f in sorted(pid_dir.glob("*.json")):
        try:
            rec = json.loads(f.read_text())
            pid, created = int(rec["pid"]), float(rec["create_time"])
        except (OSError, ValueError, KeyError, TypeError):
            f.unlink(missing_ok=True)
            continue
        if not select(rec):
            continue
        launcher = same_process(pid, created)
        if launcher is not None:
            killed += _kill_run(launcher)
        f.unlink(missing_ok=True)
    return killed


def _kill_run(launcher: psutil.Process) -> list[int]:
    """SIGKILL a launcher, its descendants and the other members of its session (processes that
    stayed in the run's session after the launcher lost track of them). Returns the pids killed."""
    procs = {launcher.pid: launcher}
    try:
        for k in launcher.children(recursive=True):
            procs[k.pid] = k
    except psutil.NoSuchProcess:
        pass
    for q in psutil.process_iter():
        try:
            if q.pid not in procs and q.create_time() >= launcher.create_time() and os.getsid(q.pid) == launcher.pid:
                procs[q.pid] = q
        except (psutil.Error, OSError):
            pass
    return kill_all(procs.values())


def run_command(command: str, cwd: Path, env: dict[str, str], timeout_s: float, log_path: Path,
                cancel: threading.Event | None = None, on_start=None, pid_dir: Path | None = None,
                sandbox: Sandbox | None = None) -> RunResult:
    """Run `command` with bash in `cwd`, environment = os.environ + `env`, contained (module docstring).

    When the command ends, every process it started ends too (setsid and double-forked ones
    included); after `timeout_s` seconds, or as soon as `cancel` is set, the whole tree is killed.
    `on_start(pid)` is called once the process exists with the pid of the tree's root (the
    launcher; its descendants are the command's processes). `pid_dir`: a folder where the run is
    recorded while it lasts (`end_leftovers`). `sandbox`: the run's view of the machine
    (kopt_mcp/bench/sandbox.py; None: as the server sees it). exit_code is the command's own exit
    status (in a sandbox, death by signal N reads as 128 + N, bwrap's convention).
    Never raises for the command's own failure: see exit_code / timed_out / cancelled.
    Raises FileNotFoundError if `cwd` does not exist.
    """
    if not cwd.is_dir():
        raise FileNotFoundError(f"workdir {cwd} does not exist: check [benchmark] workdir")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    full_env = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
    started = time.time()
    t0 = time.monotonic()
    timed_out = cancelled = False
    record: Path | None = None
    with log_path.open("wb") as log:
        proc = subprocess.Popen(_launcher_argv(command, sandbox), cwd=cwd, env=full_env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            if pid_dir is not None:
                record = _record_run(Path(pid_dir), proc.pid, command)
            if on_start:
                on_start(proc.pid)
            while True:
                try:
                    proc.wait(timeout=0.05)
                    break
                except subprocess.TimeoutExpired:
                    pass
                if time.monotonic() - t0 > timeout_s:
                    timed_out = True
                elif cancel is not None and cancel.is_set():
                    cancelled = True
                if timed_out or cancelled:
                    _stop_launcher(proc)
                    break
        finally:
            if proc.poll() is None:
                _stop_launcher(proc)
            # The launcher ended its tree; anything left in its process group (no subreaper) ends here.
            kill_tree(proc.pid)
            if record is not None:
                record.unlink(missing_ok=True)
    bound_log(log_path)
    return RunResult(command=command, exit_code=None if (timed_out or cancelled) else proc.returncode,
                     timed_out=timed_out, cancelled=cancelled, started_at=started,
                     duration_s=time.monotonic() - t0, log_path=str(log_path), log_tail=_tail(log_path))
