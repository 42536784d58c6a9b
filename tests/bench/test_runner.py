"""The runner: real subprocesses, exit code, bounded log tail, whole-tree kill on timeout/cancel."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psutil
import pytest

from kopt_mcp.bench.runner import TAIL_BYTES, run_command


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_dead(pids: list[int], within_s: float = 5.0) -> list[int]:
    """The pids still alive after `within_s` seconds (SIGKILL delivery is asynchronous)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.05)
    return [p for p in pids if alive(p)]


def pids_in(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()]


@pytest.fixture
def cleanup():
    """Kill anything a failing test left behind."""
    pids: list[int] = []
    yield pids
    for p in pids:
        if alive(p):
            psutil.Process(p).kill()


def test_exit_code_zero_is_captured(tmp_path):
    r = run_command("true", tmp_path, {}, 10, tmp_path / "log")
    assert (r.exit_code, r.timed_out, r.cancelled) == (0, False, False)


def test_nonzero_exit_code_is_captured(tmp_path):
    r = run_command("exit 7", tmp_path, {}, 10, tmp_path / "log")
    assert (r.exit_code, r.timed_out, r.cancelled) == (7, False, False)


def test_stdout_and_stderr_go_to_the_log_and_tail(tmp_path):
    log = tmp_path / "runs" / "1" / "log.txt"
    r = run_command("echo to-stdout; echo to-stderr >&2", tmp_path, {}, 10, log)
    text = log.read_text()
    assert "to-stdout" in text and "to-stderr" in text
    assert r.log_path == str(log)
    assert "to-stdout" in r.log_tail and "to-stderr" in r.log_tail


def test_large_output_is_fully_logged_and_tail_is_bounded(tmp_path):
    log = tmp_path / "log"
    cmd = "python3 -c \"import sys; [print(f'line {i:06d} ' + 'x' * 40) for i in range(5000)]; print('THE-END')\""
    r = run_command(cmd, tmp_path, {}, 30, log)
    assert r.exit_code == 0
    assert log.stat().st_size > 100_000
    assert "line 000000" in log.read_text()
    assert len(r.log_tail) <= TAIL_BYTES
    assert r.log_tail.rstrip().endswith("THE-END")
    assert "line 000000" not in r.log_tail


def test_command_runs_in_cwd(tmp_path):
    (tmp_path / "marker.txt").write_text("here")
    r = run_command("cat marker.txt", tmp_path, {}, 10, tmp_path / "log")
    assert r.exit_code == 0 and "here" in r.log_tail


def test_env_is_passed_on_top_of_os_environ(tmp_path, monkeypatch):
    monkeypatch.setenv("KOPT_TEST_INHERITED", "inherited")
    r = run_command('echo "$CUDA_VISIBLE_DEVICES/$KOPT_TEST_INHERITED"', tmp_path,
                    {"CUDA_VISIBLE_DEVICES": "3"}, 10, tmp_path / "log")
    assert "3/inherited" in r.log_tail


def test_missing_cwd_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        run_command("true", tmp_path / "missing", {}, 10, tmp_path / "log")


def test_started_at_and_duration_are_recorded(tmp_path):
    before = time.time()
    r = run_command("sleep 0.2", tmp_path, {}, 10, tmp_path / "log")
    assert before <= r.started_at <= time.time()
    assert 0.2 <= r.duration_s < 5


def test_on_start_receives_the_process_id_of_the_trees_root(tmp_path):
    seen = []
    run_command("echo $PPID > pid", tmp_path, {}, 10, tmp_path / "log", on_start=seen.append)
    assert seen == pids_in(tmp_path / "pid")  # the launcher: the command's parent


def test_timeout_kills_the_whole_tree_including_background_grandchild(tmp_path, cleanup):
    cmd = "echo $$ > pids; sleep 300 & echo $! >> pids; sleep 300"
    t0 = time.monotonic()
    r = run_command(cmd, tmp_path, {}, 0.5, tmp_path / "log")
    assert time.monotonic() - t0 < 15
    assert (r.timed_out, r.cancelled, r.exit_code) == (True, False, None)
    pids = pids_in(tmp_path / "pids")
    cleanup.extend(pids)
    assert len(pids) == 2
    assert wait_dead(pids) == []


def test_timeout_kills_a_descendant_in_its_own_session(tmp_path, cleanup):
    cmd = "setsid sleep 300 & echo $! > pids; wait"
    r = run_command(cmd, tmp_path, {}, 0.5, tmp_path / "log")
    assert r.timed_out is True
    pids = pids_in(tmp_path / "pids")
    cleanup.extend(pids)
    assert wait_dead(pids) == []


def test_forked_child_is_killed_after_the_command_exits(tmp_path, cleanup):
    cmd = "sleep 300 & echo $! > pids; exit 0"
    r = run_command(cmd, tmp_path, {}, 30, tmp_path / "log")
    assert (r.exit_code, r.timed_out) == (0, False)
    pids = pids_in(tmp_path / "pids")
    cleanup.extend(pids)
    assert wait_dead(pids) == []


def test_cancel_event_kills_the_tree(tmp_path, cleanup):
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t0 = time.monotonic()
    r = run_command("sleep 300 & echo $! > pids; sleep 300", tmp_path, {}, 60, tmp_path / "log", cancel=cancel)
    assert time.monotonic() - t0 < 15
    assert (r.cancelled, r.timed_out, r.exit_code) == (True, False, None)
    pids = pids_in(tmp_path / "pids")
    cleanup.extend(pids)
    assert wait_dead(pids) == []


def test_unset_cancel_event_changes_nothing(tmp_path):
    r = run_command("exit 0", tmp_path, {}, 10, tmp_path / "log", cancel=threading.Event())
    assert (r.exit_code, r.cancelled) == (0, False)


def test_output_before_timeout_is_kept(tmp_path):
    r = run_command("echo started; sleep 300", tmp_path, {}, 0.5, tmp_path / "log")
    assert r.timed_out and "started" in r.log_tail



def test_the_run_is_recorded_in_pid_dir_while_it_lasts(tmp_path):
    pid_dir = tmp_path / "pids.d"
    seen = []
    r = run_command(f"sleep 0.5; ls {pid_dir} > listed", tmp_path, {}, 30, tmp_path / "log",
                    on_start=seen.append, pid_dir=pid_dir)
    assert r.exit_code == 0
    assert (tmp_path / "listed").read_text().split() == [f"{seen[0]}.json"]
    assert list(pid_dir.iterdir()) == []  # removed when the run ended


def test_end_own_runs_kills_this_servers_recorded_runs_and_leaves_others(tmp_path, cleanup):
    """What a stdio server about to exit does with an operation that did not unwind (app/stdio.py):
    its own recorded runs end (their whole tree); a record of another live server is left alone."""
    import json
    import os
    import subprocess
    import sys

    from kopt_mcp.bench.runner import end_own_runs

    pid_dir = tmp_path / "pids.d"
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # another live "server"
    cleanup.append(other.pid)
    pid_dir.mkdir()
    (pid_dir / f"{other.pid}.json").write_text(json.dumps({
        "pid": other.pid, "create_time": psutil.Process(other.pid).create_time(),
        "server_pid": os.getppid(), "server_create_time": psutil.Process(os.getppid()).create_time()}))
    box = {}
    t = threading.Thread(target=lambda: box.update(r=run_command(
        "sleep 300 & echo $! > pids; sleep 300", tmp_path, {}, 600, tmp_path / "log", pid_dir=pid_dir)))
    t.start()
    deadline = time.monotonic() + 10
    while not (tmp_path / "pids").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = pids_in(tmp_path / "pids")
    cleanup.extend(grandchild)
    killed = end_own_runs(pid_dir)
    t.join(15)
    assert not t.is_alive() and box["r"].exit_code is not None  # the run returned: its tree was killed
    assert set(grandchild) <= set(killed) and wait_dead(grandchild) == []
    assert other.pid not in killed and alive(other.pid)
    other.kill()
