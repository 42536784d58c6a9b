"""`kopt-mcp check-config`: what it finds in a repository, and how it reports a bad config."""

from __future__ import annotations

import subprocess

from kopt_mcp.cli import main


def test_check_config_reports_classes_from_an_existing_csv(toy_repo, capsys):
    subprocess.run(["python", "bench.py"], cwd=toy_repo, check=True, capture_output=True)
    assert main(["check-config", "--repo", str(toy_repo)]) == 0
    out = capsys.readouterr().out
    assert "metric: us_per_call (lower is better)" in out
    assert "n=1, n=2" in out and "profiler: none" in out


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
