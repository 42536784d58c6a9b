"""Disposable checkouts (referee/measure.py): every run gets a plain export of its snapshot outside
the workspace and the repository, removed afterwards; a dead server's leftovers are swept."""

from __future__ import annotations

import json
import os
import subprocess

import git

from kopt_mcp import vcs
from kopt_mcp.bench.measure import OWNER_FILE, PREDATE_S, checkout, sweep_stale_checkouts
from kopt_mcp.testing.toy import make_toy_repo


def test_a_checkout_is_a_dated_plain_copy_removed_after_use(tmp_path, monkeypatch):
    import time

    monkeypatch.setenv("KOPT_RUN_ROOT", str(tmp_path / "runs"))
    repo = git.Repo(make_toy_repo(tmp_path / "repo", {"1": 1.0}))
    tree = vcs.tree_of(repo, "HEAD")
    with checkout(repo, tree, "repo") as co:
        assert co.parent.parent == tmp_path / "runs" and co.name == "repo"
        assert sorted(p.name for p in co.iterdir()) == [".gitignore", "bench.py", "kernel.py", "kopt.toml"]
        assert (co / "kernel.py").stat().st_mtime < time.time() - PREDATE_S / 2  # older than any run
        assert json.loads((co.parent / OWNER_FILE).read_text())["pid"] == os.getpid()
        assert vcs.run_changes(repo, tree, co) == []
    assert list((tmp_path / "runs").iterdir()) == []


def test_a_dead_servers_checkout_is_swept_and_others_are_left(tmp_path, monkeypatch):
    runs = tmp_path / "runs"
    monkeypatch.setenv("KOPT_RUN_ROOT", str(runs))
    dead = subprocess.Popen(["true"])
    dead.wait()
    for name, pid in (("kopt-run-dead", dead.pid), ("kopt-run-live", os.getpid())):
        (runs / name / "repo").mkdir(parents=True)
        (runs / name / OWNER_FILE).write_text(json.dumps({"pid": pid}))
    (runs / "kopt-run-foreign").mkdir()
    assert sweep_stale_checkouts() == [runs / "kopt-run-dead"]
    assert sorted(p.name for p in runs.iterdir()) == ["kopt-run-foreign", "kopt-run-live"]
