"""Landing a keep: `[commit] include` result files come from the re-measure's run of the tested tree
(never the workspace's copy), and a commit result says why `formatted` is what it is."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from kopt_mcp.bench.measure import INCLUDE_DIR
from kopt_mcp.config import load_config
from kopt_mcp.errors import ConfigError
from kopt_mcp.testing.toy import make_toy_repo, set_kernel

#: appended to the toy bench.py: a tracked results table rewritten on every run, from the kernel's numbers
WRITES_TABLE = 'open("results.md", "w").write(f"n=1 {kernel.TIMES[\'1\']} us, run {k}\\n")\n'


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def _repo(tmp_path: Path, extra: str = "") -> Path:
    repo = make_toy_repo(tmp_path / "r", {"1": 100.0, "2": 200.0})
    (repo / "results.md").write_text("n=1 100.0 us (stale)\n")
    (repo / "bench.py").write_text((repo / "bench.py").read_text() + WRITES_TABLE)
    (repo / "kopt.toml").write_text((repo / "kopt.toml").read_text() + extra)
    _git(repo, "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qm", "tracked results table")
    return repo


def test_an_included_result_file_is_committed_as_the_remeasure_wrote_it(tmp_path, make_referee):
    r = make_referee(_repo(tmp_path, '\n[commit]\ninclude = ["results.md"]\n'))
    r.run_benchmark()
    assert r.books.state.benchmark_outputs == ["results.md"]
    set_kernel(r.where.workspace_path, {"1": 50.0, "2": 100.0})
    (r.where.workspace_path / "results.md").write_text("n=1 1.0 us (typed by the agent)\n")
    assert r.save_and_test("global", "halve").verdict == "improved"
    c = r.commit_improvement("halve")
    assert c.committed and c.included == ["results.md"]
    committed = _git(r.where.workspace_path, "show", f"{c.commit}:results.md")
    assert committed.startswith("n=1 50.0 us, run ")  # the candidate's own run, not the agent's text
    runs = sorted(Path(r.where.state_dir, "runs").glob(f"0001-commit-candidate*/{INCLUDE_DIR}/results.md"))
    assert [p.read_text() for p in runs] == [committed]  # exactly the commit re-measure's copy
    assert "results.md" in r.where.repo.commit(c.commit).message  # the commit says which files it took
    assert _git(r.where.workspace_path, "status", "--porcelain") == ""


def test_without_include_a_commit_keeps_bests_version_and_says_no_formatter(tmp_path, make_referee):
    r = make_referee(_repo(tmp_path))
    r.run_benchmark()
    set_kernel(r.where.workspace_path, {"1": 50.0, "2": 100.0})
    assert r.save_and_test("global", "halve").verdict == "improved"
    c = r.commit_improvement("halve")
    assert c.committed and c.included == []
    assert _git(r.where.workspace_path, "show", f"{c.commit}:results.md") == "n=1 100.0 us (stale)\n"
    assert (c.formatted, c.format_status) == (False, "not_configured")


def test_a_formatter_that_changes_nothing_says_so(tmp_path, make_referee):
    r = make_referee(_repo(tmp_path, '\n[format]\ncommand = "true"\n'))
    r.run_benchmark()
    set_kernel(r.where.workspace_path, {"1": 50.0, "2": 100.0})
    assert r.save_and_test("global", "halve").verdict == "improved"
    c = r.commit_improvement("halve")
    assert c.committed and (c.formatted, c.format_status) == (False, "unchanged")


@pytest.mark.parametrize("include, complaint", [
    (["results/*.csv"], "no globs"), (["../x.csv"], "no globs"), (["/abs.csv"], "no globs"),
    (["bench.py"], "protected path(s) bench.py"), (["performance.md"], "protected path(s) performance.md"),
    (["kopt.toml"], "kopt.toml is the config"),
])
def test_include_takes_plain_unprotected_paths_only(tmp_path, include, complaint):
    repo = make_toy_repo(tmp_path / "r", {"1": 100.0})
    cfg = repo / "kopt.toml"
    cfg.write_text(cfg.read_text() + f"\n[commit]\ninclude = {include!r}\n".replace("'", '"'))
    with pytest.raises(ConfigError, match=r"\[commit\] include") as e:
        load_config(cfg)
    assert complaint in str(e.value)


def test_the_stop_summary_says_how_to_land_the_branch(ref):
    from kopt_mcp.referee.recovery import stop

    set_kernel(ref.where.workspace_path, {"1": 50.0, "2": 100.0})
    assert ref.save_and_test("global", "halve").verdict == "improved"
    keep = ref.commit_improvement("halve").commit
    with ref.lock:
        stop(ref, "enough")
        ref.books.save()
    summary = (ref.where.workspace_path / "performance.md").read_text().split("## Stop Summary", 1)[1]
    assert "`git merge kernel-opt/t`" in summary
    assert "--grep='^kopt-mcp attempt'" in summary and "kopt: baseline" in summary
    assert "measure_session_gain" in summary  # no gain measured yet: the summary names how to measure it
    # the grep the summary gives finds exactly the keep commits on the branch
    shown = _git(ref.where.workspace_path, "log", "--reverse", "--grep=^kopt-mcp attempt", "--format=%H", "kernel-opt/t")
    assert shown.split() == [keep]
