"""Run-time file cheats (issue 11, item 1): a candidate kernel.py whose import-time code, run by the
toy benchmark while it is measured, rewrites files. Every run executes in a disposable checkout of
a frozen snapshot and is verified afterwards, so each cheat must end with a named reason and no
tampered commit: the branch only ever holds the tested snapshot plus the server's performance.md.

Verdicts BEFORE the snapshot/run/verify change (same cheats, commit 7c24270):
  1 rewrite bench.py ........ improved, committed with the rewritten bench.py
  2 rewrite kopt.toml ....... improved, committed with the rewritten kopt.toml
  3 rewrite performance.md .. improved, committed (forged row inside)
  4 symlink into bench.py ... improved, committed with the rewritten bench.py (and the symlink)
  4b symlink dir (lib -> .) . improved, committed with the rewritten bench.py
  4c run-made symlink ....... improved, committed with the rewritten bench.py
  5 symlink out of the repo . improved, committed with the symlink (write landed outside the repo)
  6 kernel edits itself ..... improved, committed the post-run kernel.py (not the one tested)
  7 wipes the workspace ..... improved; commit_improvement then refused ("the workspace changed since
                              save_and_test"); nothing named the cheat
  7b wipes its run tree ..... improved (the wipe hit the workspace); commit refused as in 7; unnamed
  8 tampers at the commit gate's re-measure only: improved, committed with the rewritten bench.py
  9 ships a CSV in its tree . failed (stale), by timing luck: a checkout exported just before the run
                              would make the file look fresh, so the export dates its files back
  10 run_benchmark check .... the workspace's bench.py was rewritten and nothing said so
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import pytest

from kopt_mcp.testing.toy import kernel_source

FASTER = {"1": 80.0, "2": 160.0}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def cheat(ws: Path, code: str) -> None:
    """A clearly faster candidate kernel.py that also runs `code` when the benchmark imports it."""
    (ws / "kernel.py").write_text(kernel_source(FASTER) + "\n" + textwrap.dedent(code))


def branch_file(ref, path: str, branch: str = "kernel-opt/t") -> str:
    return git(ref.where.workspace_path, "show", f"{branch}:{path}")


def original(ref, path: str) -> str:
    """`path` as the user committed it (the toy repository's main branch)."""
    return branch_file(ref, path, "main")


def assert_untampered(ref, best_before: str, perf_before: str) -> None:
    """No commit moved BEST and the branch's protected files are the originals."""
    assert ref.books.state.best.commit == best_before
    assert git(ref.where.workspace_path, "rev-parse", "kernel-opt/t").strip() == best_before
    assert branch_file(ref, "bench.py") == original(ref, "bench.py")
    assert "tampered" not in branch_file(ref, "kopt.toml")
    assert branch_file(ref, "performance.md") == perf_before


def judge(ref, code: str, hypothesis: str = "cheat"):
    best, perf = ref.books.state.best.commit, branch_file(ref, "performance.md")
    cheat(ref.where.workspace_path, code)
    v = ref.save_and_test("global", hypothesis)
    return v, best, perf


def test_1_run_rewrites_the_benchmark(ref):
    v, best, perf = judge(ref, 'open("bench.py", "a").write("# tampered\\n")\n')
    assert (v.verdict, v.code) == ("rejected", "tampered")
    assert "rewrote bench.py" in v.reason  # the text is the product: the rejection names the file
    assert_untampered(ref, best, perf)


def test_2_run_rewrites_the_config(ref):
    v, best, perf = judge(ref, 'open("kopt.toml", "a").write("# tampered\\n")\n')
    assert (v.verdict, v.code) == ("rejected", "tampered")
    assert "rewrote kopt.toml" in v.reason  # the text is the product: the rejection names the file
    assert_untampered(ref, best, perf)


def test_3_run_forges_performance_md(ref):
    v, best, perf = judge(ref, 'open("performance.md", "a").write("| forged | keep | -90% |\\n")\n')
    assert (v.verdict, v.code) == ("rejected", "tampered")
    assert "rewrote performance.md" in v.reason  # the text is the product: the rejection names the file
    assert_untampered(ref, best, perf)


def test_4_symlink_into_the_benchmark_is_rejected_before_the_run(ref):
    (ref.where.workspace_path / "kernel_helper.py").symlink_to("bench.py")
    v, best, perf = judge(ref, 'open("kernel_helper.py", "a").write("# tampered\\n")\n')
    assert (v.verdict, v.code) == ("rejected", "unsafe_symlink")
    assert "kernel_helper.py" in v.reason and "bench.py" in v.reason  # the text is the product: link and target
    assert v.run_dirs == []  # nothing ran
    assert_untampered(ref, best, perf)
    assert not (ref.where.workspace_path / "kernel_helper.py").is_symlink()  # reverted


def test_4b_symlinked_directory_over_the_repository_is_rejected_before_the_run(ref):
    (ref.where.workspace_path / "lib").symlink_to(".")
    v, best, perf = judge(ref, 'open("lib/bench.py", "a").write("# tampered\\n")\n')
    assert (v.verdict, v.code) == ("rejected", "unsafe_symlink") and v.run_dirs == []
    assert "lib" in v.reason  # the text is the product: it names the link
    assert_untampered(ref, best, perf)


def test_4c_symlink_made_during_the_run_and_written_through(ref):
    v, best, perf = judge(ref, """\
        import os
        if not os.path.lexists("helper.py"):
            os.symlink("bench.py", "helper.py")
        open("helper.py", "a").write("# tampered\\n")
        """)
    assert (v.verdict, v.code) == ("rejected", "tampered")
    assert "rewrote bench.py" in v.reason  # the text is the product: the rejection names the file
    assert_untampered(ref, best, perf)


def test_5_symlink_out_of_the_repository_is_rejected_before_the_run(ref, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("kept\n")
    (ref.where.workspace_path / "data.txt").symlink_to(outside)
    (ref.where.workspace_path / "up.txt").symlink_to("../../../../outside.txt")
    v, best, perf = judge(ref, 'open("data.txt", "a").write("# tampered\\n")\n')
    assert (v.verdict, v.code) == ("rejected", "unsafe_symlink") and v.run_dirs == []
    assert "data.txt" in v.reason and "up.txt" in v.reason  # the text is the product: it names both links
    assert outside.read_text() == "kept\n"
    assert_untampered(ref, best, perf)


def test_6_kernel_that_edits_itself_during_the_run_commits_the_tested_snapshot(ref):
    tested = kernel_source(FASTER) + "\n" + textwrap.dedent("""\
        import pathlib
        p = pathlib.Path("kernel.py")
        mark = "# REWRITTEN" + " during the run"
        if mark not in p.read_text():
            p.write_text(p.read_text() + mark + "\\n")
        """)
    (ref.where.workspace_path / "kernel.py").write_text(tested)
    v = ref.save_and_test("global", "self-editing")
    assert v.verdict == "improved"
    assert any("the run rewrote kernel.py" in w for w in v.warnings)
    c = ref.commit_improvement("self-editing")
    assert c.committed
    assert branch_file(ref, "kernel.py") == tested  # the tested snapshot, not the post-run file
    assert (ref.where.workspace_path / "kernel.py").read_text() == tested
    assert branch_file(ref, "bench.py") == original(ref, "bench.py")


def test_7_run_that_wipes_and_overwrites_the_workspace_is_rejected(ref):
    ws = ref.where.workspace_path
    v, best, perf = judge(ref, f"""\
        import pathlib
        ws = pathlib.Path({str(ws)!r})
        (ws / "bench.py").write_text("# tampered\\n")
        (ws / "performance.md").write_text("| forged |\\n")
        (ws / "kernel.py").unlink(missing_ok=True)
        """)
    assert (v.verdict, v.code) == ("rejected", "tampered")
    assert "bench.py" in v.reason and "kernel.py" in v.reason  # the text is the product: the files named
    assert_untampered(ref, best, perf)
    assert (ws / "bench.py").read_text() == original(ref, "bench.py")  # reverted to BEST_COMMIT
    assert "forged" not in (ws / "performance.md").read_text()
    assert '"1": 80.0' in Path(v.patch_path).read_text()  # the tested candidate is archived


def test_7b_run_that_wipes_its_own_checkout_is_rejected(ref):
    v, best, perf = judge(ref, """\
        import os, shutil
        for name in os.listdir("."):
            if name != "results":
                shutil.rmtree(name) if os.path.isdir(name) and not os.path.islink(name) else os.remove(name)
        """)
    assert (v.verdict, v.code) == ("rejected", "tampered")
    assert "deleted bench.py" in v.reason  # the text is the product: the rejection names the file
    assert_untampered(ref, best, perf)


@pytest.mark.parametrize("target", ["bench.py", "kopt.toml", "performance.md"])
def test_honest_run_changes_nothing_and_commits_the_snapshot(ref, target):
    v, _, _ = judge(ref, f"open({target!r}).read()\n", "reads only")
    assert v.verdict == "improved" and not any("the run" in w for w in v.warnings)


def test_8_run_that_tampers_only_when_the_commit_gate_re_measures(ref, tmp_path):
    flag = tmp_path / "commit-now"
    v, best, perf = judge(ref, f"""\
        import os
        if os.path.exists({str(flag)!r}):
            open("bench.py", "a").write("# tampered\\n")
        """)
    assert v.verdict == "improved"
    flag.write_text("the agent calls commit_improvement\n")
    c = ref.commit_improvement("x")
    assert not c.committed and c.code == "tampered"
    assert "rewrote bench.py" in c.reason  # the text is the product: the rejection names the file
    assert_untampered(ref, best, perf)


def test_9_fake_metrics_file_shipped_in_the_candidate_tree_is_stale(ref):
    ws = ref.where.workspace_path
    (ws / "results").mkdir(exist_ok=True)
    (ws / "results" / "bench.csv").write_text("n,us_per_call,err_count\n1,1.0,0\n2,1.0,0\n")
    (ws / "kernel.py").write_text(kernel_source(FASTER, NO_CSV=True))
    git(ws, "add", "-f", "results/bench.csv", "kernel.py")
    git(ws, "-c", "user.name=t", "-c", "user.email=t@l", "commit", "-qm", "ship a csv")
    best, perf = ref.books.state.best.commit, branch_file(ref, "performance.md")
    v = ref.save_and_test("global", "a csv from the future")
    assert (v.verdict, v.code) == ("failed", "results_stale")
    assert_untampered(ref, best, perf)


def test_10_a_check_run_of_a_cheating_workspace_names_the_rewrite_and_leaves_the_workspace(ref):
    ws = ref.where.workspace_path
    cheat(ws, 'open("bench.py", "a").write("# tampered\\n")\n')
    b = ref.run_benchmark()  # a quick check: no verdict, but the rewrite is named
    assert "the run rewrote bench.py" in b.reason  # no verdict here: the text is the product, the rewrite named
    assert (ws / "bench.py").read_text() == original(ref, "bench.py")
    assert ref.save_and_test("global", "x").verdict == "rejected"
