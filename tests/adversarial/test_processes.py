"""Process cheats (issue 11, item 3): what a benchmark leaves running must end with its run.

Each test plants one cheat and asserts it is caught; the module docstring of kopt_mcp/bench/contain.py
says how. Before the launcher (runner with a process-group kill only) every one of them got
through: see benchmarks/results/2026-11-23-cpu-load-robustness.md and the session report.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from kopt_mcp.bench.runner import end_leftovers, run_command
from kopt_mcp.testing.toy import make_toy_repo

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the subreaper is Linux's")


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_for(pred, within_s: float = 10.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.05)
    return pred()


def wait_dead(pids: list[int], within_s: float = 10.0) -> list[int]:
    wait_for(lambda: not any(alive(p) for p in pids), within_s)
    return [p for p in pids if alive(p)]


def pids_in(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()]


@pytest.fixture
def leftovers():
    """Kill whatever a test's cheat left running, also when the test failed."""
    pids: list[int] = []
    yield pids
    for p in pids:
        if alive(p):
            os.kill(p, signal.SIGCONT)
            psutil.Process(p).kill()


def test_a_setsid_child_does_not_outlive_a_run_that_exits_normally(tmp_path, leftovers):
    # before: the child left the run's process group; the group kill missed it and it ran on
    r = run_command("setsid sleep 300 & echo $! > pids; sleep 0.5; exit 0", tmp_path, {}, 30, tmp_path / "log")
    assert r.exit_code == 0
    leftovers.extend(pids_in(tmp_path / "pids"))
    assert wait_dead(leftovers) == []


DAEMON = textwrap.dedent("""\
    import os, sys, time
    if os.fork() == 0:            # first child: new session, forks the daemon, exits at once
        os.setsid()
        pid = os.fork()
        if pid == 0:
            time.sleep(300)       # the daemon, re-parented away from the run
            os._exit(0)
        open("pids", "w").write(str(pid))
        os._exit(0)
    os.wait()
""")


def test_a_double_forked_daemon_does_not_outlive_the_run(tmp_path, leftovers):
    # before: the daemon, orphaned into a session of its own, was re-parented to init and ran on
    (tmp_path / "daemon.py").write_text(DAEMON)
    r = run_command(f"{sys.executable} daemon.py", tmp_path, {}, 30, tmp_path / "log")
    assert r.exit_code == 0
    leftovers.extend(pids_in(tmp_path / "pids"))
    assert wait_dead(leftovers) == []


def test_the_commands_own_exit_status_is_reported(tmp_path):
    assert run_command("exit 3", tmp_path, {}, 30, tmp_path / "log").exit_code == 3
    assert run_command("kill -9 $$", tmp_path, {}, 30, tmp_path / "log").exit_code == -signal.SIGKILL


def test_a_command_that_stops_its_launcher_is_still_killed_on_timeout(tmp_path, leftovers):
    # SIGSTOP the launcher (the command's parent), leave a setsid child, and hang
    cmd = "setsid sleep 300 & echo $! > pids; kill -STOP $PPID; sleep 300"
    t0 = time.monotonic()
    r = run_command(cmd, tmp_path, {}, 1.0, tmp_path / "log")
    assert r.timed_out and time.monotonic() - t0 < 30
    leftovers.extend(pids_in(tmp_path / "pids"))
    assert wait_dead(leftovers) == []


# --- a candidate that pauses the next BEST run (SIGSTOP/SIGCONT from a detached daemon) ----------

TIMING_BENCH = '''\
"""Times kernel.work() (wall clock) and writes results/bench.csv."""
import csv, os, sys, time
sys.path.insert(0, os.getcwd())
t0 = time.perf_counter()
import kernel
kernel.work()
us = (time.perf_counter() - t0) * 1e6
os.makedirs("results", exist_ok=True)
with open("results/bench.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["n", "us_per_call", "err_count"])
    w.writerow([1, us, 0])
'''

HONEST_KERNEL = "import time\n\n\ndef work():\n    time.sleep(0.5)\n"

# The same work(), plus a detached daemon (double fork + setsid) that SIGSTOPs for 1.5 s every
# later bench.py process running in another tree of the same repository than the candidate's (i.e.
# BEST's runs; never a process outside the test's repository).
PAUSING_KERNEL = '''\
import os, signal, time

MARK = "PAUSE-BEST-CHEAT"
LOG = {log!r}
ROOT = {root!r}


def work():
    time.sleep(0.5)


def _pause_best_runs():
    seen, here = set(), os.getcwd()
    end = time.time() + 120
    while time.time() < end:
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) in seen:
                continue
            try:
                cmd = open(f"/proc/{{d}}/cmdline", "rb").read()
                cwd = os.readlink(f"/proc/{{d}}/cwd")
                if b"bench.py" not in cmd or cwd == here or not cwd.startswith(ROOT):
                    continue
            except OSError:
                continue
            seen.add(int(d))
            time.sleep(0.25)  # inside the timed work, after python's start-up
            try:
                os.kill(int(d), signal.SIGSTOP)
                time.sleep(1.5)
                os.kill(int(d), signal.SIGCONT)
                open(LOG, "a").write(f"paused {{d}}\\n")
            except OSError:
                pass
        time.sleep(0.01)


if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open(LOG, "a").write(f"daemon {{os.getpid()}}\\n")
        _pause_best_runs()
        os._exit(0)
    os._exit(0)
'''


def _daemons(log: Path) -> list[int]:
    if not log.exists():
        return []
    return [int(line.split()[1]) for line in log.read_text().splitlines() if line.startswith("daemon")]


def test_a_detached_child_cannot_pause_the_next_best_run(tmp_path, make_referee, leftovers, monkeypatch):
    # before: the daemon outlived the candidate's run and paused the BEST run of the next attempt:
    # an identical kernel was ruled `improved` (BEST looked 1.5 s slower)
    # the launcher alone is tested: in the sandbox's PID namespace the daemon would log pids this
    # test cannot end (and could see no other run at all)
    monkeypatch.setenv("KOPT_SANDBOX", "off")
    repo = make_toy_repo(tmp_path / "repo", {"1": 1.0})
    cfg = repo / "kopt.toml"
    cfg.write_text(cfg.read_text().replace("noise_pct = 1.0", "noise_pct = 20.0"))  # sleep(0.5) jitters
    (repo / "bench.py").write_text(TIMING_BENCH)
    (repo / "kernel.py").write_text(HONEST_KERNEL)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qam", "timing bench"],
                   cwd=repo, check=True)
    log = tmp_path / "cheat.log"
    ref = make_referee(repo)
    ref.run_benchmark()
    (ref.where.workspace_path / "kernel.py").write_text(PAUSING_KERNEL.format(log=str(log), root=str(repo)))
    first = ref.save_and_test("global", "same work, plus a daemon that pauses BEST")
    daemons = _daemons(log)
    leftovers.extend(daemons)
    assert daemons, "the cheat never started: the test no longer tests anything"
    if first.verdict == "improved":
        ref.revert_to_best("not the point of this test")
    (ref.where.workspace_path / "kernel.py").write_text(HONEST_KERNEL + "# unchanged work\n")
    second = ref.save_and_test("global", "identical kernel, measured after the daemon's attempt")
    assert wait_dead(daemons) == []
    assert "paused" not in log.read_text()
    assert (first.verdict, second.verdict) != ("improved", "improved")
    assert second.verdict != "improved", second.reason


# --- a server killed while its benchmark runs ---------------------------------------------------

SERVER = textwrap.dedent("""\
    import sys
    from pathlib import Path
    from kopt_mcp.bench.runner import run_command
    work, pid_dir = Path(sys.argv[1]), Path(sys.argv[2])
    run_command("sleep 300 & echo $! > pids; setsid sleep 300 & echo $! >> pids; sleep 300",
                work, {}, 600, work / "log", pid_dir=pid_dir)
""")


def _start_server(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    (tmp_path / "server.py").write_text(SERVER)
    pid_dir = tmp_path / "pids.d"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    server = subprocess.Popen([sys.executable, str(tmp_path / "server.py"), str(tmp_path), str(pid_dir)], env=env)
    assert wait_for(lambda: (tmp_path / "pids").exists() and len(pids_in(tmp_path / "pids")) == 2, 30)
    return server, pid_dir


def test_a_sigkilled_servers_benchmark_ends_with_it(tmp_path, leftovers):
    # before: the benchmark (in a session of its own) ran on into the next job
    server, pid_dir = _start_server(tmp_path)
    bench = pids_in(tmp_path / "pids")
    leftovers.extend(bench)
    [rec] = [json.loads(f.read_text()) for f in pid_dir.glob("*.json")]  # recorded while it lasts
    leftovers.append(rec["pid"])
    server.kill()
    server.wait()
    assert wait_dead([*bench, rec["pid"]]) == []  # the launcher saw its server die and ended the tree
    assert end_leftovers(pid_dir) == [] and list(pid_dir.glob("*.json")) == []


def test_a_restarted_server_ends_what_a_dead_server_left_running(tmp_path, leftovers):
    # the launcher could not act on the server's death (stopped here): the next server must
    server, pid_dir = _start_server(tmp_path)
    bench = pids_in(tmp_path / "pids")
    [rec] = [json.loads(f.read_text()) for f in pid_dir.glob("*.json")]
    launcher = rec["pid"]
    leftovers.extend([launcher, *bench])
    os.kill(launcher, signal.SIGSTOP)
    server.kill()
    server.wait()
    time.sleep(0.5)
    assert all(alive(p) for p in bench)  # left running by the dead server
    killed = end_leftovers(pid_dir)
    assert set(killed) >= {launcher, *bench}
    assert wait_dead([launcher, *bench]) == []
    assert list(pid_dir.glob("*.json")) == []


def test_end_leftovers_never_kills_a_recycled_pid(tmp_path, leftovers):
    other = subprocess.Popen(["sleep", "300"])
    leftovers.append(other.pid)
    pid_dir = tmp_path / "pids.d"
    pid_dir.mkdir()
    created = psutil.Process(other.pid).create_time()
    (pid_dir / f"{other.pid}.json").write_text(json.dumps(
        {"pid": other.pid, "create_time": created - 3600, "server_pid": 1, "server_create_time": 0}))
    (pid_dir / "garbage.json").write_text("{not json")
    assert end_leftovers(pid_dir) == []
    assert alive(other.pid) and list(pid_dir.glob("*.json")) == []
    other.kill()
    other.wait()


def test_end_leftovers_leaves_the_runs_of_a_live_server_alone(tmp_path, leftovers):
    server, pid_dir = _start_server(tmp_path)
    bench = pids_in(tmp_path / "pids")
    leftovers.extend(bench)
    try:
        assert end_leftovers(pid_dir) == []
        assert all(alive(p) for p in bench) and len(list(pid_dir.glob("*.json"))) == 1
    finally:
        server.kill()
        server.wait()
    assert wait_dead(bench) == []
