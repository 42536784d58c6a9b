"""The referee on a real git repository with exact toy metrics: one rule of DESIGN.md per test."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from kopt_mcp.errors import RefereeError, SessionError
from kopt_mcp.session import Phase
from kopt_mcp.testing.toy import kernel_source, set_kernel


def test_baseline_first_recorded_and_committed(ref):
    s = ref.status()
    assert s.phase == "ready"
    assert s.best_metrics == {"n=1": 100.0, "n=2": 200.0}
    perf = (ref.where.workspace_path / "performance.md").read_text()
    assert perf.count("| baseline |") == 2
    log = subprocess.run(["git", "log", "--format=%s", "-1"], cwd=ref.where.workspace_path, capture_output=True, text=True)
    assert log.stdout.strip() == "kopt: baseline"


def test_baseline_result_shows_the_recorded_median_not_the_first_run(tmp_path, make_referee):
    from kopt_mcp.testing.toy import make_toy_repo

    r = make_referee(make_toy_repo(tmp_path / "noisy", {"1": [130.0, 100.0, 101.0], "2": 200.0}))
    res = r.run_benchmark()  # 3 baseline runs: 130, 100, 101 us -> median 101
    assert res.baseline_recorded and r.status().best_metrics["n=1"] == 101.0
    assert {c.key: c.metric for c in res.classes} == {"n=1": 101.0, "n=2": 200.0}
    # each class's runs and their spread: the successive-difference SD of 100 ln(us) (% of one run)
    c = {x.key: x for x in res.classes}
    assert c["n=1"].runs == [130.0, 100.0, 101.0] and c["n=2"].runs == [200.0] * 3
    d1, d2 = 100 * math.log(100 / 130), 100 * math.log(101 / 100)
    assert c["n=1"].spread_pct == pytest.approx(math.sqrt((d1 ** 2 + d2 ** 2) / 2 / 2))
    assert c["n=2"].spread_pct == 0.0


def test_save_and_test_refused_before_baseline(toy_repo, make_referee):
    r = make_referee(toy_repo)
    set_kernel(r.where.workspace_path, {"1": 50.0, "2": 100.0})
    with pytest.raises(SessionError, match="run_benchmark first"):
        r.save_and_test()


def test_dedicated_worktree_on_own_branch(ref, toy_repo):
    assert ref.where.workspace_path.is_relative_to(toy_repo / ".kopt")
    branch = subprocess.run(["git", "branch", "--show-current"], cwd=ref.where.workspace_path, capture_output=True, text=True)
    assert branch.stdout.strip() == "kernel-opt/t"
    main = subprocess.run(["git", "status", "--porcelain"], cwd=toy_repo, capture_output=True, text=True)
    assert main.stdout == ""  # session files never show in the user's checkout


def test_improvement_committed_moves_best(ref):
    set_kernel(ref.where.workspace_path, {"1": 80.0, "2": 160.0})
    v = ref.save_and_test("global", "halve the work")
    assert v.verdict == "improved" and not v.reverted
    assert v.next_actions[0] == "commit_improvement"
    c = ref.commit_improvement("faster")
    assert c.committed
    s = ref.status()
    assert s.best_commit == c.commit and s.best_metrics == {"n=1": 80.0, "n=2": 160.0} and s.kept == 1
    perf = (ref.where.workspace_path / "performance.md").read_text()
    assert perf.count("| keep |") == 2
    shown = subprocess.run(["git", "show", "--stat", "HEAD"], cwd=ref.where.workspace_path, capture_output=True, text=True)
    assert "kernel.py" in shown.stdout and "performance.md" in shown.stdout


def test_a_committed_candidates_runs_are_the_new_bests_first_noise_group(ref):
    # after a 2x win no earlier BEST group is at the new level (verdict.LEVEL_FACTOR): the noise
    # of the next verdicts would rest on their own runs alone
    set_kernel(ref.where.workspace_path, {"1": [50.0, 50.5], "2": [100.0, 101.0]})
    assert ref.save_and_test("global", "halve the work").verdict == "improved"
    before = len(ref.books.state.noise_history)
    assert ref.commit_improvement("faster").committed
    # the verdict's two candidate runs and the commit's re-measure run of the same tree (its last value repeats)
    assert ref.books.state.noise_history[before] == [{"n=1": 50.0, "n=2": 100.0}, {"n=1": 50.5, "n=2": 101.0},
                                                     {"n=1": 50.5, "n=2": 101.0}]


def test_regression_reverted_and_counted(ref):
    set_kernel(ref.where.workspace_path, {"1": 120.0, "2": 240.0})
    v = ref.save_and_test("global", "worse")
    assert v.verdict == "regressed" and v.reverted and v.consecutive_regressions == 1
    assert "TIMES" in (ref.where.workspace_path / "kernel.py").read_text()
    assert '"1": 100.0' in (ref.where.workspace_path / "kernel.py").read_text()


def test_subnoise_change_that_does_not_repeat_is_a_tie(ref):
    set_kernel(ref.where.workspace_path, {"1": [99.9, 100.2], "2": [199.8, 200.4]})
    v = ref.save_and_test("global", "tiny")
    assert v.verdict == "tie" and v.reverted and v.rounds == 2


def test_subnoise_change_that_repeats_exactly_on_a_noiseless_benchmark_is_improved(ref):
    # the toy benchmark has no noise at all (the baseline's runs agree exactly), so a 0.1% win
    # seen in both rounds is significant: the noise rule's "measured twice in a row"
    set_kernel(ref.where.workspace_path, {"1": 99.9, "2": 199.8})
    v = ref.save_and_test("global", "tiny but real")
    assert v.verdict == "improved" and v.rounds == 2


def test_subnoise_win_confirmed_twice_is_improved(ref):
    set_kernel(ref.where.workspace_path, {"1": [99.3, 99.2], "2": [198.6, 198.4]})
    v = ref.save_and_test("global", "small but real")
    assert v.verdict == "improved"
    assert v.rounds == 2  # the server took the confirming measurement itself


def test_subnoise_win_not_confirmed_is_a_tie(ref):
    set_kernel(ref.where.workspace_path, {"1": [99.3, 100.2], "2": [198.6, 200.3]})
    v = ref.save_and_test("global", "lucky once")
    assert v.verdict == "tie" and v.rounds == 2


def test_divergent_names_the_worse_class(ref):
    set_kernel(ref.where.workspace_path, {"1": 60.0, "2": 260.0})
    v = ref.save_and_test("n=1", "specialise small n")
    assert v.verdict == "divergent" and v.divergent_classes == ["n=2"] and v.reverted


def test_target_class_must_exist(ref):
    set_kernel(ref.where.workspace_path, {"1": 60.0, "2": 200.0})
    with pytest.raises(RefereeError, match="no config class"):
        ref.save_and_test("n=3", "x")


def test_repair_then_improved(ref):
    set_kernel(ref.where.workspace_path, {"1": 60.0, "2": 120.0}, {"2": 4})
    v = ref.save_and_test("global", "fast but wrong")
    assert v.verdict == "incorrect" and not v.reverted and v.repairs_left == 3
    assert v.class_errors == {"n=2": {"err_count": 4.0}}  # per-class error numbers for the repair
    assert v.code == "rows_incorrect"
    assert ref.status().phase == "repairing"
    set_kernel(ref.where.workspace_path, {"1": 60.0, "2": 120.0})
    v = ref.save_and_test("global", "fixed")
    assert v.verdict == "improved"


def test_abandoned_after_three_failed_repairs(ref):
    set_kernel(ref.where.workspace_path, {"1": 60.0, "2": 120.0}, {"2": 4})
    verdicts = [ref.save_and_test("global", "wrong").verdict for _ in range(4)]
    assert verdicts == ["incorrect", "incorrect", "incorrect", "abandoned"]
    s = ref.status()
    assert s.phase == "ready" and s.consecutive_regressions == 0
    assert '"1": 100.0' in (ref.where.workspace_path / "kernel.py").read_text()


def test_protected_benchmark_edit_rejected_without_running(ref):
    runs_before = len(list(ref.books.store.runs.iterdir()))
    (ref.where.workspace_path / "bench.py").write_text("print('fast')\n")
    v = ref.save_and_test("global", "cheat")
    assert (v.verdict, v.code) == ("rejected", "protected_path")
    assert len(list(ref.books.store.runs.iterdir())) == runs_before
    assert "toy benchmark" in (ref.where.workspace_path / "bench.py").read_text()


def test_config_is_always_protected(ref):
    p = ref.where.workspace_path / "kopt.toml"
    p.write_text(p.read_text().replace("noise_pct = 1.0", "noise_pct = 50.0"))
    assert ref.save_and_test("global", "loosen").verdict == "rejected"


def test_crash_is_failed_and_resets_counter(ref):
    set_kernel(ref.where.workspace_path, {"1": 120.0, "2": 240.0})
    ref.save_and_test("global", "worse")
    set_kernel(ref.where.workspace_path, {"1": 50.0, "2": 100.0}, EXIT=3)
    v = ref.save_and_test("global", "crash")
    assert (v.verdict, v.code) == ("failed", "run_crashed") and v.consecutive_regressions == 0


def test_a_csv_left_in_the_workspace_never_reaches_a_run(ref):
    ws = ref.where.workspace_path
    (ws / "results").mkdir(exist_ok=True)
    (ws / "results" / "bench.csv").write_text("n,us_per_call,err_count\n1,1.0,0\n2,1.0,0\n")
    set_kernel(ws, {"1": 50.0, "2": 100.0}, NO_CSV=True)
    v = ref.save_and_test("global", "leaves an old csv lying around")
    assert (v.verdict, v.code) == ("failed", "results_missing")


def test_stale_csv_committed_into_the_candidate_is_failed(ref):
    ws = ref.where.workspace_path
    (ws / "results").mkdir(exist_ok=True)
    (ws / "results" / "bench.csv").write_text("n,us_per_call,err_count\n1,1.0,0\n2,1.0,0\n")
    set_kernel(ws, {"1": 50.0, "2": 100.0}, NO_CSV=True)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@l"]
    subprocess.run([*git, "add", "-f", "results/bench.csv", "kernel.py"], cwd=ws, check=True)
    subprocess.run([*git, "commit", "-qm", "ship a csv"], cwd=ws, check=True)
    v = ref.save_and_test("global", "ships the old csv in the tree")
    assert (v.verdict, v.code) == ("failed", "results_stale")


def test_missing_csv_is_failed(ref):
    set_kernel(ref.where.workspace_path, {"1": 50.0, "2": 100.0}, NO_CSV=True)
    v = ref.save_and_test("global", "no csv")
    assert (v.verdict, v.code) == ("failed", "results_missing")


def test_hang_killed_at_timeout(tmp_path, make_referee):
    from kopt_mcp.testing.toy import make_toy_repo

    repo = make_toy_repo(tmp_path / "r", {"1": 100.0}, timeout_s=2)
    r = make_referee(repo)
    r.run_benchmark()
    set_kernel(r.where.workspace_path, {"1": 10.0}, SLEEP_S=600)
    v = r.save_and_test("global", "hang")
    assert (v.verdict, v.code) == ("failed", "run_timed_out")


def test_stop_after_five_regressions_writes_summary(ref):
    for i in range(5):
        set_kernel(ref.where.workspace_path, {"1": 120.0 + i, "2": 240.0})
        v = ref.save_and_test("global", f"worse {i}")
    assert v.stopped and v.stop_reason.startswith("5 consecutive")  # the Stop Summary's line: the text is the product
    perf = (ref.where.workspace_path / "performance.md").read_text()
    assert "## Stop Summary" in perf and perf.count("| global |") == 5
    set_kernel(ref.where.workspace_path, {"1": 50.0, "2": 100.0})
    with pytest.raises(SessionError, match="stopped"):
        ref.save_and_test("global", "after stop")


def test_tie_resets_regression_counter(ref):
    set_kernel(ref.where.workspace_path, {"1": 120.0, "2": 240.0})
    assert ref.save_and_test("global", "worse").consecutive_regressions == 1
    set_kernel(ref.where.workspace_path, {"1": 100.0, "2": 200.1})
    assert ref.save_and_test("global", "same").consecutive_regressions == 0


def test_every_attempt_archived_and_in_ledger(ref):
    set_kernel(ref.where.workspace_path, {"1": 120.0, "2": 240.0})
    v = ref.save_and_test("global", "worse")
    patch = (ref.books.store.attempts / f"{v.attempt:04d}-regressed.patch").read_text()
    assert "120.0" in patch
    a = ref.get_attempt(v.attempt)
    assert a.record["verdict"] == "regressed" and "120.0" in a.patch
    events = [json.loads(x)["event"] for x in ref.books.store.ledger_path.read_text().splitlines()]
    assert "attempt" in events and "baseline" in events


def test_revert_archives_first(ref):
    set_kernel(ref.where.workspace_path, {"1": 1.0, "2": 2.0})
    (ref.where.workspace_path / "new_file.py").write_text("x = 1\n")
    r = ref.revert_to_best("drop")
    assert "new_file.py" in r.changed_files
    text = open(r.archived_patch).read()
    assert "new_file.py" in text and "1.0" in text
    assert not (ref.where.workspace_path / "new_file.py").exists()


def test_commit_only_the_tested_tree(ref):
    set_kernel(ref.where.workspace_path, {"1": 80.0, "2": 160.0})
    assert ref.save_and_test("global", "faster").verdict == "improved"
    set_kernel(ref.where.workspace_path, {"1": 10.0, "2": 10.0})
    with pytest.raises(RefereeError, match="exact tested tree"):
        ref.commit_improvement("sneak")


def test_commit_gate_remeasures_and_refuses_a_vanished_win(ref):
    # faster in the save_and_test runs (runs 0 and 1 of this tree: the script metric's two rounds),
    # back to BEST speed when re-measured (run 2+)
    set_kernel(ref.where.workspace_path, {"1": [80.0, 80.0, 100.0], "2": [160.0, 160.0, 200.0]})
    assert ref.save_and_test("global", "flaky").verdict == "improved"
    c = ref.commit_improvement("flaky")
    assert not c.committed and c.code == "script_not_confirmed"  # the verdict rule's code over all its rounds
    assert ref.status().phase == "ready" and ref.status().kept == 0


def test_commit_runs_format_command(tmp_path, make_referee):
    from kopt_mcp.testing.toy import make_toy_repo

    repo = make_toy_repo(tmp_path / "r", {"1": 100.0})
    cfg = repo / "kopt.toml"
    cfg.write_text(cfg.read_text() + '\n[format]\ncommand = "echo \'# formatted\' >> kernel.py"\n')
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qam", "fmt"], cwd=repo, check=True)
    r = make_referee(repo)
    r.run_benchmark()
    set_kernel(r.where.workspace_path, {"1": 50.0})
    assert r.save_and_test("global", "faster").verdict == "improved"
    c = r.commit_improvement("faster")
    assert c.committed and c.formatted
    assert "# formatted" in (r.where.workspace_path / "kernel.py").read_text()
    # the formatted workspace became a frozen snapshot: that is what was re-measured and committed
    git = lambda *a: subprocess.run(["git", *a], cwd=r.where.workspace_path, check=True, capture_output=True,
                                    text=True).stdout.strip()
    formatted = git("rev-parse", "refs/kopt/t/attempts/0001-formatted^{tree}")
    assert git("rev-parse", "HEAD:kernel.py") == git("rev-parse", f"{formatted}:kernel.py")
    assert git("rev-parse", "refs/kopt/t/attempts/0001^{tree}") != formatted  # the tested, unformatted one
    assert git("status", "--porcelain") == ""


def test_a_format_command_that_touches_a_protected_file_is_not_committed(tmp_path, make_referee):
    from kopt_mcp.testing.toy import make_toy_repo

    repo = make_toy_repo(tmp_path / "r", {"1": 100.0})
    cfg = repo / "kopt.toml"
    cfg.write_text(cfg.read_text() + '\n[format]\ncommand = "echo \'# formatted\' >> bench.py"\n')
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qam", "fmt"], cwd=repo, check=True)
    r = make_referee(repo)
    r.run_benchmark()
    best = r.books.state.best.commit
    set_kernel(r.where.workspace_path, {"1": 50.0})
    assert r.save_and_test("global", "faster").verdict == "improved"
    c = r.commit_improvement("faster")
    assert not c.committed and c.code == "protected_path"
    assert r.books.state.best.commit == best and "# formatted" not in (r.where.workspace_path / "bench.py").read_text()


def test_the_candidate_is_frozen_on_a_hidden_ref_before_it_runs(ref):
    best = ref.books.state.best.commit
    set_kernel(ref.where.workspace_path, {"1": 120.0, "2": 240.0})
    v = ref.save_and_test("global", "worse")
    assert v.verdict == "regressed" and v.reverted
    git = lambda *a: subprocess.run(["git", *a], cwd=ref.where.workspace_path, check=True, capture_output=True,
                                    text=True).stdout.strip()
    frozen = "refs/kopt/t/attempts/0001"
    assert git("rev-parse", f"{frozen}^") == best  # parent: the BEST_COMMIT it was judged against
    assert '"1": 120.0' in git("show", f"{frozen}:kernel.py")  # the tested tree survives the revert
    assert git("branch", "--list", "--all", "*attempts*") == ""  # hidden: no branch, no tag


def test_every_run_happens_in_a_removed_checkout_outside_workspace_and_repository(ref, tmp_path, monkeypatch):
    root = tmp_path / "runs-here"
    monkeypatch.setenv("KOPT_RUN_ROOT", str(root))
    where = tmp_path / "cwd.txt"
    ws = ref.where.workspace_path
    (ws / "kernel.py").write_text(kernel_source({"1": 80.0, "2": 160.0}) + (
        f"import os\nopen({str(where)!r}, 'a').write(os.getcwd() + '\\n')\n"))
    v = ref.save_and_test("global", "where do I run")
    assert v.verdict == "improved"
    cwds = where.read_text().split()
    assert cwds and all(c.startswith(str(root / "kopt-run-")) for c in cwds)
    assert all(not c.startswith(str(ref.where.repo_path)) for c in cwds)
    assert all(not os.path.exists(c) for c in cwds)  # removed after each run
    assert list(root.iterdir()) == []
    assert not (ws / "results").exists()  # the workspace saw no run
    assert ref.commit_improvement("faster").committed
    again = where.read_text().split()[len(cwds):]  # the commit gate re-measured the candidate in a checkout too
    assert len(again) == 1 and again[0].startswith(str(root / "kopt-run-")) and not os.path.exists(again[0])


def _repo_with_output(tmp_path, bench_extra: str):
    from kopt_mcp.testing.toy import make_toy_repo

    repo = make_toy_repo(tmp_path / "r", {"1": 100.0, "2": 200.0})
    (repo / "stats.txt").write_text("tracked summary\n")
    (repo / "bench.py").write_text((repo / "bench.py").read_text() + bench_extra)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qm", "stats"], cwd=repo, check=True)
    return repo


def test_tracked_files_the_unchanged_benchmark_rewrites_are_outputs_never_committed(tmp_path, make_referee):
    repo = _repo_with_output(tmp_path, 'open("stats.txt", "a").write(f"run {k}\\n")\n')
    r = make_referee(repo)
    r.run_benchmark()
    assert r.books.state.benchmark_outputs == ["stats.txt"]
    ws = r.where.workspace_path
    (ws / "stats.txt").write_text("edited by hand\n")  # the diff guard ignores outputs:
    with pytest.raises(RefereeError, match="no change against BEST_COMMIT"):
        r.save_and_test("global", "only an output changed")
    set_kernel(ws, {"1": 80.0, "2": 160.0})
    v = r.save_and_test("global", "faster")
    assert v.verdict == "improved" and not any("stats.txt" in w for w in v.warnings)
    assert "stats.txt" not in Path(v.patch_path).read_text()
    assert r.commit_improvement("faster").committed
    shown = subprocess.run(["git", "show", "HEAD:stats.txt"], cwd=ws, check=True, capture_output=True, text=True).stdout
    assert shown == "tracked summary\n"  # BEST's version


def test_a_benchmark_that_rewrites_its_protected_file_stops_the_baseline(tmp_path, make_referee):
    repo = _repo_with_output(tmp_path, 'open("bench.py", "a").write("# run\\n")\n')
    r = make_referee(repo)
    with pytest.raises(RefereeError, match="the unmodified benchmark rewrote bench.py, a protected file"):
        r.run_benchmark()
    assert r.books.state.benchmark_outputs == [] and r.status().phase == "needs_baseline"


def test_resume_after_restart(toy_repo, make_referee, ref):
    set_kernel(ref.where.workspace_path, {"1": 60.0, "2": 120.0}, {"2": 4})
    assert ref.save_and_test("global", "wrong").verdict == "incorrect"
    ref.close()
    again = make_referee(toy_repo)
    s = again.status()
    assert s.phase == "repairing" and s.repairs_used == 0 and s.attempts == 1


def test_second_server_on_same_session_refused(ref, toy_repo, lease_dir):
    from kopt_mcp.referee import Referee

    with pytest.raises(RefereeError, match=r'already runs on .*"tag": "t"'):
        Referee(toy_repo, tag="t", lease_dir=lease_dir)
    with pytest.raises(RefereeError, match="one server per repository"):
        Referee(toy_repo, tag="other", lease_dir=lease_dir)  # another session on the same repository too


def test_config_edit_after_start_is_reported_not_applied(ref, toy_repo):
    cfg = toy_repo / "kopt.toml"
    cfg.write_text(cfg.read_text().replace("noise_pct = 1.0", "noise_pct = 90.0"))
    assert ref.status().config_changed
    set_kernel(ref.where.workspace_path, {"1": 80.0, "2": 160.0})
    v = ref.save_and_test("global", "faster")
    assert v.verdict == "improved" and any("kopt.toml changed" in w for w in v.warnings)


def test_phase_machine_blocks_commit_without_improvement(ref):
    with pytest.raises(SessionError, match="commit_improvement is not allowed"):
        ref.commit_improvement("nothing")
    assert ref.books.state.phase == Phase.ready


def test_fair_comparison_measures_best_in_its_own_worktree_each_time(ref):
    set_kernel(ref.where.workspace_path, {"1": 80.0, "2": 160.0})
    v = ref.save_and_test("global", "faster")
    labels = [p.rsplit("/", 1)[-1] for p in v.run_dirs]
    assert any(x.endswith("-candidate") for x in labels) and any(x.endswith("-best") for x in labels)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ref.where.best_path, capture_output=True, text=True)
    assert head.stdout.strip() == ref.books.state.best.commit


def test_performance_md_holds_only_baseline_and_keeps(ref):
    before = (ref.where.workspace_path / "performance.md").read_text()
    for times in ({"1": 120.0, "2": 240.0}, {"1": 100.0, "2": 200.1}, {"1": 60.0, "2": 260.0}):
        set_kernel(ref.where.workspace_path, times)
        ref.save_and_test("n=1" if times["1"] == 60.0 else "global", "not kept")
    assert (ref.where.workspace_path / "performance.md").read_text() == before
    assert len([e for e in ref.books.store.ledger() if e["event"] == "attempt"]) == 3


def test_missing_profiler_is_a_clear_error(tmp_path, make_referee, monkeypatch):
    from kopt_mcp.errors import ProfilerError
    from kopt_mcp.profilers.ncu import NcuProfiler
    from kopt_mcp.testing.toy import make_toy_repo

    monkeypatch.setattr(NcuProfiler, "available", lambda self: False)  # a machine without ncu
    repo = make_toy_repo(tmp_path / "r", {"1": 100.0})
    cfg = repo / "kopt.toml"
    cfg.write_text(cfg.read_text().replace('backend = "none"', 'backend = "ncu"'))
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qam", "ncu"], cwd=repo, check=True)
    r = make_referee(repo)
    with pytest.raises(ProfilerError, match="ncu not found"):
        r.run_benchmark()
    assert r.status().phase == "needs_baseline"


def test_wrong_metric_column_stops_the_baseline_with_the_columns_seen(tmp_path, make_referee):
    from kopt_mcp.testing.toy import make_toy_repo

    repo = make_toy_repo(tmp_path / "r", {"1": 100.0})
    cfg = repo / "kopt.toml"
    cfg.write_text(cfg.read_text().replace('metric = "us_per_call"', 'metric = "usec"'))
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qam", "col"], cwd=repo, check=True)
    r = make_referee(repo)
    with pytest.raises(RefereeError, match=r"column\(s\) \['usec'\].*us_per_call"):
        r.run_benchmark()


def test_no_idle_gpu_for_the_whole_wait_stops_with_summary(toy_repo, make_referee):
    from kopt_mcp.gpus.smi import NvidiaSmiProbe
    from tests.conftest import FIXTURES

    busy = {"--query-gpu": (FIXTURES / "nvidia_smi" / "h200_busy_query_gpu_header.csv").read_text(),
            "--query-compute-apps": (FIXTURES / "nvidia_smi" / "h200_busy_query_compute_apps.csv").read_text()}

    def run(cmd):
        return next(text for flag, text in busy.items() if any(a.startswith(flag) for a in cmd))

    from kopt_mcp.testing.toy import FakeClock

    clock = FakeClock()
    r = make_referee(toy_repo, probe=NvidiaSmiProbe(run=run), sleep=clock.sleep, clock=clock)
    set_kernel(r.where.workspace_path, {"1": 50.0, "2": 100.0})
    r.books.state.phase = Phase.ready  # as if the baseline had been taken on another, idle GPU
    v = r.save_and_test("global", "faster")
    assert (v.verdict, v.code) == ("failed", "no_device") and v.stopped
    # the stop reason is the product: it names what kept the GPU busy
    assert v.stop_reason.startswith("no idle GPU") and "utilization 99%" in v.stop_reason and clock.slept == [600.0] * 6
    assert "## Stop Summary" in (r.where.workspace_path / "performance.md").read_text()
    assert "50.0" in (r.books.store.attempts / f"{v.attempt:04d}-failed.patch").read_text()  # nothing lost


def test_two_servers_on_one_idle_gpu_never_both_run_on_it(tmp_path, make_referee):
    """Per-job leases: the GPU is leased for one measuring call only. While one server's job holds
    it, another server's gate finds it leased (and waits); between jobs (the agent thinking),
    the other server gets it: a second agent never waits the first one's whole session."""
    from kopt_mcp.gpus.smi import NvidiaSmiProbe
    from kopt_mcp.testing.toy import FakeClock, make_toy_repo
    from tests.conftest import FIXTURES

    idle = {"--query-gpu": (FIXTURES / "nvidia_smi" / "h200_query_gpu_header.csv").read_text(),
            "--query-compute-apps": (FIXTURES / "nvidia_smi" / "h200_query_compute_apps_idle.csv").read_text()}

    def run(cmd):
        return next(text for flag, text in idle.items() if any(a.startswith(flag) for a in cmd))

    first = make_referee(make_toy_repo(tmp_path / "a", {"1": 100.0}), tag="a", probe=NvidiaSmiProbe(run=run))
    found = first.find_idle_gpu()
    assert found.leased and first.jobs.executor.held == []  # a probe: the lease is not kept after the call
    clock = FakeClock()
    second = make_referee(make_toy_repo(tmp_path / "b", {"1": 100.0}), tag="b", probe=NvidiaSmiProbe(run=run),
                          sleep=clock.sleep, clock=clock)
    assert second.find_idle_gpu().leased  # the first server is idle between jobs: no waiting
    first.jobs.lease(None)  # a measuring call of the first server holds the GPU now
    try:
        out = second.find_idle_gpu()
        assert not out.leased and out.stopped
        assert any("leased by kopt-mcp" in b for c in out.checks for b in c.busy)
    finally:
        first.jobs.release()
    third = make_referee(make_toy_repo(tmp_path / "c", {"1": 100.0}), tag="c", probe=NvidiaSmiProbe(run=run))
    assert third.find_idle_gpu().leased


def test_script_metric_is_a_screen_only_when_a_per_launch_profiler_test_follows(ref):
    g = ref.what.cfg.gates
    assert ref.what.policy.confidence == g.confidence == 0.995
    assert ref.what.policy.screen().confidence == g.screen_confidence == 0.95
    assert ref.profiler().per_launch is False  # the toy has no profiler: its script test stays strict


def test_a_run_of_best_that_rewrites_a_protected_file_is_tampering_and_other_writes_are_outputs(ref):
    from kopt_mcp.errors import Tampered
    from kopt_mcp.rules.protect import FileChange

    with pytest.raises(Tampered, match="the run of BEST_COMMIT rewrote bench.py"):
        ref.judge_run_changes([FileChange("rewrote", "bench.py")], "the run of BEST_COMMIT")
    assert ref.judge_run_changes([FileChange("rewrote", "stats.txt")], "the run of BEST_COMMIT") == []
    assert ref.books.state.benchmark_outputs == ["stats.txt"]
    assert ref.books.store.latest("benchmark_outputs")["added"] == ["stats.txt"]
    # a candidate's writes are reported, never turned into outputs; outputs are not reported
    rest = ref.judge_run_changes([FileChange("rewrote", "notes.txt"), FileChange("rewrote", "stats.txt")], "the run")
    assert rest == [FileChange("rewrote", "notes.txt")] and ref.books.state.benchmark_outputs == ["stats.txt"]
