"""Protected files: a diff touching a protected file or directory (or performance.md) is rejected."""

from __future__ import annotations

from kopt_mcp.rules.protect import touched_protected


def test_untouched_protected_paths_let_the_candidate_run():
    assert touched_protected(["kernel.py", "src/ops.cu"], ["bench.py", "reference"]) == []


def test_protected_file_is_hit():
    assert touched_protected(["kernel.py", "bench.py"], ["bench.py"]) == ["bench.py"]


def test_file_under_protected_directory_is_hit():
    assert touched_protected(["reference/oracle.py"], ["reference"]) == ["reference/oracle.py"]


def test_deeply_nested_file_under_protected_directory_is_hit():
    assert touched_protected(["tests/data/golden/out.bin"], ["tests/data"]) == ["tests/data/golden/out.bin"]


def test_nested_protected_file_is_hit():
    assert touched_protected(["bench/cfg/sizes.json"], ["bench/cfg/sizes.json"]) == ["bench/cfg/sizes.json"]


def test_trailing_and_leading_slashes_in_protected_paths_are_ignored():
    assert touched_protected(["reference/a.py", "bench.py"], ["reference/", "/bench.py"]) == ["bench.py", "reference/a.py"]


def test_sibling_with_common_prefix_is_not_hit():
    assert touched_protected(["reference_impl.py", "bench.py.bak", "referencex/a.py"], ["reference", "bench.py"]) == []


def test_parent_of_protected_file_is_not_hit():
    assert touched_protected(["bench"], ["bench/run.py"]) == []


def test_performance_md_is_always_protected():
    assert touched_protected(["performance.md"], []) == ["performance.md"]


def test_performance_md_in_a_subfolder_is_not_the_results_log():
    assert touched_protected(["docs/performance.md"], []) == []


def test_empty_protected_entries_protect_nothing_extra():
    assert touched_protected(["kernel.py"], ["", "/"]) == []


def test_hits_are_sorted_and_unique():
    hits = touched_protected(["z/b.py", "bench.py", "z/a.py", "bench.py"], ["z", "bench.py"])
    assert hits == ["bench.py", "z/a.py", "z/b.py"]
