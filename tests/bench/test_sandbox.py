"""bench/sandbox.py: a run in the sandbox sees the hidden folder empty (its own output folder
excepted, writable) and no process outside it; KOPT_SANDBOX=off turns it off."""

from __future__ import annotations

import os

import pytest

from kopt_mcp.bench.runner import run_command
from kopt_mcp.bench.sandbox import Sandbox, run_sandbox, sandbox_problem, sandbox_status

needs_bwrap = pytest.mark.skipif(sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}")


@needs_bwrap
def test_a_sandboxed_run_sees_the_hidden_folder_empty_but_its_own_output_folder(tmp_path):
    state = tmp_path / "git"
    (state / "kopt").mkdir(parents=True)
    (state / "kopt" / "ledger.jsonl").write_text("secret\n")
    out = state / "kopt" / "runs" / "0001"
    out.mkdir(parents=True)
    cmd = (f"ls -A {state / 'kopt'} > {tmp_path / 'seen'}; echo made > {out / 'trace'}; "
           f"rm -f {state / 'kopt' / 'ledger.jsonl'}; ls /proc | grep -c '^[0-9]' > {tmp_path / 'procs'}; "
           f"test -e /proc/{os.getpid()} && echo visible > {tmp_path / 'server'}; exit 0")
    r = run_command(cmd, tmp_path, {}, 30, tmp_path / "log", sandbox=Sandbox(hidden=(state,), writable=(out,)))
    assert r.exit_code == 0, r.log_tail
    assert (tmp_path / "seen").read_text().split() == ["runs"]  # the ledger is not there in its view
    assert (out / "trace").read_text() == "made\n"
    assert (state / "kopt" / "ledger.jsonl").read_text() == "secret\n"
    assert not (tmp_path / "server").exists()  # the server's pid does not exist in its view
    assert int((tmp_path / "procs").read_text()) < 10  # bwrap, bash and the command's few


def test_off_turns_it_off_and_status_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("KOPT_SANDBOX", "off")
    assert sandbox_problem() == "turned off by KOPT_SANDBOX=off"
    assert run_sandbox(tmp_path, tmp_path / "runs") is None
    assert sandbox_status().startswith("none (turned off by KOPT_SANDBOX=off)")


@needs_bwrap
def test_the_run_folder_is_bound_back_only_when_it_lies_in_the_hidden_one(tmp_path, monkeypatch):
    monkeypatch.delenv("KOPT_SANDBOX", raising=False)
    git_dir = tmp_path / ".git"
    inside, outside = run_sandbox(git_dir, git_dir / "kopt" / "t" / "runs" / "1"), run_sandbox(git_dir, tmp_path / "r")
    assert inside.hidden == (git_dir.resolve(),) and inside.writable == ((git_dir / "kopt/t/runs/1").resolve(),)
    assert outside.writable == ()
    assert sandbox_status().startswith("bwrap")
