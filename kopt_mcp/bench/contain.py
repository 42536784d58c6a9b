"""The run launcher: one command under a child subreaper; when it ends, every descendant ends too.

    python -I /path/to/kopt_mcp/bench/contain.py -- bash -c CMD

Linux: the launcher marks itself a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so a process
the command leaves behind (a child started with setsid, a double-forked daemon) is re-parented to
the launcher instead of init, and stays in its process tree. When the command exits, or when the
launcher gets SIGTERM/SIGINT/SIGHUP (the runner's timeout or cancel), the launcher SIGKILLs every
descendant it still has, reaps them, and only then ends. It also asks the kernel for SIGTERM when
the process that started it dies (PR_SET_PDEATHSIG), so a SIGKILLed server does not leave its
benchmark running into the next job.

Exit status: the command's own (the same exit code, or death by the same signal); 127 when the
command could not be started; 128 + signal number when the launcher itself was told to stop.

Run as a file with `python -I` (not `-m` from the benchmark's directory), so that nothing in the
tree under test can shadow it; it imports only the standard library and psutil.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import signal
import sys
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
KILL_ROUNDS_S = 10.0  # the most time spent killing descendants that keep forking


class _Stop(Exception):
    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _prctl(option: int, arg: int) -> bool:
    """prctl(option, arg) through libc; False where it is not available (not Linux) or fails."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(option, ctypes.c_ulong(arg), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _reap() -> None:
    """Collect every child that has exited (zombies), without waiting."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_descendants() -> list[int]:
    """SIGKILL every descendant of this process, round after round (a descendant that forks while
    being killed leaves orphans, which the subreaper then owns), and reap them. Returns the pids
    signalled. Gives up after KILL_ROUNDS_S seconds of descendants that keep appearing."""
    import psutil

    me = psutil.Process()
    killed: list[int] = []
    deadline = time.monotonic() + KILL_ROUNDS_S
    while time.monotonic() < deadline:
        try:
            kids = [k for k in me.children(recursive=True)]
        except psutil.Error:
            kids = []
        live = []
        for k in kids:
            try:
                if k.status() != psutil.STATUS_ZOMBIE:
                    k.send_signal(signal.SIGKILL)
                    live.append(k.pid)
            except psutil.NoSuchProcess:
                pass
        killed += [p for p in live if p not in killed]
        _reap()
        if not kids:
            break
        time.sleep(0.01)
    _reap()
    return killed


def _exit_like(status: int) -> None:
    """End this process the way the command ended (`status` from waitpid)."""
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # the launcher's own core is of no use
        try:
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        except (OSError, ValueError):  # SIGKILL / SIGSTOP: no handler to reset
            pass
        os.kill(os.getpid(), sig)
        time.sleep(1)  # a signal whose default is not to terminate: fall through
        os._exit(128 + sig)
    os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1)


def main(argv: list[str]) -> None:
    """Run argv (after `--`) contained; never returns."""
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        print("usage: contain.py -- COMMAND [ARG...]", file=sys.stderr)
        os._exit(2)
    parent = os.getppid()
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

    def stop(signum, _frame):
        raise _Stop(signum)

    for s in STOP_SIGNALS:
        signal.signal(s, stop)
    status: int | None = None
    try:
        if os.getppid() != parent:  # the starter died before PDEATHSIG was armed
            raise _Stop(signal.SIGTERM)
        try:
            # Python ignores SIGPIPE and SIGXFSZ; the command gets the defaults back (as subprocess does)
            pid = os.posix_spawnp(argv[0], argv, os.environ, setsigdef=(signal.SIGPIPE, signal.SIGXFSZ))
        except OSError as e:
            print(f"kopt-mcp contain: cannot start {argv[0]!r}: {e}", file=sys.stderr)
            os._exit(127)
        while status is None:
            try:
                got, st = os.waitpid(-1, 0)  # also reaps orphans handed to the subreaper
            except ChildProcessError:
                break
            if got == pid:
                status = st
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
    except _Stop as e:
        for s in STOP_SIGNALS:
            signal.signal(s, signal.SIG_IGN)
        end_descendants()
        os._exit(128 + e.signum)
    end_descendants()
    _exit_like(status if status is not None else 0)

if __name__ == "__main__":
    main(sys.argv[1:])
