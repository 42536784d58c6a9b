"""The session's files: atomic writes, ledger, attempt archive, run folders, performance.md, state."""

from __future__ import annotations

import json
import os
import stat

import pytest

from kopt_mcp.ledger import (
    PERF_HEADER,
    TIME_COLUMN_GPU,
    PerfRow,
    Store,
    append_perf_rows,
    append_perf_text,
    atomic_write,
)
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
    s.log("baseline", best_commit="a" * 40, metrics={"n=1": 10.0})
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
    assert PERF_HEADER.format(metric="us_per_call", time=TIME_COLUMN_GPU) in text
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


# --- hash chain -------------------------------------------------------------------------------------------


def _chained(tmp_path, n=4) -> Store:
    s = Store(tmp_path)
    for i in range(n):
        s.log("e", i=i)
    return s


def test_every_record_chains_to_the_sha256_of_the_previous_line(tmp_path):
    import hashlib

    from kopt_mcp.ledger import GENESIS

    s = _chained(tmp_path)
    lines = s.ledger_path.read_text().splitlines()
    recs = [json.loads(x) for x in lines]
    assert recs[0]["prev"] == GENESIS
    for prev_line, rec in zip(lines, recs[1:]):
        assert rec["prev"] == hashlib.sha256(prev_line.encode()).hexdigest()
    assert len({r["id"] for r in recs}) == 4
    assert s.verify() == []


def test_an_edited_record_breaks_the_chain_and_is_named(tmp_path):
    s = _chained(tmp_path)
    lines = s.ledger_path.read_text().splitlines()
    lines[1] = lines[1].replace('"i": 1', '"i": 7')
    s.ledger_path.write_text("\n".join(lines) + "\n")
    problems = Store(tmp_path).verify()
    assert len(problems) == 1 and "record 2 does not chain to record 1" in problems[0]


def test_a_deleted_middle_record_is_detected(tmp_path):
    s = _chained(tmp_path)
    lines = s.ledger_path.read_text().splitlines()
    s.ledger_path.write_text("\n".join(lines[:1] + lines[2:]) + "\n")
    assert any("does not chain" in p for p in Store(tmp_path).verify())


def test_a_ledger_cut_back_below_what_the_state_saw_is_detected(tmp_path):
    s = _chained(tmp_path)
    s.save_state(make_state(tmp_path))
    lines = s.ledger_path.read_text().splitlines()
    s.ledger_path.write_text("\n".join(lines[:2]) + "\n")  # a clean cut: the chain itself still verifies
    again = Store(tmp_path)
    again.load_state_json()
    assert again.anchor["records"] == 4
    assert any("holds 2 record(s) but the state saw 4" in p for p in again.verify())


def test_a_deleted_ledger_is_detected_and_an_untouched_one_passes(tmp_path):
    s = _chained(tmp_path)
    s.save_state(make_state(tmp_path))
    ok = Store(tmp_path)
    ok.load_state_json()
    assert ok.verify() == []
    s.ledger_path.unlink()
    gone = Store(tmp_path)
    gone.load_state_json()
    assert any("missing" in p and "deleted" in p for p in gone.verify())


def test_a_rewritten_last_seen_record_is_detected_through_the_anchor(tmp_path):
    s = _chained(tmp_path, 2)
    s.save_state(make_state(tmp_path))
    from kopt_mcp.ledger import GENESIS, line_hash, new_record

    # a forger rewrites the whole ledger with a valid chain of other records
    a = json.dumps({**new_record("baseline", best_commit="a" * 40, metrics={"n=1": 1.0}), "prev": GENESIS})
    b = json.dumps({**new_record("commit", attempt=1, commit="b" * 40), "prev": line_hash(a)})
    s.ledger_path.write_text(a + "\n" + b + "\n")
    again = Store(tmp_path)
    again.load_state_json()
    assert any("differs from the one the state saw" in p for p in again.verify())


def test_a_torn_last_line_is_reported_and_the_next_append_starts_a_new_line(tmp_path):
    s = _chained(tmp_path, 2)
    with s.ledger_path.open("a") as f:
        f.write('{"at": "x", "eve')  # a write cut off by a crash
    again = Store(tmp_path)
    assert any("no line end" in p for p in again.verify())
    again.log("after", i=9)
    problems = Store(tmp_path).verify()
    assert any("record 2 is not a JSON record" in p for p in problems)
    assert not any("record 3" in p for p in problems)  # the new record chains to the torn line
    assert [e.get("i") for e in Store(tmp_path).ledger()] == [0, 1, 9]


def test_state_json_carries_the_ledger_anchor_and_load_takes_it_out(tmp_path):
    s = _chained(tmp_path, 3)
    s.save_state(make_state(tmp_path))
    raw = json.loads(s.state_path.read_text())
    assert raw["ledger_anchor"]["records"] == 3
    loaded = Store(tmp_path).load_state_json()
    assert "ledger_anchor" not in loaded and SessionState.model_validate(loaded) == make_state(tmp_path)


def test_has_record_finds_appended_ids(tmp_path):
    from kopt_mcp.ledger import new_record

    s = Store(tmp_path)
    r = new_record("attempt", attempt=1, verdict="tie")
    assert not s.has_record(r["id"])
    s.append(r)
    assert s.has_record(r["id"]) and Store(tmp_path).has_record(r["id"])


# --- performance.md rendered from the ledger ------------------------------------------------------------


def test_performance_md_is_a_function_of_the_ledger_records(tmp_path):
    from kopt_mcp.ledger import render_performance

    p = tmp_path / "performance.md"
    base, keep = row(status="baseline"), row(commit="(this commit)")
    append_perf_rows(p, "us", [base, keep])
    append_perf_text(p, "## Stop Summary\n\n- reason: r\n")
    events = [{"event": "session_started"}, {"event": "baseline", "rows": [base.model_dump()]},
              {"event": "attempt", "attempt": 1, "verdict": "improved"},
              {"event": "commit", "attempt": 1, "rows": [keep.model_dump()]},
              {"event": "run_benchmark", "rows": [row(status="forged").model_dump()]},  # not a row source
              {"event": "stopped", "summary": "## Stop Summary\n\n- reason: r\n"}]
    assert render_performance(events, "us") == p.read_text()


def test_performance_md_keeps_the_text_the_session_started_from(tmp_path):
    from kopt_mcp.ledger import render_performance

    old = "# performance.md\n\nan earlier session\n\n" + PERF_HEADER.format(metric="us", time=TIME_COLUMN_GPU)
    text = render_performance([{"event": "session_started", "performance_md": old},
                               {"event": "baseline", "rows": [row(status="baseline").model_dump()]}], "us")
    assert text.startswith(old) and text.count("| baseline |") == 1
