"""init_fresh.py's registry of fresh-clone checks (issue 35 item 6: seven real kernels, in the issue's
order, with their benchmark scripts and kernel files in the staged layouts) and fresh_table.py's
table of them, on planted OUT/<name>-fresh.json files. The GPU runs are recorded under
benchmarks/results/ when they have run."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "benchmarks" / "real_repos"
SIBLINGS = ("run", "projects", "model", "fla", "fla_ln", "fresh_table")


def _load(name: str):
    """benchmarks/real_repos/<name>.py with its siblings on the path only while it loads: other tests
    import a `run` module of benchmarks/decision_quality under the same name."""
    saved = {k: sys.modules.pop(k, None) for k in SIBLINGS}
    path = list(sys.path)
    sys.path.insert(0, str(REAL))
    try:
        spec = importlib.util.spec_from_file_location(f"{name}_under_test", REAL / f"{name}.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod  # dataclasses look their module up while it loads
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path[:] = path
        for k, v in saved.items():
            sys.modules.pop(k, None)
            if v is not None:
                sys.modules[k] = v


fresh = _load("init_fresh")
ft = _load("fresh_table")

SEVEN = ("liger", "liger-layer-norm", "liger-swiglu", "liger-cross-entropy", "liger-flce", "fg", "fla-ln")
#: (benchmark script, kernel file) of each Liger kernel, as in the staged Liger-Kernel snapshot
LIGER = {
    "liger": ("benchmark/scripts/benchmark_rms_norm.py", "src/liger_kernel/ops/rms_norm.py"),
    "liger-layer-norm": ("benchmark/scripts/benchmark_layer_norm.py", "src/liger_kernel/ops/layer_norm.py"),
    "liger-swiglu": ("benchmark/scripts/benchmark_swiglu.py", "src/liger_kernel/ops/swiglu.py"),
    "liger-cross-entropy": ("benchmark/scripts/benchmark_cross_entropy.py", "src/liger_kernel/ops/cross_entropy.py"),
    "liger-flce": ("benchmark/scripts/benchmark_fused_linear_cross_entropy.py",
                   "src/liger_kernel/ops/fused_linear_cross_entropy.py"),
}


def test_the_seven_of_issue_35_come_first_in_its_order():
    assert fresh.ISSUE35 == ft.ISSUE35 == SEVEN
    assert tuple(fresh.FRESH)[:7] == SEVEN
    assert set(fresh.FRESH) - set(SEVEN) == {"p5", "tk", "cpu-providers"}


def test_liger_kernels_run_their_script_from_src_with_overwrite():
    for name, (script, kernel) in LIGER.items():
        f = fresh.FRESH[name]
        assert (f.staged, f.github, f.kernel_file) == ("liger", "linkedin/Liger-Kernel", kernel)
        # the script imports liger_kernel: src/ first (init asks for it), then the script with --overwrite
        assert f.command == f"{fresh.SRC_FIRST}python {script} --overwrite"
    assert fresh.FRESH["liger"].hand is not None  # RMSNorm has the hand-finished kopt.toml of projects.py
    assert all(fresh.FRESH[n].hand is None for n in LIGER if n != "liger")


def test_fla_ln_gives_init_the_narrowed_command_and_its_layernorm_file():
    f = fresh.FRESH["fla-ln"]
    fla_ln = _load("fla_ln")
    assert f.command == fla_ln.FLA_LN_COMMAND  # one provider (~30 s), not the documented 16 (281 s)
    assert "['fused_ln_bwd']" in f.command and "benchmark_layernorm" in f.command
    assert (f.staged, f.kernel_file, f.hand.name) == ("p5", "fla/modules/layernorm.py", "fla-ln")
    fg = fresh.FRESH["fg"]
    assert (fg.staged, fg.kernel_file) == ("fg", "src/flag_gems/ops/rms_norm.py")


def _plant(out: Path, name: str, init_s: float, base_s: float | None, plain_s: float | None, verdict: str | None,
           test_s: float | None = None) -> None:
    proposal = ('[benchmark]\ncommand = "x"\n[correctness]\ncommand = "PYTHONPATH=src python -m pytest -q -x -p '
                'no:cacheprovider test/a/test_k.py test/b/test_k.py --deselect test/b/test_k.py::test_dtensor '
                '-k \'not slow\'"\n')
    doc = {"name": name, "init": {"exit_code": 0, "seconds": init_s, "proposal": proposal,
                                  "dropped": ["test/b/test_k.py::test_dtensor: needs more GPUs: expected to fail"],
                                  "tests_ran": ["77 passed, 8 deselected in 5.06s (23.2 s); it must pass there"]},
           "baseline": {"ok": True, "seconds": base_s, "plain_run_s": plain_s} if base_s is not None else None}
    if verdict:
        doc["identical"] = {"verdict": verdict, "code": "within_noise",
                            "correctness": {"wall_s": test_s} if test_s else None}
    (out / f"{name}-fresh.json").write_text(json.dumps(doc))


def test_table_holds_each_kernels_numbers_and_the_item_4_target(tmp_path):
    # 239 + 161 = 400 s against 8 x 23 + 23.2 (init's test run) = 207.2 s: not met
    _plant(tmp_path, "liger", 239.0, 161.0, 23.0, "tie")
    # 60 + 80 = 140 s against 8 x 20 + 19.5 (the candidate's test run) = 179.5 s: met
    _plant(tmp_path, "fg", 60.0, 80.0, 20.0, "tie", test_s=19.5)
    _plant(tmp_path, "fla-ln", 50.0, 90.0, None, None)  # an older json: no plain run, no identical yet
    _plant(tmp_path, "liger-flce", 420.0, None, None, None)  # init only: its baseline left for a later call
    path = ft.write_table(tmp_path)
    lines = {line.split(" | ")[0]: line.split(" | ") for line in path.read_text().splitlines() if line.startswith("| ")}
    liger = lines["| liger"]
    assert liger[1:6] == ["239.0", "0", "161.0", "23.00", "7.0x"]
    assert liger[6] == "test/a/test_k.py, test/b/test_k.py, -k not slow (77 passed)"
    assert liger[7] == "1: test/b/test_k.py::test_dtensor (needs more GPUs)"
    assert liger[8] == "tie (within_noise)"
    assert liger[9] == "400.0 vs 207.2: not met |"
    assert lines["| fg"][9] == "140.0 vs 179.5: met |"
    assert lines["| fla-ln"][4:6] == ["n/a", "n/a"] and lines["| fla-ln"][8:] == ["n/a", "n/a |"]
    assert lines["| liger-swiglu"][1:] == ["n/a"] * 8 + ["n/a |"]  # not run: no json
    assert "4 of 7 kernels ran init; 3 reached a baseline; identical candidate `tie` on 2;" in path.read_text()
    assert "met on 1." in path.read_text()


def test_table_reads_a_recorded_fresh_json(tmp_path):
    """A json init_fresh.py wrote on the H200 (2026-11-27, before plain_run_s was recorded)."""
    shutil.copy(ROOT / "benchmarks/results/2026-11-27-h200x4-lanes-fresh-liger.json", tmp_path / "liger-fresh.json")
    r = ft.row("liger", json.loads((tmp_path / "liger-fresh.json").read_text()))
    assert (r["init_s"], r["init_exit"], r["baseline_s"], r["plain_s"], r["verdict"]) == (228.3, 0, 180.7, None, "tie")
    assert r["kept"] == ["test/megatron/test_rms_norm.py", "test/transformers/test_rms_norm.py"]
    assert (r["passed"], r["test_s"], len(r["dropped"]), r["met"]) == (77, 23.2, 2, None)


def test_inits_own_progress_lines_say_where_its_wall_went(tmp_path):
    """init's real stderr on the CPU example (tests/fixtures/init/cpu_providers_init_progress.txt): its steps
    by kind, and the rest of its wall outside any step, in the table's last section."""
    stderr = (ROOT / "tests/fixtures/init/cpu_providers_init_progress.txt").read_text()
    steps = fresh.init_steps(stderr)
    assert [s["s"] for s in steps] == [0.5, 0.2, 2.7, 2.2, 0.0]
    assert steps[2] == {"step": "the correctness tests on the unmodified tree", "s": 2.7, "ended_at_s": 4}
    assert len(fresh.progress_lines(stderr)) == 25 and len(fresh.progress_lines(stderr, limit=3)) == 3
    times = ft.step_times({"steps": steps, "seconds": 7.0})
    assert times == {"benchmark runs": 0.7, "correctness test rounds": 4.9, "the profiled run": 0.0,
                     "not in a step": 1.4}
    _plant(tmp_path, "liger", 239.0, 161.0, 23.0, "tie")
    doc = json.loads((tmp_path / "liger-fresh.json").read_text())
    doc["init"] |= {"steps": steps, "seconds": 7.0}
    (tmp_path / "liger-fresh.json").write_text(json.dumps(doc))
    text = ft.write_table(tmp_path).read_text()
    assert "- liger: benchmark runs 0.7 s, correctness test rounds 4.9 s, the profiled run 0 s, not in a step 1.4 s" in text
    assert ft.step_times({"seconds": 228.3}) == {}  # an older json (2026-11-27): no steps recorded


def test_table_takes_the_shortest_of_inits_runs_and_the_baselines_median_run(tmp_path):
    """The ninth session's H200 json: init's runs 20.21 s (plain, first: it compiles) and 18.97 s (CUPTI),
    the baseline's median run 20.21 s: one plain run is 18.97 s, so the target takes no slack from them."""
    doc = json.loads((ROOT / "benchmarks/results/2026-12-03-h200-init-fresh-cupti-liger.json").read_text())
    assert doc["init"]["runs_s"] == [20.21, 18.97] and doc["init"]["runs_profiler"] == ["", "cupti"]
    r = ft.row("liger", doc)
    assert (r["plain_s"], r["spent_s"], r["met"]) == (18.97, 169.9, True)
    assert round(r["budget_s"], 1) == round(8 * 18.97 + r["test_s"], 1) == 185.7


def test_a_step_forecast_to_pass_the_calls_end_is_left_for_the_next_call(capsys):
    import time

    result = {"name": "liger-swiglu", "init": {"runs_s": [96.6, 100.7], "tests_ran": ["t.py (30.0 s)"]}}
    now = time.monotonic()
    assert fresh.fits("baseline", result, None)  # no end: always
    assert not fresh.fits("baseline", result, now + 400)  # 5 x 100.7 = 503.5 s
    assert "baseline forecast 504 s" in capsys.readouterr().out
    assert fresh.fits("baseline", result, now + 600)
    assert not fresh.fits("identical", result, now + 360)  # 3.5 x 100.7 + 30 = 382.5 s
    assert fresh.fits("identical", result, now + 420)
    assert fresh.fits("baseline", {"name": "x", "init": {}}, now + 1)  # an older json: no forecast, as before
    assert not fresh.fits("init", {"name": "fla-ln"}, now + 270)  # init needs INIT_NEEDS_S (420 s) of the call
    assert "init forecast 420 s" in capsys.readouterr().out
    assert fresh.fits("init", {"name": "fla-ln"}, now + 430) and fresh.fits("init", {"name": "fla-ln"}, None)
