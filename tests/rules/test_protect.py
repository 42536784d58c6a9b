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


# -- symlinks (rejected before the run) -----------------------------------------------------

from kopt_mcp.rules.protect import FileChange, resolve_link, run_changes_verdict, unsafe_symlinks


def test_symlink_to_a_protected_file_is_unsafe():
    links = {"kernel_helper.py": "bench.py"}
    assert unsafe_symlinks(["kernel_helper.py"], links, ["bench.py"]) == [
        "kernel_helper.py is a symlink to bench.py, which is or holds protected bench.py"]


def test_symlink_to_a_directory_holding_a_protected_file_is_unsafe():
    assert unsafe_symlinks(["lib"], {"lib": "."}, ["bench.py"]) == [
        "lib is a symlink to the repository root, which is or holds protected bench.py, performance.md"]
    out = unsafe_symlinks(["x/ref"], {"x/ref": "../reference"}, ["reference/oracle.py"])
    assert out and "reference/oracle.py" in out[0]


def test_symlink_into_a_protected_directory_is_unsafe():
    assert unsafe_symlinks(["o.py"], {"o.py": "reference/oracle.py"}, ["reference"])


def test_symlink_out_of_the_repository_is_unsafe():
    links = {"a": "/etc/passwd", "sub/b": "../../x", "c": "sub/../../y"}
    out = unsafe_symlinks(list(links), links, [])
    assert out == ["a is a symlink to /etc/passwd, outside the repository",
                   "c is a symlink to sub/../../y, outside the repository",
                   "sub/b is a symlink to ../../x, outside the repository"]


def test_chain_of_symlinks_is_followed():
    links = {"a": "b", "b": "d/../bench.py"}
    assert unsafe_symlinks(["a"], links, ["bench.py"]) == [
        "a is a symlink to bench.py, which is or holds protected bench.py"]
    assert resolve_link("a", {"a": "b", "b": "a"}) is None  # a loop never resolves inside


def test_symlink_through_a_linked_directory_is_followed():
    links = {"d": "sub", "x": "d/../bench.py"}  # d/.. is the root: d is followed first
    assert resolve_link("x", links) == "bench.py"


def test_harmless_symlinks_may_run():
    links = {"k.py": "src/kernel.py", "src/alias.py": "kernel.py", "docs/perf.md": "../notes/performance.md"}
    assert unsafe_symlinks(list(links), links, ["bench.py", "reference"]) == []


def test_sibling_with_a_protected_prefix_is_not_a_hit():
    assert unsafe_symlinks(["l"], {"l": "bench.py.bak"}, ["bench.py"]) == []


# -- what a run changed in its checkout (rejected after the run) ----------------------------

def test_a_run_that_rewrites_a_protected_file_is_rejected_by_name():
    reason, rest = run_changes_verdict([FileChange("rewrote", "bench.py"), FileChange("rewrote", "kernel.py")],
                                       ["bench.py"])
    # the rejection text is the product: it names each protected file and what the run did to it
    assert reason.startswith("the run rewrote bench.py: ")
    assert rest == [FileChange("rewrote", "kernel.py")]


def test_deleted_added_and_config_changes_are_named_by_kind():
    changes = [FileChange("deleted", "bench.py"), FileChange("rewrote", "kopt.toml"),
               FileChange("added", "reference/new.py"), FileChange("rewrote", "performance.md")]
    reason, rest = run_changes_verdict(changes, ["bench.py", "kopt.toml", "reference"], who="the BEST run")
    # the rejection text is the product: it names each protected file and what the run did to it
    assert reason.startswith("the BEST run rewrote kopt.toml, performance.md; the BEST run deleted bench.py; "
                             "the BEST run added reference/new.py: ")
    assert rest == []


def test_benchmark_outputs_are_ignored_but_never_a_protected_file():
    changes = [FileChange("rewrote", "stats.txt"), FileChange("rewrote", "bench.py")]
    reason, rest = run_changes_verdict(changes, ["bench.py"], outputs=["stats.txt", "bench.py"])
    # the rejection text is the product: it names each protected file and what the run did to it
    assert reason.startswith("the run rewrote bench.py") and rest == []
    assert run_changes_verdict([FileChange("rewrote", "stats.txt")], ["bench.py"], ["stats.txt"]) == (None, [])
