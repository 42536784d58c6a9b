"""Run one shell command with a timeout, whole-process-tree kill and bounded log capture.

Output (stdout + stderr) goes to a log file as it comes; only the tail is kept in memory, and once
the command ends the file is cut to its first and last MiB (`bound_log`) so a chatty benchmark
cannot fill the disk across hundreds of runs. On timeout or cancellation the whole process tree is
killed (its own session/process group, then any descendant psutil still sees, e.g. one that called
setsid).
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
LOG_KEEP_BYTES = 1 << 20  # the run log on disk keeps the first and the last MiB of the output


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
    bound_log(log_path)
    return RunResult(command=command, exit_code=None if (timed_out or cancelled) else proc.returncode,
                     timed_out=timed_out, cancelled=cancelled, started_at=started,
                     duration_s=time.monotonic() - t0, log_path=str(log_path), log_tail=_tail(log_path))
