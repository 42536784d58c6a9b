"""The commit-time out-of-process confirmation (kopt_mcp/profilers/confirm.py).

The cheat, written first: a candidate whose benchmark patches its in-process timing (CUPTI records,
torch events) claims a GPU-time gain its kernel does not have. Out of process the kernel is what it
was, so ncu records the same launches for the candidate as for BEST: here both trees replay the same
real ncu recording and the forged claim is refuted. Planted numbers test the rule's edges; the real
rocprofv3 recordings of one program on two machines give a real out-of-process gain.
"""

from __future__ import annotations

import os
import shlex
import shutil
import stat
from pathlib import Path

import pytest

from kopt_mcp.errors import ProfilerError
from kopt_mcp.evidence.confirm import TargetTime
from kopt_mcp.profilers.confirm import ConfirmNcu, ConfirmRocprof, confirm_profiler, function_names, target_time
from kopt_mcp.profilers.cupti import INJECT_DIR
from kopt_mcp.profilers.ncu import parse_ncu_csv
from kopt_mcp.referee.confirmation import confirm_keep
from kopt_mcp.rules.confirm import AGREE_FRACTION, decide_confirmation, gain_pct
from kopt_mcp.rules.decision import Code

FIX = Path(__file__).resolve().parents[1] / "fixtures"
NCU_RAW = FIX / "ncu" / "h200_raw_page_torch_matmul_softmax.csv"
NCU_DETAILS = FIX / "ncu" / "xplacer_cfd_097K_ncu_csv_details_head90.log"
#: the same program (addition_kernel<float>, grid 1024x1024, 64 work-items) traced by rocprofv3 on
#: two machines: the 2024 file's dispatches take 48.7-100.9 us, the docs file's 12.8 us
ROC_SLOW = FIX / "rocprofv3" / "rocprofiler_sdk_2024_kernel_trace_legacy_schema.csv"
ROC_FAST = FIX / "rocprofv3" / "rocprofiler_sdk_docs_kernel_trace.csv"
ADDITION = "void addition_kernel<float>(float*, float const*, float const*, int, int)"


def tt(us: float, launches: int = 50) -> TargetTime:
    return TargetTime(us=us, launches=launches, groups=["k grid=(1,1,1) block=(1,1,1)"], kernels=["k"])


# ---- the rule, planted numbers ----

def test_gain_pct():
    assert gain_pct(100.0, 90.0) == pytest.approx(10.0) and gain_pct(50.0, 60.0) == pytest.approx(-20.0)
    assert gain_pct(0.0, 5.0) == 0.0


def test_agreeing_gain_is_confirmed_and_names_the_numbers():
    c = decide_confirmation(10.0, 0.5, tt(100.0), tt(90.5), "ncu")
    assert (c.status, c.code) == ("confirmed", Code.CONFIRMED) and not c.blocks_commit
    assert c.gain_pct == pytest.approx(9.5)
    assert c.tolerance_pct == pytest.approx(0.5 + AGREE_FRACTION * 10.0)
    for text in ("100.00 -> 90.50 us", "+9.50%", "+10.00%", "floor 0.50%"):
        assert text in c.reason  # the text is the product: the commit message quotes it, every number named


def test_no_gain_out_of_process_is_refuted_even_within_the_tolerance():
    # claimed +0.4% with a 0.5% floor: -0.1% is within the tolerance but shows no gain
    c = decide_confirmation(0.4, 0.5, tt(100.0), tt(100.1), "ncu")
    assert (c.status, c.code) == ("refuted", Code.REFUTED) and c.blocks_commit
    assert c.gain_pct == pytest.approx(-0.1) and c.gain_pct > 0.4 - c.tolerance_pct  # within the tolerance


def test_a_gain_far_below_the_claim_is_refuted():
    # a real 2% win inflated to a claimed 20%: 20 - (0.5 + 5) = 14.5 > 2
    c = decide_confirmation(20.0, 0.5, tt(100.0), tt(98.0), "ncu")
    assert (c.status, c.code) == ("refuted", Code.REFUTED)
    assert c.gain_pct == pytest.approx(2.0) and 20.0 - c.tolerance_pct == pytest.approx(14.5)  # a gain, short of it


def test_the_shortfall_threshold_is_the_floor_plus_a_fraction_of_the_claim():
    claimed, floor = 8.0, 1.0
    need = claimed - (floor + AGREE_FRACTION * claimed)
    assert decide_confirmation(claimed, floor, tt(100.0), tt(100.0 - need - 0.3), "ncu").status == "confirmed"
    assert decide_confirmation(claimed, floor, tt(100.0), tt(100.0 - need + 0.3), "ncu").status == "refuted"


def test_a_gain_above_the_claim_is_confirmed_and_reported():
    c = decide_confirmation(2.0, 0.5, tt(100.0), tt(80.0), "ncu")
    assert (c.status, c.code) == ("confirmed", Code.CONFIRMED)
    assert c.gain_pct == pytest.approx(20.0) and c.gain_pct > c.claimed_gain_pct + c.tolerance_pct  # reported only


def test_best_unmeasured_is_unavailable_candidate_unmeasured_is_refuted():
    u = decide_confirmation(5.0, 0.5, None, tt(90.0), "ncu", best_error="ERR_NVGPUCTRPERM")
    assert (u.status, u.code) == ("unavailable", Code.UNCONFIRMED) and not u.blocks_commit and u.gain_pct is None
    assert "ERR_NVGPUCTRPERM" in u.reason  # the tool's own error, passed on: the text is the product
    r = decide_confirmation(5.0, 0.5, tt(100.0), None, "ncu", candidate_error="no kernel matches")
    assert (r.status, r.code) == ("refuted", Code.REFUTED) and r.candidate is None and r.best.us == 100.0
    assert "no kernel matches" in r.reason  # the tool's own error, passed on: the text is the product


# ---- choosing the confirming profiler ----

def _on_path(monkeypatch, tmp_path: Path, name: str) -> None:
    exe = tmp_path / "bin" / name
    exe.parent.mkdir(exist_ok=True)
    exe.write_text("#!/bin/sh\nexit 0\n")
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ.get('PATH', '')}")


def test_confirm_profiler_by_setting_vendor_and_path(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert confirm_profiler("off", "nvidia")[0] is None
    prof, why = confirm_profiler("auto", "nvidia")
    assert prof is None and "ncu" in why
    prof, why = confirm_profiler("auto", "cpu")
    assert prof is None and "'cpu'" in why
    _on_path(monkeypatch, tmp_path, "ncu")
    _on_path(monkeypatch, tmp_path, "rocprofv3")
    assert isinstance(confirm_profiler("auto", "NVIDIA")[0], ConfirmNcu)
    assert isinstance(confirm_profiler("auto", "amd")[0], ConfirmRocprof)
    with pytest.raises(ValueError, match="auto"):
        confirm_profiler("on", "nvidia")


def test_unavailable_runs_nothing(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))

    def never(tree, prof, label):
        raise AssertionError("nothing may run without an out-of-process profiler")

    c = confirm_keep(never, "cand", "best", 5.0, 0.5, vendor="nvidia")
    assert (c.status, c.code) == ("unavailable", Code.UNCONFIRMED) and c.claimed_gain_pct == 5.0
    assert "ncu" in c.reason  # the text is the product: it names the profiler to install
    assert confirm_keep(never, "cand", "best", 5.0, 0.5, vendor="nvidia", setting="off").status == "unavailable"


# ---- the ncu command: the parent process, cheap, clocks untouched, no in-process injector ----

def test_ncu_is_the_parent_and_the_benchmark_gets_no_injector():
    cmd = "PYTHONPATH=src python bench.py --csv out.csv"
    line = ConfirmNcu(target_names=["triton_softmax_kernel"]).wrap(cmd, Path("/runs/7/confirm"))
    words = shlex.split(line)
    assert words[0] == "ncu" and words[-3:] == ["bash", "-c", cmd]  # ncu starts the benchmark
    opts = words[1:-3]
    pairs = {w: (opts[i + 1] if i + 1 < len(opts) and not opts[i + 1].startswith("--") else True)
             for i, w in enumerate(opts) if w.startswith("--")}
    assert pairs["--csv"] is True and pairs["--page"] == "raw"
    assert pairs["--clock-control"] == "none" and pairs["--cache-control"] == "none"
    # GPU time and DRAM traffic (the speed of light, rules/light.py)
    assert pairs["--metrics"] == "gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum"
    assert pairs["--filter-mode"] == "per-launch-config" and pairs["--launch-count"] == "50"
    assert pairs["--kernel-name-base"] == "function"
    assert pairs["--kernel-name"] == "regex:^(triton_softmax_kernel)$"
    assert pairs["--target-processes"] == "all" and pairs["--log-file"] == "/runs/7/confirm/ncu.csv"
    # the command is run as given: the CUPTI injector (what an in-process patch could forge) is absent
    assert str(INJECT_DIR) not in line and "KOPT_CUPTI_OUT" not in line and "cupti_collect" not in line


def test_ncu_kernel_filter_forms():
    demangled = ["void at::native::reduce_kernel<512, 1>(at::native::ReduceOp<float>)", "matmul_kernel"]
    assert function_names(demangled + ["matmul_kernel"]) == ["reduce_kernel", "matmul_kernel"]
    assert ConfirmNcu(target_names=demangled).kernel_filter()[-1] == "regex:^(reduce_kernel|matmul_kernel)$"
    assert ConfirmNcu(kernel_regex="softmax_.*").kernel_filter() == [
        "--kernel-name-base", "demangled", "--kernel-name", "regex:softmax_.*"]
    mangled = ConfirmNcu(target_names=["_Z10add_kernelPfS_i"]).kernel_filter()
    assert mangled[:2] == ["--kernel-name-base", "mangled"] and mangled[-1] == "regex:^(_Z10add_kernelPfS_i)$"
    assert ConfirmNcu().kernel_filter() == []
    with pytest.raises(ValueError):
        ConfirmNcu(launch_count=0)


def test_rocprof_command_is_kernel_trace_under_the_launcher():
    words = shlex.split(ConfirmRocprof().wrap("./bench --n 3", Path("/runs/1")))
    assert words[:2] == ["rocprofv3", "--kernel-trace"] and words[-4:] == ["--", "bash", "-c", "./bench --n 3"]
    assert "--output-format" in words and words[words.index("-d") + 1] == "/runs/1"


# ---- recorded outputs ----

def test_ncu_launch_groups_from_the_recorded_raw_page():
    trace = parse_ncu_csv(NCU_RAW, groups=True)
    labels = {g.label(): (g.calls, g.median_us) for g in trace.groups}
    assert labels["softmax_warp_forward grid=(512,1,1) block=(32,4,1)"][0] == 4
    assert labels["at::reduce_kernel grid=(1,512,1) block=(512,1,1)"] == (4, pytest.approx(10.24))
    assert parse_ncu_csv(NCU_RAW).groups is None  # opt-in: the keep metric's ncu path is unchanged
    assert parse_ncu_csv(NCU_DETAILS, groups=True).groups is None  # details page: no shapes


def test_target_time_of_the_recorded_ncu_trace():
    trace = parse_ncu_csv(NCU_RAW, groups=True)
    hottest = target_time(trace, ConfirmNcu().target_regex(trace))  # unfiltered: hottest non-utility
    assert hottest.kernels == ["softmax_warp_forward"] and hottest.launches == 4
    assert hottest.us == pytest.approx(trace.groups[3].median_us)
    chosen = ConfirmNcu(kernel_regex="softmax|reduce")
    both = target_time(trace, chosen.target_regex(trace))
    assert both.kernels == ["softmax_warp_forward", "at::reduce_kernel"] and both.launches == 8
    with pytest.raises(ProfilerError, match="no kernel matches"):
        target_time(trace, "no_such_kernel")


def _replay(recordings: dict[str, Path | None], tmp_path: Path):
    """run_profiled that replays a recorded profiler output per tree: the file is put where the
    profiler's `wrap` would have written it and read with the profiler's own `parse`; None leaves
    the run folder empty (a run that wrote nothing)."""
    calls = []

    def run_profiled(tree, prof, label):
        calls.append((tree, label))
        out = tmp_path / label
        out.mkdir(parents=True)
        rec = recordings[tree]
        if rec is not None:
            shutil.copy(rec, out / ("ncu.csv" if prof.name == "ncu" else f"{prof.name}_kernel_trace.csv"))
        return prof.parse(out)

    return run_profiled, calls


def test_the_cheat_a_forged_in_process_gain_is_refuted_by_the_recorded_ncu_run(tmp_path):
    # the candidate only patched its in-process timing: out of process its kernels are BEST's
    run, calls = _replay({"cand": NCU_RAW, "best": NCU_RAW}, tmp_path)
    c = confirm_keep(run, "cand", "best", claimed_gain_pct=20.0, floor_pct=0.5, vendor="nvidia",
                     profiler=ConfirmNcu(kernel_regex="softmax"))
    assert calls == [("cand", "confirm-candidate"), ("best", "confirm-best")]
    assert c.status == "refuted" and c.gain_pct == pytest.approx(0.0)
    assert c.best.us == pytest.approx(c.candidate.us) and c.code == Code.REFUTED
    assert any("softmax_warp_forward" in k for k in c.best.kernels)


def test_a_candidate_that_leaves_no_ncu_trace_is_refuted_a_best_without_one_is_unavailable(tmp_path):
    run, _ = _replay({"cand": None, "best": NCU_RAW}, tmp_path / "a")
    c = confirm_keep(run, "cand", "best", 5.0, 0.5, vendor="nvidia", profiler=ConfirmNcu())
    assert (c.status, c.code) == ("refuted", Code.REFUTED) and c.candidate is None and c.best is not None
    run, _ = _replay({"cand": NCU_RAW, "best": None}, tmp_path / "b")
    u = confirm_keep(run, "cand", "best", 5.0, 0.5, vendor="nvidia", profiler=ConfirmNcu())
    assert (u.status, u.code) == ("unavailable", Code.UNCONFIRMED) and u.best is None
    assert "ncu.csv does not exist" in u.reason  # the parser's own error, passed on: the text is the product


def test_recorded_rocprofv3_traces_confirm_a_real_gain_and_refute_an_inflated_one(tmp_path):
    # BEST = the slower machine's recording, candidate = the faster one's (same program, same kernel)
    run, _ = _replay({"cand": ROC_FAST, "best": ROC_SLOW}, tmp_path / "real")
    prof = ConfirmRocprof(target_names=[ADDITION])
    best, cand = (target_time(parse_rocprof_trace(p), prof.target_regex(None)) for p in (ROC_SLOW, ROC_FAST))
    gain = (best.us - cand.us) / best.us * 100.0
    assert gain > 50.0  # what the two recordings say, independent of the rule
    ok = confirm_keep(run, "cand", "best", claimed_gain_pct=gain + 1.0, floor_pct=0.5, vendor="amd", profiler=prof)
    assert ok.status == "confirmed" and ok.backend == "rocprofv3" and ok.gain_pct == pytest.approx(gain)
    assert ok.best.kernels == ["addition_kernel"]
    run, _ = _replay({"cand": ROC_FAST, "best": ROC_SLOW}, tmp_path / "inflated")
    bad = confirm_keep(run, "cand", "best", claimed_gain_pct=gain * 1.5 + 2.0, floor_pct=0.5, vendor="amd", profiler=prof)
    assert (bad.status, bad.code) == ("refuted", Code.REFUTED)
    assert 0 < bad.gain_pct < bad.claimed_gain_pct - bad.tolerance_pct  # a gain, short of the claim


def parse_rocprof_trace(path: Path):
    from kopt_mcp.profilers.rocprof import parse_rocprof_csv

    return parse_rocprof_csv(path)


def test_the_wrapped_command_runs_the_benchmark_as_the_profilers_child(tmp_path):
    """Through a real executor (kopt_mcp.bench.runner): a stand-in `ncu` that records its arguments and
    runs the trailing `bash -c <command>` as its child, as ncu does (it profiles nothing, so no CSV: BEST cannot be
    measured and the confirmation is `unavailable`). The benchmark's quoting survives the wrap and
    its parent is the profiler's process."""
    from kopt_mcp.bench.runner import run_command

    fake = tmp_path / "ncu"
    fake.write_text('#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "$(dirname "$0")/args.txt"\n'
                    'echo $$ > "$(dirname "$0")/ncu.pid"\n"${@: -3}"\n')
    fake.chmod(0o755)
    tree = tmp_path / "tree"
    tree.mkdir()
    command = "echo \"$((1 + 1)) it's\" > out.txt; ps -o ppid= -p $$ | tr -d ' ' > ppid.txt"

    def run_profiled(t, prof, label):
        out = tmp_path / label
        out.mkdir()
        r = run_command(prof.wrap(command, out), Path(t), {}, 60.0, out / "profile.log")
        assert r.exit_code == 0, r.log_tail
        return prof.parse(out)

    prof = ConfirmNcu(target_names=["scale_kernel"], binary=str(fake))
    c = confirm_keep(run_profiled, str(tree), str(tree), 5.0, 0.5, vendor="nvidia", profiler=prof)
    assert (tree / "out.txt").read_text() == "2 it's\n"
    args = (tmp_path / "args.txt").read_text().splitlines()
    assert args[:2] == ["--clock-control", "none"] and args[-3:-1] == ["bash", "-c"]
    # the benchmark's shell is the child of the profiler's process
    assert (tree / "ppid.txt").read_text().strip() == (tmp_path / "ncu.pid").read_text().strip()
    assert (c.status, c.code) == ("unavailable", Code.UNCONFIRMED) and c.best is None  # the stand-in wrote no CSV
