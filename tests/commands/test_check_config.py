"""`kopt-mcp check-config`: what it finds in a repository, and how it reports a bad config."""

from __future__ import annotations

import subprocess

from kopt_mcp.app.cli import main


def test_check_config_reports_classes_from_an_existing_csv(toy_repo, capsys):
    subprocess.run(["python", "bench.py"], cwd=toy_repo, check=True, capture_output=True)
    assert main(["check-config", "--repo", str(toy_repo)]) == 0
    out = capsys.readouterr().out
    assert "metric: us_per_call (lower is better)" in out
    assert "  n=1: 100 (1 row(s))\n  n=2: 200 (1 row(s))" in out and "profiler: none" in out


def test_check_config_without_csv_says_classes_come_later(toy_repo, capsys):
    assert main(["check-config", "--repo", str(toy_repo)]) == 0
    assert "found from the first run" in capsys.readouterr().out


def test_check_config_lists_valid_keys_for_an_unknown_key(toy_repo, capsys):
    cfg = toy_repo / "kopt.toml"
    cfg.write_text(cfg.read_text().replace("[gates]", "[gates]\nnoise = 2"))
    assert main(["check-config", "--repo", str(toy_repo)]) == 2
    out = capsys.readouterr().out
    assert "unknown key [gates] noise" in out and "noise_pct" in out


def test_check_config_flags_a_csv_that_does_not_fit(toy_repo, capsys):
    subprocess.run(["python", "bench.py"], cwd=toy_repo, check=True, capture_output=True)
    cfg = toy_repo / "kopt.toml"
    cfg.write_text(cfg.read_text().replace('config_columns = ["n"]', 'config_columns = ["m"]'))
    assert main(["check-config", "--repo", str(toy_repo)]) == 2
    assert "['m']" in capsys.readouterr().out


def _set(repo, old: str, new: str) -> None:
    cfg = repo / "kopt.toml"
    text = cfg.read_text()
    assert old in text
    cfg.write_text(text.replace(old, new))


def test_check_config_fails_for_a_command_that_is_not_there(toy_repo, capsys):
    _set(toy_repo, 'command = "python bench.py"', 'command = "python bench_missing.py"')
    assert main(["check-config", "--repo", str(toy_repo)]) == 2
    assert "bench_missing.py, which does not exist" in capsys.readouterr().out


def test_check_config_fails_for_a_program_not_on_path(toy_repo, capsys):
    _set(toy_repo, 'command = "python bench.py"', 'command = "no-such-runner-xyz bench.py"')
    assert main(["check-config", "--repo", str(toy_repo)]) == 2
    assert "'no-such-runner-xyz' is not on PATH" in capsys.readouterr().out


def test_check_config_fails_for_a_missing_workdir(toy_repo, capsys):
    _set(toy_repo, 'command = "python bench.py"', 'command = "python bench.py"\nworkdir = "nowhere"')
    assert main(["check-config", "--repo", str(toy_repo)]) == 2
    assert "workdir 'nowhere' is not a directory" in capsys.readouterr().out


def test_check_config_fails_for_a_glob_outside_the_tree(toy_repo, capsys):
    _set(toy_repo, 'csv = "results/*.csv"', 'csv = "../elsewhere/*.csv"')
    assert main(["check-config", "--repo", str(toy_repo)]) == 2
    assert "climbs out of the tree" in capsys.readouterr().out


def test_check_config_accepts_a_command_that_sets_pythonpath(toy_repo, capsys):
    """The injector is put in front of the command's own PYTHONPATH (profilers.cupti.keep_injector)."""
    _set(toy_repo, 'command = "python bench.py"', 'command = "PYTHONPATH=. python bench.py"')
    assert main(["check-config", "--repo", str(toy_repo)]) == 0
    assert "warning" not in capsys.readouterr().out.lower()


def test_check_config_warns_about_a_script_that_replaces_pythonpath(toy_repo, capsys):
    (toy_repo / "run.sh").write_text("#!/bin/sh\nPYTHONPATH=. python bench.py\n")
    _set(toy_repo, 'command = "python bench.py"', 'command = "sh run.sh"')
    assert main(["check-config", "--repo", str(toy_repo)]) == 0
    out = capsys.readouterr().out
    assert "run.sh" in out and "${PYTHONPATH:+:$PYTHONPATH}" in out


def test_check_config_summary_is_compact_for_many_classes(toy_repo, capsys):
    rows = "\n".join(f"{n},{n * 1.5},0" for n in range(1, 2501))
    (toy_repo / "results").mkdir(exist_ok=True)
    (toy_repo / "results" / "bench.csv").write_text("n,us_per_call,err_count\n" + rows + "\n")
    assert main(["check-config", "--repo", str(toy_repo)]) == 0
    out = capsys.readouterr().out
    assert "2500 counted row(s), 2500 config class(es)" in out and "... and 2490 more" in out
    assert "n=11:" not in out and max(len(line) for line in out.splitlines()) < 300
    assert "narrow [benchmark] rows" in out and "gates: noise 1%" in out


def test_check_config_on_the_appended_harness_example(capsys):
    from pathlib import Path

    ex = Path(__file__).resolve().parents[2] / "examples" / "appended_harness"
    assert main(["check-config", "--repo", str(ex)]) == 0
    out = capsys.readouterr().out
    assert "the y_value_50 of rows whose metric_name is 'speed'" in out
    assert "3 config class(es) over columns ['x_value'], unit ms" in out


def test_check_config_warns_about_results_older_than_the_config(toy_repo, capsys):
    """Rows a run wrote before this config may be another kernel's (issue 35): not previewed (issue 36 item 5)."""
    import os

    subprocess.run(["python", "bench.py"], cwd=toy_repo, check=True, capture_output=True)
    csv = toy_repo / "results" / "bench.csv"
    assert main(["check-config", "--repo", str(toy_repo)]) == 0
    out = capsys.readouterr().out
    assert "older than" not in out and "  n=1: 100 (1 row(s))" in out  # written after kopt.toml: the last run's
    st = (toy_repo / "kopt.toml").stat()
    os.utime(csv, (st.st_atime - 60, st.st_mtime - 60))
    assert main(["check-config", "--repo", str(toy_repo)]) == 0
    out = capsys.readouterr().out
    assert "bench.csv: committed to git or older than kopt.toml" in out and "n=1:" not in out


def test_check_config_run_previews_the_run_and_fails_when_it_cannot(toy_repo, capsys):
    """--run (issue 36 item 5): the classes of the run it makes; 2 for a run that fails or writes nothing read."""
    assert main(["check-config", "--repo", str(toy_repo), "--run"]) == 0
    out = capsys.readouterr().out
    assert "wrote: 2 counted row(s), 2 config class(es)" in out and "  n=1: 100 (1 row(s))" in out
    assert list(toy_repo.glob("results/*.csv")) == []  # the run's files are put back as they were: none
    _set(toy_repo, 'csv = "results/*.csv"', 'csv = "out/*.csv"')
    assert main(["check-config", "--repo", str(toy_repo), "--run"]) == 2
    assert "the run wrote no file matching 'out/*.csv'" in capsys.readouterr().out
    _set(toy_repo, 'command = "python bench.py"', 'command = "python -c \'raise SystemExit(3)\'"')
    assert main(["check-config", "--repo", str(toy_repo), "--run"]) == 2
    out = capsys.readouterr().out
    assert "the benchmark run failed" in out and "exited 3" in out


def test_check_config_run_names_the_matching_files_its_run_did_not_write(toy_repo, capsys):
    """The MCP-client pass (2026-12-02): with --run, a stale results/old-h100.csv matching the glob was left
    out without a word; it is named, as the plain check-config names it."""
    (toy_repo / "results").mkdir(exist_ok=True)
    (toy_repo / "results" / "old-h100.csv").write_text("n,us_per_call\n7,0.051\n")
    assert main(["check-config", "--repo", str(toy_repo), "--run"]) == 0
    out = capsys.readouterr().out
    assert "wrote: 2 counted row(s), 2 config class(es)" in out and "n=7" not in out
    assert "old-h100.csv: matches 'results/*.csv' but this run did not write it" in out
