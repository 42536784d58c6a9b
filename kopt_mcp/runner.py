"""Run one shell command with a timeout, whole-process-tree kill and bounded log capture.

Output (stdout + stderr) goes to a log file as it comes; only the tail is kept in memory. On
timeout or cancellation the whole process tree is killed (its own session/process group, then any
descendant psutil still sees, e.g. one that called setsid).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
from pydantic import BaseModel

TAIL_BYTES = 4000


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
    for p in kids:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(kids, timeout=5)


def _tail(path: Path) -> str:
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - TAIL_BYTES))
        return f.read().decode("utf-8", errors="replace")


def run_command(command: str, cwd: Path, env: dict[str, str], timeout_s: float, log_path: Path,
                cancel: threading.Event | None = None, on_start=None) -> RunResult:
    """Run `command` with bash in `cwd`, environment = os.environ + `env`.

    Kills the whole process tree after `timeout_s` seconds or as soon as `cancel` is set.
    `on_start(pid)` is called once the process exists (lets callers track their own GPU processes).
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
    with log_path.open("wb") as log:
        proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=full_env, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        if on_start:
            on_start(proc.pid)
        try:
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
                    kill_tree(proc.pid)
                    proc.wait()
                    break
        finally:
            if proc.poll() is None:
                kill_tree(proc.pid)
                proc.wait()
        # A benchmark that forked children and exited leaves them running: end them too.
        kill_tree(proc.pid)
    return RunResult(command=command, exit_code=None if (timed_out or cancelled) else proc.returncode,
                     timed_out=timed_out, cancelled=cancelled, started_at=started,
                     duration_s=time.monotonic() - t0, log_path=str(log_path), log_tail=_tail(log_path))
