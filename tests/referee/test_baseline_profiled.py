"""The baseline under a profiler whose runs are script-metric runs (`measures_script`: CUPTI;
referee/baseline.py): its BASELINE_PROFILES profiled runs also stand for the plain runs, so it runs
4 benchmark processes, not 3 + 4; under a screen-then-profile profiler (ncu's flow) the plain runs
stay. Counted from the session's run folders, the ledger's `baseline` record and the toy benchmark's
own per-content run counter (every benchmark process appends to it). The baseline decides no
verdict, so CPU load cannot flip these."""

from __future__ import annotations

import subprocess

import pytest

from kopt_mcp.errors import RefereeError
from kopt_mcp.testing.toy import set_kernel, toy_runs_dir
from tests.conftest import BASE_TIMES
from tests.replay_cupti import ReplayCupti
from tests.replay_units import ReplayUnits

UNITS = {"1": 10.0, "2": 20.0}
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@localhost"]


def _baseline(ref) -> tuple[dict, list[str]]:
    """The ledger's baseline record and the names of the baseline's run folders."""
    base = [e for e in ref.books.store.ledger() if e["event"] == "baseline"]
    assert len(base) == 1
    return base[0], sorted(d.name for d in ref.books.store.runs.iterdir() if d.name.startswith("0000-baseline"))


def _processes(repo) -> int:
    """Benchmark processes of every kernel.py content so far (the toy's counter files)."""
    return sum(f.stat().st_size for f in toy_runs_dir(repo).glob("*.runs"))


def test_under_a_script_profiler_the_profiled_runs_stand_for_the_plain_runs(replayed_ref, toy_repo):
    ref = replayed_ref(ReplayUnits, UNIT_US=UNITS)
    base, dirs = _baseline(ref)
    assert len(dirs) == 4 and all("profile" in d for d in dirs)
    assert (base["profiled_runs"], len(base["runs"]), base["adopted_runs"]) == (3, 3, 0)
    assert _processes(toy_repo) == 4  # was 3 plain + 4 profiled
    assert base["runs"][0] == base["runs"][1] == base["runs"][2] and len(base["gpu_profiles_us"]) == 4
    assert ref.books.state.plain_run_s is not None and ref.books.state.plain_run_s > 0


def test_under_a_screen_then_profile_profiler_the_plain_runs_stay(replayed_ref, toy_repo):
    ref = replayed_ref(ReplayCupti, GPU_US=1000.0)  # measures_script False: KOPT_PROFILE-style runs do not count
    base, dirs = _baseline(ref)
    assert sum("profile" in d for d in dirs) == 4 and sum("profile" not in d for d in dirs) == 3
    assert (base["profiled_runs"], len(base["runs"])) == (0, 3)
    assert _processes(toy_repo) == 7


def test_the_correctness_command_runs_once_with_the_first_profiled_run(replayed_ref, toy_repo, tmp_path):
    checks = tmp_path / "checks.txt"
    with (toy_repo / "kopt.toml").open("a") as f:  # committed with the kernel by replayed_ref
        f.write(f'\n[correctness]\ncommand = "echo check >> {checks}"\n')
    ref = replayed_ref(ReplayUnits, UNIT_US=UNITS)
    base, dirs = _baseline(ref)
    assert checks.read_text().splitlines() == ["check"]
    logged = [d for d in dirs if (ref.books.store.runs / d / "correctness.log").is_file()]
    assert logged == [dirs[0]] and "profile" in dirs[0]


def test_a_failing_correctness_command_stops_the_profiled_baseline(toy_repo, make_referee, monkeypatch):
    with (toy_repo / "kopt.toml").open("a") as f:
        f.write('\n[correctness]\ncommand = "python -c \'import sys; sys.exit(4)\'"\n')
    set_kernel(toy_repo, BASE_TIMES, UNIT_US=UNITS)
    subprocess.run([*GIT, "commit", "-qam", "failing tests"], cwd=toy_repo, check=True)
    ref = make_referee(toy_repo)
    monkeypatch.setattr(ref, "profiler", lambda detail=False: ReplayUnits(toy_runs_dir(toy_repo)))
    with pytest.raises(RefereeError, match="does not pass the correctness gate"):
        ref.run_benchmark()
    assert not [e for e in ref.books.store.ledger() if e["event"] == "baseline"]
    failed = [e for e in ref.books.store.ledger() if e["event"] == "baseline_failed"]
    assert len(failed) == 1 and failed[0]["run_dir"].endswith("0000-baseline-profile")
    assert _processes(toy_repo) == 1  # stopped at the first profiled run


def _profiled_baseline(toy_repo, make_referee, monkeypatch, kernel_line: str = "", **flags):
    if kernel_line:
        toml = toy_repo / "kopt.toml"
        toml.write_text(toml.read_text().replace('backend = "none"\n', f'backend = "none"\n{kernel_line}\n', 1))
    set_kernel(toy_repo, BASE_TIMES, UNIT_US=UNITS, **flags)
    subprocess.run([*GIT, "commit", "-qam", "gpu times"], cwd=toy_repo, check=True)
    ref = make_referee(toy_repo)
    monkeypatch.setattr(ref, "profiler", lambda detail=False: ReplayUnits(toy_runs_dir(toy_repo)))
    return ref.run_benchmark()


def test_the_baseline_says_which_kernels_decide_where_the_config_names_none(toy_repo, make_referee, monkeypatch):
    """Liger FusedLinearCrossEntropy's init (H200, 2026-12-04) had no room for a traced run in its budget
    and left [profiler] kernel empty: the hottest kernel then decides, here torch_sum (50 us a call)
    beside the repository's fwd_kernel (10-20 us), as a GEMM beside a Triton kernel would."""
    res = _profiled_baseline(toy_repo, make_referee, monkeypatch, OTHER_US={"1": 50.0, "2": 50.0})
    assert res.baseline_recorded
    assert (res.gpu_target.by, res.gpu_target.kernels) == ("hottest", ["torch_sum"])
    assert (res.gpu_target.own, res.gpu_target.own_regex) == ([], None)  # the toy defines no GPU kernel
    assert "[profiler] kernel is empty" in res.reason and "kernel_trace_analysis" in res.reason


def test_the_baseline_names_the_repositorys_own_kernels_beside_the_hottest(toy_repo, make_referee, monkeypatch):
    """The same, with fwd_kernel defined as a Triton kernel in the repository (Liger's FLCE on an
    H200, 2026-12-04: torch's add judged at 27.0% of the trace, Liger's own kernels 1.7%): the baseline
    lists it with its share (10 + 20 us of 110 us per invocation pair: 27.3%) and the regex to set."""
    (toy_repo / "fused.py").write_text("import triton\n\n\n@triton.jit\ndef fwd_kernel(x_ptr, n):\n    pass\n")
    subprocess.run([*GIT, "add", "fused.py"], cwd=toy_repo, check=True)
    res = _profiled_baseline(toy_repo, make_referee, monkeypatch, OTHER_US={"1": 40.0, "2": 40.0})
    target = res.gpu_target
    assert (target.by, target.kernels) == ("hottest", ["torch_sum"])
    assert [o.name for o in target.own] == ["fwd_kernel"] and target.own[0].share_pct == pytest.approx(27.3, abs=0.3)
    assert target.own_regex == "^fwd_kernel$" and "'^fwd_kernel$'" in res.reason


def test_the_baseline_names_the_kernels_its_config_chose(toy_repo, make_referee, monkeypatch):
    res = _profiled_baseline(toy_repo, make_referee, monkeypatch, 'kernel = "^fwd_kernel$"',
                             OTHER_US={"1": 50.0, "2": 50.0})
    assert (res.gpu_target.by, res.gpu_target.kernels) == ("regex", ["fwd_kernel"])
    assert "[profiler] kernel is empty" not in res.reason
