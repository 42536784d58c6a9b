"""The session's files: atomic writes, ledger, attempt archive, run folders, performance.md, state."""

from __future__ import annotations

import json
import os
import stat

import pytest

from kopt_mcp.ledger import PERF_HEADER, PerfRow, Store, append_perf_rows, append_perf_text, atomic_write
from kopt_mcp.rules.repair import RepairState
from kopt_mcp.rules.stop import RegressionCounter, RegressionNote
from kopt_mcp.session import Best, Phase, SessionState


def row(**kw) -> PerfRow:
    base = dict(date="2025-01-01T00:00:00+00:00", commit="0123456789abcdef0123", status="keep",
                command="python bench.py", target="n=1", kernel="softmax", metric="n=1: 9.5",
                gpu_time="9.1", change="+5.00%", explanation="vectorized loads")
    base.update(kw)
    return PerfRow(**base)


# --- atomic_write ---------------------------------------------------------------------------------


def test_atomic_write_creates_parent_folders_and_file(tmp_path):
    p = tmp_path / "a" / "b" / "state.json"
    atomic_write(p, "hello")
    assert p.read_text() == "hello"


def test_atomic_write_replaces_content(tmp_path):
    p = tmp_path / "state.json"
    atomic_write(p, "old content that is longer")
    atomic_write(p, "new")
    assert p.read_text() == "new"


def test_atomic_write_leaves_no_temp_files(tmp_path):
    p = tmp_path / "state.json"
    for i in range(3):
        atomic_write(p, f"v{i}")
    assert sorted(os.listdir(tmp_path)) == ["state.json"]


def test_failed_atomic_write_keeps_old_content_and_no_temp_file(tmp_path):
    p = tmp_path / "state.json"
    atomic_write(p, "old")
    with pytest.raises(UnicodeEncodeError):
        atomic_write(p, "bad \ud800 surrogate")
    assert p.read_text() == "old"
    assert sorted(os.listdir(tmp_path)) == ["state.json"]


def test_atomic_write_keeps_the_mode_of_an_existing_file(tmp_path):
    p = tmp_path / "performance.md"
    p.write_text("x")
    p.chmod(0o644)
    atomic_write(p, "y")
    assert stat.S_IMODE(p.stat().st_mode) == 0o644


def test_atomic_write_gives_a_new_file_the_umask_default_mode(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "performance.md", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "performance.md").stat().st_mode) == 0o644


# --- Store: ledger, archive, runs -------------------------------------------------------------------


def test_store_layout_is_its_root(tmp_path):
    s = Store(tmp_path)
    assert s.root == tmp_path
    assert (s.state_path.name, s.ledger_path.name) == ("state.json", "ledger.jsonl")


def test_empty_ledger_is_an_empty_list(tmp_path):
    assert Store(tmp_path).ledger() == []


def test_log_appends_one_json_line_per_event(tmp_path):
    s = Store(tmp_path)
    s.log("baseline", metrics={"n=1": 10.0})
    s.log("attempt", attempt=1, verdict="tie")
    lines = s.ledger_path.read_text().splitlines()
    assert len(lines) == 2
    first, second = (json.loads(x) for x in lines)
    assert (first["event"], first["metrics"]) == ("baseline", {"n=1": 10.0})
    assert (second["event"], second["attempt"], second["verdict"]) == ("attempt", 1, "tie")
    assert "at" in first and first["at"].endswith("+00:00")


def test_ledger_reads_events_oldest_first(tmp_path):
    s = Store(tmp_path)
    for i in range(3):
        s.log("e", i=i)
    assert [e["i"] for e in s.ledger()] == [0, 1, 2]


def test_log_serialises_unknown_types_as_text(tmp_path):
    s = Store(tmp_path)
    s.log("run", path=tmp_path / "x")
    assert s.ledger()[0]["path"] == str(tmp_path / "x")


def test_archive_writes_numbered_patch(tmp_path):
    s = Store(tmp_path)
    p = s.archive(3, "candidate", "diff --git a/k.py b/k.py\n")
    assert p == tmp_path / "attempts" / "0003-candidate.patch"
    assert p.read_text() == "diff --git a/k.py b/k.py\n"


def test_relabel_renames_the_patch(tmp_path):
    s = Store(tmp_path)
    s.archive(3, "candidate", "patch")
    p = s.relabel(3, "candidate", "regressed")
    assert p.name == "0003-regressed.patch" and p.read_text() == "patch"
    assert not (s.attempts / "0003-candidate.patch").exists()


def test_find_patch_finds_any_label(tmp_path):
    s = Store(tmp_path)
    s.archive(3, "candidate", "three")
    s.archive(12, "tie", "twelve")
    s.relabel(3, "candidate", "improved")
    assert s.find_patch(3).name == "0003-improved.patch"
    assert s.find_patch(12).read_text() == "twelve"


def test_find_patch_of_unknown_attempt_is_none(tmp_path):
    s = Store(tmp_path)
    assert s.find_patch(1) is None
    s.archive(1, "tie", "x")
    assert s.find_patch(2) is None


def test_run_dir_is_fresh_each_time(tmp_path):
    s = Store(tmp_path)
    a = s.run_dir(1, "best")
    b = s.run_dir(1, "best")
    c = s.run_dir(1, "best")
    assert a.name == "0001-best" and a.is_dir()
    assert len({a, b, c}) == 3 and b.is_dir() and c.is_dir()


def test_run_dir_labels_do_not_collide(tmp_path):
    s = Store(tmp_path)
    assert s.run_dir(1, "best") != s.run_dir(1, "candidate")


# --- performance.md ---------------------------------------------------------------------------------


def test_perf_file_is_created_with_title_and_header(tmp_path):
    p = tmp_path / "performance.md"
    append_perf_rows(p, "us_per_call", [row(status="baseline")])
    text = p.read_text()
    assert text.startswith("# performance.md\n")
    assert PERF_HEADER.format(metric="us_per_call") in text
    assert text.rstrip().splitlines()[-1].startswith("| 2025-01-01T00:00:00+00:00 | 0123456789ab | baseline |")


def test_perf_header_is_written_once(tmp_path):
    p = tmp_path / "performance.md"
    append_perf_rows(p, "us", [row(status="baseline")])
    append_perf_rows(p, "us", [row(), row(commit="fedcba9876543210")])
    text = p.read_text()
    assert text.count("| Date | Commit |") == 1
    assert text.count("# performance.md") == 1
    body = [x for x in text.splitlines() if x.startswith("| 2025")]
    assert [x.split(" | ")[2] for x in body] == ["baseline", "keep", "keep"]


def test_perf_rows_escape_pipes_and_newlines(tmp_path):
    p = tmp_path / "performance.md"
    append_perf_rows(p, "us", [row(command="python bench.py | tee log", explanation="a|b\nc")])
    last = p.read_text().rstrip().splitlines()[-1]
    assert "`python bench.py \\| tee log`" in last
    assert "a\\|b c" in last
    unescaped = last.replace("\\|", "")
    assert unescaped.count("|") == 11  # 10 cells


def test_non_sha_commit_text_is_kept_whole(tmp_path):
    p = tmp_path / "performance.md"
    append_perf_rows(p, "us", [row(commit="(this commit)")])
    assert "| (this commit) |" in p.read_text()


def test_perf_text_is_appended_after_the_table(tmp_path):
    p = tmp_path / "performance.md"
    append_perf_rows(p, "us", [row(status="baseline")])
    append_perf_text(p, "## Stop Summary\n\n- reason: 5 consecutive regressions\n")
    text = p.read_text()
    assert "| baseline |" in text
    assert text.endswith("\n\n## Stop Summary\n\n- reason: 5 consecutive regressions\n")


def test_perf_text_creates_a_missing_file(tmp_path):
    p = tmp_path / "performance.md"
    append_perf_text(p, "## Stop Summary\n")
    assert p.read_text() == "## Stop Summary\n"


# --- state ------------------------------------------------------------------------------------------------


def make_state(tmp_path) -> SessionState:
    return SessionState(
        tag="t1", branch="kernel-opt/t1", repo=str(tmp_path), workspace=str(tmp_path / "ws"),
        best_worktree=str(tmp_path / "best"), config_path=str(tmp_path / "kopt.toml"), config_sha256="ab" * 32,
        phase=Phase.repairing, best=Best(commit="c" * 40, metrics={"n=1": 10.0}, gpu_us=9.5, kernels=["softmax"]),
        next_attempt=4,
        regressions=RegressionCounter().regressed(RegressionNote(attempt=2, at="t", target="n=1", hypothesis="h",
                                                                 change_pct=-3.0)),
        repair=RepairState(first_attempt=3, target="n=1", hypothesis="h", repairs_used=1),
    )


def test_load_state_without_file_is_none(tmp_path):
    assert Store(tmp_path).load_state_json() is None


def test_state_roundtrips(tmp_path):
    s = Store(tmp_path)
    state = make_state(tmp_path)
    s.save_state(state)
    assert SessionState.model_validate(s.load_state_json()) == state


def test_saving_state_again_overwrites_without_temp_files(tmp_path):
    s = Store(tmp_path)
    state = make_state(tmp_path)
    s.save_state(state)
    s.save_state(state.model_copy(update={"phase": Phase.ready, "repair": None}))
    loaded = SessionState.model_validate(s.load_state_json())
    assert (loaded.phase, loaded.repair) == (Phase.ready, None)
    assert sorted(os.listdir(s.root)) == ["state.json"]
