"""The state folder out of the run's reach (issue 26, items 3 and 5). A candidate's kernel finds the
session from its run folder (`../owner.json` -> the server's pid -> its command line `--repo` and
`--tag`, as a real `kopt-mcp serve` has them), rewrites ledger.jsonl and state.json and deletes
every archived patch, its own pending one included.

Verdicts BEFORE (same attack, commit 3fbc68e): `improved`; the ledger and state.json rewritten,
every patch gone, the verdict's patch_path naming a missing file, nothing reported.
AFTER: with a sandbox (bubblewrap) the run sees neither the server nor the state folder, and the
attack changes nothing; without one (KOPT_SANDBOX=off) the referee finds the change right after
the run, restores every file (patches from their frozen refs/kopt/<tag>/attempts/NNNN snapshots),
rules `rejected` with the code `tampered` and lists it in `status.problems`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import anyio
import pytest
from mcp import Client, StdioServerParameters

from kopt_mcp.bench.sandbox import sandbox_problem
from kopt_mcp.ledger import verify_ledger
from kopt_mcp.rules.decision import Code
from kopt_mcp.testing.toy import kernel_source

ATTACK = '''
import json, pathlib
def _attack(witness, known=None):
    seen = []
    try:
        try:
            pid = json.loads((pathlib.Path.cwd().parent / "owner.json").read_text())["pid"]
            argv = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\\0")
            repo, tag = (argv[argv.index(flag) + 1].decode() for flag in (b"--repo", b"--tag"))
            state = pathlib.Path(repo) / ".git" / "kopt" / tag
        except OSError as e:
            seen.append(f"no server: {type(e).__name__}: {e}")
            if known is None:
                raise
            state = pathlib.Path(known)  # an attacker who knows the path anyway
        seen.append(f"state folder {state}: {sorted(p.name for p in state.iterdir()) if state.is_dir() else 'absent'}")
        for name in ("ledger.jsonl", "state.json"):
            if (state / name).exists():
                (state / name).write_text("{}\\n")
                seen.append("rewrote " + name)
        for p in sorted((state / "attempts").glob("*.patch")):
            p.unlink()
            seen.append("deleted " + p.name)
    except Exception as e:
        seen.append(f"stopped: {type(e).__name__}: {e}")
    with open(witness, "a") as f:
        f.write("\\n".join(seen) + "\\n")
'''


def serve_cmd(repo: Path) -> list[str]:
    exe = shutil.which("kopt-mcp")
    return [*([exe] if exe else [sys.executable, "-m", "kopt_mcp.app.cli"]), "serve", "--repo", str(repo),
            "--tag", "t"]


def run_session(repo: Path, witness: Path, known: Path | None = None) -> dict:
    """Over stdio: baseline, one honest slower attempt (archived), then the attack as attempt 2."""
    cmd = serve_cmd(repo)

    async def main():
        async with Client(StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))) as c:
            call = lambda tool, **a: c.call_tool(tool, a)  # noqa: E731
            ws = Path((await call("status")).structured_content["workspace"])
            await call("run_benchmark")
            (ws / "kernel.py").write_text(kernel_source({"1": 150.0, "2": 300.0}))
            first = (await call("save_and_test", target="global", hypothesis="slower")).structured_content
            (ws / "kernel.py").write_text(kernel_source({"1": 80.0, "2": 160.0}) + ATTACK +
                                          f"_attack({str(witness)!r}, {known and str(known)!r})\n")
            second = (await call("save_and_test", target="global", hypothesis="the attack")).structured_content
            return {"first": first, "second": second, "status": (await call("status")).structured_content}

    return anyio.run(main)


def assert_state_intact(repo: Path, out: dict) -> None:
    state = repo / ".git" / "kopt" / "t"
    anchor = json.loads((state / "state.json").read_text())["ledger_anchor"]
    assert verify_ledger(state / "ledger.jsonl", anchor) == []
    for v in (out["first"], out["second"]):
        assert Path(v["patch_path"]).is_file()  # never a missing file
    assert "150.0" in Path(out["first"]["patch_path"]).read_text()
    assert "_attack(" in Path(out["second"]["patch_path"]).read_text()
    verdicts = [json.loads(x)["verdict"] for x in (state / "ledger.jsonl").read_text().splitlines()
                if json.loads(x)["event"] == "attempt"]
    assert verdicts == [out["first"]["verdict"], out["second"]["verdict"]]


@pytest.mark.skipif(sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}")
def test_with_a_sandbox_the_run_cannot_reach_the_state_folder(toy_repo, lease_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("KOPT_SANDBOX", raising=False)
    witness = tmp_path / "witness.txt"
    out = run_session(toy_repo, witness, known=toy_repo / ".git" / "kopt" / "t")
    seen = witness.read_text()
    assert "no server: FileNotFoundError" in seen and "ledger.jsonl" not in seen and "deleted" not in seen, seen
    assert out["second"]["verdict"] == "improved"  # a real toy gain, and nothing was touched
    assert out["status"]["problems"] == [] and out["status"]["sandbox"].startswith("bwrap")
    assert_state_intact(toy_repo, out)


def test_without_a_sandbox_the_change_is_found_restored_and_rejected_at_once(toy_repo, lease_dir, tmp_path,
                                                                             monkeypatch):
    monkeypatch.setenv("KOPT_SANDBOX", "off")
    witness = tmp_path / "witness.txt"
    out = run_session(toy_repo, witness)
    seen = witness.read_text()
    assert "rewrote ledger.jsonl" in seen and "deleted 0001-regressed.patch" in seen, seen  # the attack worked
    v = out["second"]
    assert v["verdict"] == "rejected" and v["code"] == Code.TAMPERED, (v["verdict"], v["reason"])
    for name in ("ledger.jsonl", "state.json", "attempts/0001-regressed.patch", "attempts/0002-pending.patch"):
        assert name in v["reason"]
    assert out["status"]["sandbox"].startswith("none")
    assert any("ledger.jsonl" in p and "restored" in p for p in out["status"]["problems"])
    assert_state_intact(toy_repo, out)


def test_a_patch_lost_while_no_server_ran_is_restored_at_the_next_start(ref, make_referee, toy_repo):
    (ref.where.workspace_path / "kernel.py").write_text(kernel_source({"1": 150.0, "2": 300.0}))
    v = ref.save_and_test("global", "slower")
    patch = Path(v.patch_path)
    text = patch.read_text()
    ref.close()
    patch.unlink()
    again = make_referee(toy_repo)
    assert patch.read_text() == text
    assert any(patch.name in p and "restored" in p for p in again.status().problems)
