"""The run's view of the machine: the session's state out of its reach by the operating system.

Every benchmark and profiler run of a snapshot goes through bubblewrap (`bwrap`, the sandbox of
Flatpak; github.com/containers/bubblewrap) where it works: the whole file system as it is
(`--dev-bind / /`, GPUs included), except that the repository's common git directory (which holds
the session's state folder `<git-common-dir>/kopt/<tag>`, the frozen attempt refs and the objects)
is an empty tmpfs, with only the run's own output folder bound back writable; and in a PID
namespace of its own with its own /proc (`--unshare-pid --proc /proc`), so the run sees no other
process: not the server (whose command line names the repository and the tag), not another run.
`--die-with-parent` ends it with its launcher. bwrap drops every capability and sets no_new_privs,
so the run cannot unmount what hides the state (mounts inherited into a user namespace are locked).

Where bwrap is missing or cannot make namespaces (a container without user namespaces, an
AppArmor policy), runs go without it and `status` says so; the referee then checks the state
folder after every run (referee/state_guard.py). `KOPT_SANDBOX=off` turns it off (tests of that
path, or a benchmark bwrap breaks).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SANDBOX_ENV = "KOPT_SANDBOX"
_BASE = ("--dev-bind", "/", "/", "--unshare-pid", "--proc", "/proc", "--die-with-parent")


@dataclass(frozen=True)
class Sandbox:
    """What one run may not see: `hidden` folders (an empty tmpfs in its view) and, under them,
    `writable` folders bound back (the run's own output folder). Absolute paths."""

    hidden: tuple[Path, ...]
    writable: tuple[Path, ...] = ()

    def argv(self, command: list[str]) -> list[str]:
        """`command` wrapped in bwrap with this view (the caller checks `sandbox_problem` first)."""
        args = [shutil.which("bwrap") or "bwrap", *_BASE]
        for h in self.hidden:
            args += ["--tmpfs", str(h)]
        for w in self.writable:
            args += ["--bind", str(w), str(w)]
        return [*args, "--", *command]


@functools.cache
def _probe() -> str | None:
    exe = shutil.which("bwrap")
    if exe is None:
        return "bwrap (bubblewrap) is not installed: apt-get install bubblewrap"
    with tempfile.TemporaryDirectory(prefix="kopt-sandbox-") as tmp:
        try:
            r = subprocess.run([exe, *_BASE, "--tmpfs", tmp, "--", "true"], capture_output=True, text=True,
                               timeout=30, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as e:
            return f"bwrap could not run ({e})"
    if r.returncode != 0:
        return f"bwrap cannot make namespaces here ({' '.join(r.stderr.split())[:200]})"
    return None


def sandbox_problem() -> str | None:
    """Why runs go without the sandbox (None: they go in it). Probed once per process by running
    `true` in it; `KOPT_SANDBOX=off` turns it off."""
    if os.environ.get(SANDBOX_ENV, "").strip().lower() in ("off", "0", "no", "none", "false"):
        return f"turned off by {SANDBOX_ENV}={os.environ[SANDBOX_ENV]}"
    return _probe()


def sandbox_status() -> str:
    """One line for `status`: which sandbox the runs get, or none and why."""
    problem = sandbox_problem()
    if problem is None:
        return ("bwrap: runs see neither the repository's git directory (the state folder included) nor any "
                "other process")
    return (f"none ({problem}): runs can reach the state folder, which is checked after every run "
            "(ledger, state.json, archived patches, attempt refs) and restored")


def run_sandbox(git_dir: Path, run_dir: Path) -> Sandbox | None:
    """The view of one run whose output folder is `run_dir`, in the repository whose common git
    directory is `git_dir`: that directory hidden, `run_dir` writable when it lies inside it. None
    where there is no sandbox (`sandbox_problem`)."""
    if sandbox_problem() is not None:
        return None
    git_dir, run_dir = Path(git_dir).resolve(), Path(run_dir).resolve()
    return Sandbox(hidden=(git_dir,), writable=(run_dir,) if run_dir.is_relative_to(git_dir) else ())
