"""The real-repository driver (benchmarks/real_repos): candidate edits by exact anchor text, and one
end-to-end run on the bundled CPU example (the GPU projects run on the H100: benchmarks/results/
2026-11-24-h100-real-repos.md). Also the decision-quality benchmark's effect subsets."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "real_repos"))
sys.path.insert(0, str(ROOT / "benchmarks" / "decision_quality"))

from projects import PROJECTS, Candidate, EditError, replace_once
from run import effects_for

RUN = ROOT / "benchmarks" / "real_repos" / "run.py"


def test_an_edit_whose_anchor_is_missing_or_repeated_is_refused(tmp_path):
    f = tmp_path / "k.py"
    f.write_text("a = 1\nb = 1\n")
    with pytest.raises(EditError, match="found 0 times"):
        replace_once(f, "c = 1\n", "c = 2\n")
    with pytest.raises(EditError, match="found 2 times"):
        replace_once(f, " = 1\n", " = 2\n")
    Candidate("x", "tie", "", "k.py", old="b = 1\n", new="b = 2\n").apply(tmp_path)
    assert f.read_text() == "a = 1\nb = 2\n"


def test_every_gpu_project_tries_the_four_verdicts():
    four = {("identical", "tie"), ("win", "improved"), ("slowdown", "regressed"), ("broken", "incorrect")}
    for name in ("liger", "triton-kernels", "flaggems", "fla", "fla-ln"):
        got = {(c.name, c.expected) for c in PROJECTS[name].candidates}
        assert four <= got
        # more candidates (triton-kernels' wins inside the target kernels) expect one of the four verdicts, or
        # divergent (Liger's backward at 4 programs per SM: the whole operation of the small-T classes slower)
        assert {e for _, e in got} <= {e for _, e in four} | {"divergent"}
        assert len({c.name for c in PROJECTS[name].candidates}) == len(PROJECTS[name].candidates)


def test_tk_probe_gain_is_weighted_by_best_time_shares():
    """tk_probe's summary weighs each (direction, shape) by BEST's kernel time, as the keep metric
    weighs launch groups: a 50% faster small item barely moves a large unchanged one."""
    from tk_probe import summarize

    items = [
        {"candidate": "c", "direction": "fwd", "best_kernel_ms": 1.0, "kernel_ms": 1.0,
         "best_call_ms": 2.0, "call_ms": 2.0},
        {"candidate": "c", "direction": "bwd", "best_kernel_ms": 0.1, "kernel_ms": 0.05,
         "best_call_ms": 1.0, "call_ms": 0.5},
        {"candidate": "d", "direction": "bwd", "best_kernel_ms": 0.1, "kernel_ms": None},  # failed: not counted
    ]
    s = summarize(items)
    assert s["c"]["gain_pct"] == pytest.approx(100 * 0.05 / 1.1, abs=0.01)
    assert s["c"]["fwd_gain_pct"] == 0.0 and s["c"]["bwd_gain_pct"] == 50.0
    assert s["c"]["bwd_call_gain_pct"] == 50.0 and s["c"]["items"] == 2 and s["c"]["mean_ratio"] == 0.75
    assert s["d"] == {"items": 0, "mean_ratio": None, "gain_pct": None, "fwd_gain_pct": None, "bwd_gain_pct": None,
                      "fwd_call_gain_pct": None, "bwd_call_gain_pct": None}


def test_the_driver_on_the_cpu_example_records_an_incorrect_candidate(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for f in ("bench.py", "kernel.py", "reference.py"):
        shutil.copy(ROOT / "examples" / "cpu_softmax" / f, src / f)
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(RUN), "--project", "cpu-softmax", "--src", str(src), "--commit",
                        "test", "--out", str(out), "--skip-init", "--only", "broken"],
                       capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False,
                       env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads((out / "cpu-softmax.json").read_text())
    assert result["baseline"]["ok"] and [v["verdict"] for v in result["verdicts"]] == ["incorrect"]
    assert "| broken | incorrect | incorrect | rows_incorrect | yes |" in (out / "cpu-softmax.md").read_text()
    events = [json.loads(line)["event"] for line in (out / "cpu-softmax-ledger.jsonl").read_text().splitlines()]
    assert "session_started" in events and len(events) > 3
    with tarfile.open(out / "cpu-softmax-first-run.tar.gz") as tar:
        assert any(n.endswith("bench.csv") for n in tar.getnames())


def test_a_second_call_with_work_goes_on_with_the_recorded_baseline(tmp_path):
    """`--work`: the GPU machine keeps /tmp between calls while warm, so a project whose baseline
    takes minutes is not measured again for the candidates that did not fit in the first call."""
    src = tmp_path / "src"
    src.mkdir()
    for f in ("bench.py", "kernel.py", "reference.py"):
        shutil.copy(ROOT / "examples" / "cpu_softmax" / f, src / f)
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT)}

    def call(out: str, only: str) -> dict:
        r = subprocess.run([sys.executable, str(RUN), "--project", "cpu-softmax", "--src", str(src), "--commit",
                            "test", "--out", str(tmp_path / out), "--skip-init", "--only", only,
                            "--work", str(tmp_path / "work")],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path, check=False, env=env)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        return json.loads((tmp_path / out / "cpu-softmax.json").read_text())

    first = call("out1", "broken")
    assert not first["resumed"] and first["baseline"]["ok"] and "seconds" in first["baseline"]
    second = call("out2", "broken")
    assert second["resumed"] and second["baseline"] == {"ok": True, "resumed": True,
                                                        "reason": "recorded by an earlier call"}
    assert [v["verdict"] for v in second["verdicts"]] == ["incorrect"]
    events = [json.loads(line)["event"] for line in (tmp_path / "out2" / "cpu-softmax-ledger.jsonl").read_text().splitlines()]
    assert events.count("baseline") == 1, events


def test_decision_quality_effect_subsets():
    assert list(effects_for("gpu-dobench", "identical, -1%,+1%")) == ["identical", "-1%", "+1%"]
    assert list(effects_for("gpu")) == list(effects_for("gpu-dobench"))
    with pytest.raises(SystemExit, match="unknown effect"):
        effects_for("cpu", "-1%")


def test_an_init_command_is_the_command_the_finished_kopt_toml_runs():
    # init gets a replacement command only where the documented one fails on the GPU machine; it
    # is then exactly what kopt.toml runs, or init would judge another benchmark than the loop
    import tomllib

    tk = PROJECTS["triton-kernels"]
    assert tk.init_command == tomllib.loads(tk.toml)["benchmark"]["command"] != tk.command
    assert "donated_buffer = False" in tk.init_command
    assert PROJECTS["flaggems"].init_command == PROJECTS["flaggems"].command  # its documented command runs
    assert PROJECTS["liger"].init_command.startswith("PYTHONPATH=src")  # not the installed copy


def test_fla_ln_runs_the_projects_benchmark_narrowed_to_the_metrics_provider():
    """fla-ln's command runs flash-linear-attention's own module benchmark with one of its 16 providers
    (the script takes no arguments): the provider kept is the one whose perf_report column is the metric,
    init gets that same command, and the code given to `python -c` parses."""
    import ast
    import shlex
    import tomllib

    p = PROJECTS["fla-ln"]
    toml = tomllib.loads(p.toml)
    argv = shlex.split(toml["benchmark"]["command"])
    assert argv[1:3] == ["python", "-c"] and len(argv) == 4
    code = ast.parse(argv[3])
    kept = [[e.value for e in n.elts] for n in ast.walk(code) if isinstance(n, ast.List)]
    assert kept == [["fused_ln_bwd"]]
    assert toml["benchmark"]["metric"] == "fused_ln_bwd (Execution Time (ms))"  # "<line_name> (<ylabel>)"
    assert "benchmark_layernorm" in argv[3] and "run_module_benchmark" in argv[3]
    assert p.init_command == toml["benchmark"]["command"] != p.command
    assert p.command.endswith("python benchmarks/modules/benchmark_layernorm.py")  # the documented one
    # the edits of NS (the persistent grid) are different lines; `broken` is the D > 512 kernel's mask
    ns_edits = {c.name: c.new for c in p.candidates if c.old.lstrip().startswith("NS = ")}
    assert set(ns_edits) == {"win", "more-programs", "slowdown"} and len(set(ns_edits.values())) == 3


def test_fla_ln_candidates_apply_after_the_win_was_committed(tmp_path):
    """With --commit-wins the win's NS line (2 programs per SM) is BEST's when the other candidates run
    (on the H200, 2026-12-02, their upstream anchor was gone: EditError): they fall back to it."""
    from fla import FLA_NS
    from fla_ln import ns_times

    p = PROJECTS["fla-ln"]
    by = {c.name: c for c in p.candidates}
    for base in (FLA_NS, ns_times("2")):  # upstream, then after the win's commit
        for name, grown in (("more-programs", "* 4"), ("slowdown", "// 8")):
            f = tmp_path / by[name].file
            f.parent.mkdir(parents=True, exist_ok=True)
            f.write_text("    G = 1\n" + base + "    BS = 1\n")
            by[name].apply(tmp_path)
            assert grown in f.read_text() and f.read_text().count("NS = ") == 1
    f.write_text("    G = 1\n")
    with pytest.raises(EditError, match="found 0 times"):
        by["slowdown"].apply(tmp_path)
