"""benchmarks/real_repos/detached.sh: a device command longer than one call runs in a process session
of its own, and each call waits for it a while and brings back what it wrote. On the CPU: a command
that sleeps 3 s against a first wait of 0 s (running, exit 3) and a second of 60 s (ended: its exit
status, its files); a large file comes back only once the command ended. Large margins only: a loaded
machine cannot flip what is asserted."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "real_repos" / "detached.sh"
COMMAND = 'echo first > "$OUT/a.txt"; sleep 3; echo second >> "$OUT/a.txt"; exit 5'


def _call(tmp_path: Path, wait_s: int, *args: str, out_name: str = "out") -> subprocess.CompletedProcess:
    out = tmp_path / out_name
    out.mkdir(exist_ok=True)
    env = {**os.environ, "DETACH_DIR": str(tmp_path / "state"), "OUT": str(out), "WAIT_S": str(wait_s)}
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=120)


def test_a_long_command_runs_on_between_calls_and_each_call_brings_back_its_files(tmp_path):
    first = _call(tmp_path, 0, "job", COMMAND)
    assert first.returncode == 3, first.stderr
    assert first.stdout.startswith("job: started (pid ") and "job: running after" in first.stdout
    pid = int((tmp_path / "state" / "job" / "pid").read_text())
    try:
        assert os.getsid(pid) == pid  # a session of its own: the device service leaves it running
    except ProcessLookupError:
        pass  # it already ended (a very slow first call); the second call still finds its status
    second = _call(tmp_path, 60, "job", COMMAND)
    assert second.returncode == 0 and "job: exit 5 after" in second.stdout and "started" not in second.stdout
    assert (tmp_path / "out" / "a.txt").read_text() == "first\nsecond\n"
    assert (tmp_path / "out" / "detached-job.log").is_file()


def test_while_it_runs_a_call_brings_back_small_files_only(tmp_path):
    big = 'head -c 2097152 /dev/zero > "$OUT/work.tgz.aa"; echo log > "$OUT/small.txt"; sleep 8'
    first = _call(tmp_path, 3, "tar", big, out_name="out1")
    if first.returncode == 3:  # still running (it sleeps 8 s): the 2 MiB file stays behind
        assert not (tmp_path / "out1" / "work.tgz.aa").exists()
        assert (tmp_path / "out1" / "detached-tar.log").is_file()
    second = _call(tmp_path, 60, "tar", big, out_name="out2")
    assert second.returncode == 0
    assert (tmp_path / "out2" / "work.tgz.aa").stat().st_size == 2097152
    assert (tmp_path / "out2" / "small.txt").read_text() == "log\n"


def test_bad_arguments_say_how_to_call_it(tmp_path):
    r = _call(tmp_path, 0, "job")
    assert r.returncode == 2 and "usage:" in r.stderr
