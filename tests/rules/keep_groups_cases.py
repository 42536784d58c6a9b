"""Every input the launch-group keep metric (kopt_mcp/rules/keep.py `judge_groups`) is judged on in
tests/rules, named, with its arguments: for test_keep_groups_replay.py, which compares today's
decisions with the figures captured from the code before `judge_groups` was cut into predicates
(tests/fixtures/keep_groups/before_split.json).

Inputs, each built the same way every time (nothing here is timed or random beyond a seed):

- recorded: the four real H100 `triton.testing.do_bench` processes (tests/fixtures/cupti/h100_dobench),
  every ordered triple of them, with and without a regex, classes, recent spreads, clocks and a
  known time-driven harness; the recorded rocprofv3 kernel traces (tests/fixtures/rocprofv3), the
  docs trace also without its divide_kernel dispatches; the recorded format-1 H100 trace
  (tests/fixtures/cupti/h100_torch_matmul), which has no per-launch times;
- replayed: every `judge_groups` call of test_keep_groups.py, test_pairing.py and test_clocks.py,
  on the same seeds (tests/replay_cupti.py `dobench_trace`, seeded in call order as the `runs`
  fixture does), plus a sweep of planted gains, process shifts and launch-count regimes over
  the floor's and the bound's edges.

To capture the figures again (only from the code before the split, commit ec6c01c):
`PYTHONPATH=$PWD python -m tests.rules.keep_groups_cases OUT.json`.
"""

from __future__ import annotations

import itertools
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from kopt_mcp.evidence.clock import RunClock
from kopt_mcp.evidence.groups import LaunchGroup
from kopt_mcp.profilers.cupti import parse_cupti_dir
from kopt_mcp.profilers.rocprof import parse_rocprof_csv
from tests.replay_cupti import FIXTURE, dobench_trace
from tests.rules.conftest import bwd_groups, clk, configs, flaggems_like, spin_run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
DOBENCH = sorted((FIXTURES / "cupti" / "h100_dobench").glob("run*"))
ROCPROF = FIXTURES / "rocprofv3"
XMMA = r"^sm80_xmma_gemm"
CAPTURED = FIXTURES / "keep_groups" / "before_split.json"

#: a case: (a scratch folder) -> (positional arguments, keyword arguments) of judge_groups
Case = Callable[[Path], tuple[tuple, dict]]


class _Runs:
    """tests/rules/conftest.py `runs`: replayed do_bench traces, seeded 0, 1, 2, ... in call order."""

    def __init__(self, tmp: Path):
        self.tmp, self.n = tmp, 0

    def __call__(self, cfg, shift_pct=0.0, **kw):
        n, self.n = self.n, self.n + 1
        return dobench_trace(self.tmp / f"run{n}", seed=n, configs=cfg, shift_pct=shift_pct, **kw)


def _recorded() -> dict[str, Case]:
    cases: dict[str, Case] = {}
    for i, j, k in itertools.permutations(range(len(DOBENCH)), 3):
        name = f"recorded/dobench/{i}{j}{k}"

        def triple(_tmp, i=i, j=j, k=k):
            return tuple(parse_cupti_dir(DOBENCH[x]) for x in (i, j, k))
        cases[name] = lambda tmp, t=triple: (t(tmp), {})
        cases[name + "/xmma"] = lambda tmp, t=triple: (t(tmp), {"kernel_regex": XMMA})
        if (i, j, k) in ((0, 1, 2), (1, 2, 3), (3, 0, 1), (2, 3, 0)):
            cases[name + "/not_suspect"] = lambda tmp, t=triple: (t(tmp), {"suspect": False})
            cases[name + "/classes"] = lambda tmp, t=triple: (t(tmp), {"classes": ["n=1024", "n=2048"]})
            cases[name + "/xmma_classes"] = lambda tmp, t=triple: (t(tmp), {"kernel_regex": XMMA,
                                                                           "classes": ["n=1024"]})
            cases[name + "/recent"] = lambda tmp, t=triple: (t(tmp), {"recent_spreads_pct": [0.05, 0.1, 0.02],
                                                                      "min_gain_pct": 0.05})
            cases[name + "/known_time_driven"] = lambda tmp, t=triple: (t(tmp), {"known_time_driven": True})
            cases[name + "/clocks_step"] = lambda tmp, t=triple: (t(tmp), {"clocks": (clk(1980), clk(1980), clk(1965))})
            cases[name + "/clocks_higher"] = lambda tmp, t=triple: (t(tmp), {"clocks": (clk(1965), clk(1980), clk(1965))})
            cases[name + "/confidence"] = lambda tmp, t=triple: (t(tmp), {"confidence": 0.9, "min_gain_pct": 0.0})

    def docs(_tmp):
        return parse_rocprof_csv(ROCPROF / "rocprofiler_sdk_docs_kernel_trace.csv")

    def no_divide(tmp):
        text = (ROCPROF / "rocprofiler_sdk_docs_kernel_trace.csv").read_text().splitlines()
        path = tmp / "kernel_trace.csv"
        path.write_text("\n".join([text[0]] + [r for r in text[1:] if "divide_kernel" not in r]) + "\n")
        return parse_rocprof_csv(path)

    cases["recorded/rocprof/docs/same"] = lambda tmp: ((docs(tmp),) * 3, {"kernel_regex": "kernel"})
    cases["recorded/rocprof/docs/same/default"] = lambda tmp: ((docs(tmp),) * 3, {})
    cases["recorded/rocprof/docs/no_divide"] = lambda tmp: ((docs(tmp), no_divide(tmp), docs(tmp)),
                                                            {"kernel_regex": "kernel"})
    cases["recorded/rocprof/docs/no_divide/default"] = lambda tmp: ((docs(tmp), no_divide(tmp), docs(tmp)), {})
    cases["recorded/rocprof/docs/divide_only_best"] = lambda tmp: ((no_divide(tmp), docs(tmp), docs(tmp)),
                                                                   {"kernel_regex": "kernel"})
    cases["recorded/rocprof/docs/no_match"] = lambda tmp: ((docs(tmp),) * 3, {"kernel_regex": "^no_such_kernel$"})
    for stem in ("rocprofiler_sdk_2024_kernel_trace_legacy_schema", "hpctraining_rocpd2csv_out_kernel_trace",
                 "hpctraining_jacobi_hip_kernel_stats"):
        cases[f"recorded/rocprof/{stem}"] = lambda tmp, s=stem: ((parse_rocprof_csv(ROCPROF / f"{s}.csv"),) * 3, {})
    cases["recorded/rocprof/legacy_vs_docs"] = lambda tmp: ((docs(tmp), parse_rocprof_csv(
        ROCPROF / "rocprofiler_sdk_2024_kernel_trace_legacy_schema.csv"), docs(tmp)), {"kernel_regex": "kernel"})

    def format1(tmp):
        d = tmp / "format1"
        d.mkdir(exist_ok=True)
        (d / FIXTURE.name).write_text(FIXTURE.read_text())
        return parse_cupti_dir(d)

    cases["recorded/cupti/format1"] = lambda tmp: ((format1(tmp),) * 3, {})
    cases["recorded/cupti/format1_vs_dobench"] = lambda tmp: (
        (parse_cupti_dir(DOBENCH[0]), format1(tmp), parse_cupti_dir(DOBENCH[1])), {})
    cases["recorded/cupti/dobench_best_format1"] = lambda tmp: (
        (format1(tmp), parse_cupti_dir(DOBENCH[0]), parse_cupti_dir(DOBENCH[1])), {})
    return cases


def _keep_groups_tests() -> dict[str, Case]:
    """The calls of test_keep_groups.py and test_pairing.py, seeded as there."""
    c: dict[str, Case] = {}
    for s in range(8):  # test_identical_candidate_is_not_kept_across_seeds: seeds 3s, 3s + 1, 3s + 2

        def same(tmp, s=s):
            r = _Runs(tmp)
            r.n = 3 * s
            return (r(configs()), r(configs()), r(configs())), {}
        c[f"replayed/identical/{s}"] = same

    def call(build):
        return lambda tmp: build(_Runs(tmp))

    c["replayed/two_percent_win"] = call(lambda r: ((r(configs()), r(configs(0.98, 0.98)), r(configs())),
                                                    {"classes": ["M=128", "M=512"]}))
    c["replayed/one_percent_slower"] = call(lambda r: ((r(configs()), r(configs(1.01, 1.01)), r(configs())), {}))
    for s in (True, False):
        c[f"replayed/suspect_{s}"] = call(lambda r, s=s: ((r(configs()), r(configs()), r(configs())), {"suspect": s}))
    c["replayed/win_in_one_class"] = call(lambda r: ((r(configs()), r(configs(1.0, 0.9)), r(configs())), {}))
    c["replayed/warm_up"] = call(lambda r: ((r(configs()), r(configs(warmup=40)), r(configs())), {}))
    c["replayed/skipped_time_driven"] = call(lambda r: (
        (r(configs()), r(configs(0.95, 0.95, calls=((8, 8), (3, 3)), warmup=0)), r(configs())), {}))
    fixed = ((100, 100), (30, 30))
    c["replayed/skipped_fixed"] = call(lambda r: (
        (r(configs(calls=fixed)), r(configs(0.9, 0.9, calls=((100, 100), (29, 29)))), r(configs(calls=fixed))), {}))
    c["replayed/missing_best_group"] = call(lambda r: ((r(configs()), r(configs(0.9, 0.9)[:1]), r(configs())), {}))
    extra = configs(0.95, 0.95) + [{"grid": (1, 1, 1), "scale": 1.0, "calls": (250, 250), "warmup": 0}]
    c["replayed/extra_work_charged"] = call(lambda r: ((r(configs()), r(extra), r(configs())), {}))
    c["replayed/process_shift"] = call(lambda r: (
        (r(configs()), r(configs(0.995, 0.995)), r(configs(), shift_pct=1.5)), {}))

    def small(r):
        b1, b2 = r(configs()), r(configs(), shift_pct=1.5)
        return (b1, r(configs(small=0.995, large=0.995)), b2), {"suspect": True}
    c["replayed/below_floor_small"] = call(small)
    for s in (False, True):
        c[f"replayed/twenty_percent_slower_suspect_{s}"] = call(lambda r, s=s: (
            (r(configs()), r(configs(small=1.2, large=1.2)), r(configs())), {"suspect": s}))
    # test_pairing.py
    grid = configs(0.97, 0.97)
    grid[0]["grid"] = (256, 1, 1)
    c["replayed/pairing/changed_grid"] = call(lambda r: ((r(configs()), r(grid), r(configs())),
                                                         {"classes": ["M=128", "M=512"]}))
    c["replayed/pairing/renamed_regex"] = call(lambda r: (
        (r(configs()), r(configs(0.97, 0.97, name="my_sgemm_v2")), r(configs())), {"kernel_regex": "sgemm"}))
    c["replayed/pairing/renamed_no_regex"] = call(lambda r: (
        (r(configs()), r(configs(0.5, 0.5, name="my_sgemm_v2")), r(configs())), {}))

    def visited(r):  # best_before, best_after, then the candidate: as the test builds them
        b1, b2 = r(flaggems_like()), r(flaggems_like())
        return (b1, r(flaggems_like(long_scale=0.25, long_block=(1024, 1, 1))), b2), {}
    c["replayed/pairing/visited_twice"] = call(visited)
    c["replayed/pairing/visited_twice_tie"] = call(lambda r: ((r(flaggems_like()), r(flaggems_like()), r(flaggems_like())), {}))

    def fake(r):
        f = dict(grid=(1024, 1, 1), scale=0.01, calls=(5, 8), warmup=0)
        best = [r(flaggems_like()), r(flaggems_like())]
        return (best[0], r([f] + flaggems_like()), best[1]), {}
    c["replayed/pairing/fake_fast_visit"] = call(fake)
    seq = list(range(256, 4097, 256))
    c["replayed/pairing/bwd_grid_collision"] = lambda tmp: (
        (bwd_groups(seq, 1, 1.0), bwd_groups(seq, 8, 0.9), bwd_groups(seq, 1, 1.0)), {"kernel_regex": "_rms_norm_bwd"})

    def cached(_tmp):
        best = bwd_groups([256, 512, 768], 1, 1.0)
        once = bwd_groups([768], 1, 1.0, calls=1)[0].model_copy(update={"first_order": 2.0})
        no_op = LaunchGroup(kernel="_rms_norm_bwd", grid=(1, 1, 1), block=(128, 1, 1), calls=299, total_us=299 * 0.5,
                            median_us=0.5, first_order=2.5, durations_us=[0.5] * 299)
        return (best, [*bwd_groups([256, 512], 1, 1.0), once, no_op], bwd_groups([256, 512, 768], 1, 1.0)), {
            "kernel_regex": "_rms_norm_bwd"}
    c["replayed/pairing/cached_no_op"] = cached
    return c


def _clock_tests() -> dict[str, Case]:
    """The calls of test_clocks.py (launch groups built there; no trace)."""
    fast, slow = 379.9, 382.8
    padded = RunClock(sm_mhz=1965.0, min_mhz=1965.0, max_mhz=1980.0, busy_samples=200, steady_pct=80.0)
    ramp = RunClock(sm_mhz=1980.0, min_mhz=345.0, max_mhz=1980.0, busy_samples=68, steady_pct=97.06)
    plain = {"recent_spreads_pct": [0.0, 0.008, 0.004]}
    judged = {
        "step_plain": (fast, 376.1, slow, None), "step_before": (fast, 376.1, slow, (clk(1980), clk(1980), clk(1965))),
        "step_after": (fast, 379.0, slow, (clk(1980), clk(1965), clk(1965))), "higher_plain": (slow, fast, slow, None),
        "higher": (slow, fast, slow, (clk(1965), clk(1980), clk(1965))),
        "higher_real_win": (slow, 376.1, slow, (clk(1965), clk(1980), clk(1965))),
        "lower": (fast, 379.0, fast, (clk(1980), clk(1965), clk(1980))),
        "lower_unchanged": (fast, slow, fast, (clk(1980), clk(1965), clk(1980))),
        "unexplained": (fast, 376.1, slow, (clk(1965), clk(1965), clk(1980))),
        "one_clock_plain": (fast, 376.1, fast, None), "one_clock": (fast, 376.1, fast, (clk(1980),) * 3),
        "unknown_clock": (fast, 376.1, slow, (clk(1980), None, clk(1965))),
        "padded_moved": (fast, fast, slow, (clk(1980), padded, clk(1965))),
        "padded_highest": (slow, fast, slow, (clk(1965), padded, clk(1965))),
        "ramp": (fast, 376.1, fast, (clk(1980), ramp, clk(1980))),
        "unsteady_ramp": (fast, 376.1, fast, (clk(1980), ramp.model_copy(update={"steady_pct": 70.0}), clk(1980))),
    }
    c: dict[str, Case] = {}
    for name, (b1, cand, b2, clocks) in judged.items():
        c[f"replayed/clocks/{name}"] = lambda _tmp, b1=b1, cand=cand, b2=b2, clocks=clocks: (
            (spin_run(b1), spin_run(cand, calls=270), spin_run(b2, calls=255), "spin_kernel"), {**plain, "clocks": clocks})
    for name, calls, known in (("equal_counts_alone", 253, False), ("equal_counts_known", 253, True),
                               ("cached_known", 100, True)):
        c[f"replayed/clocks/{name}"] = lambda _tmp, calls=calls, known=known: (
            (spin_run(fast, 254), spin_run(372.3, calls), spin_run(fast, 254), "spin_kernel"), {"known_time_driven": known})
    return c


def _sweep() -> dict[str, Case]:
    """Planted per-launch scales x BEST's process shift x launch-count regime x the session's spreads:
    the floor's and the bound's edges (kept, below the floor, not improved, skipped)."""
    c: dict[str, Case] = {}
    regimes = {"time_driven": ((200, 380), (50, 95)), "fixed": ((150, 150), (40, 40))}
    for (rname, calls), scale, shift, recent in itertools.product(
            regimes.items(), (0.96, 0.99, 0.996, 1.0, 1.004, 1.03), (0.0, 0.6), ((), (0.1, 0.3, 0.2))):
        name = f"replayed/sweep/{rname}/x{scale}/shift{shift}/recent{len(recent)}"

        def case(tmp, calls=calls, scale=scale, shift=shift, recent=recent):
            r = _Runs(tmp)
            r.n = 1000
            base = configs(calls=calls)
            return ((r(base, utility_calls=50), r(configs(scale, scale, calls=calls), utility_calls=50),
                     r(base, shift_pct=shift, utility_calls=50)),
                    {"recent_spreads_pct": list(recent), "classes": ["M=128", "M=512"]})
        c[name] = case
    return c


def all_cases() -> dict[str, Case]:
    """Every case, by name."""
    return {**_recorded(), **_keep_groups_tests(), **_clock_tests(), **_sweep()}


def figures(d) -> dict:
    """The figures a GroupKeepDecision is compared on: everything but its prose, its code and the
    figures added after the capture (the upper bound and the clock credit of the loss rule)."""
    out = d.model_dump(mode="json", exclude={"reason", "code", "upper_bound_pct"})
    if out.get("clock"):
        out["clock"].pop("note")
        out["clock"].pop("credit_pct", None)
    return out


def _old_cause(d) -> str:
    """What the pre-split code's reason said the cause was (its words are all it had); kept with the
    figures so that today's `code` is checked against the old code's own account of each case."""
    r = d.reason
    if d.kept:
        return "kept"
    for prefix, cause in (("profiling BEST_COMMIT:", "best_target_missing"),
                          ("profiling the candidate:", "candidate_target_missing"),
                          ("the profiler did not record each launch", "no_per_launch_times"),
                          ("BEST_COMMIT launched different target groups", "best_unreproducible"),
                          ("skipped work:", "best_group_missing"), ("skipped work (", "too_few_launches")):
        if r.startswith(prefix):
            return cause
    if "moved the candidate's way" in r:
        return "significant_gain_below_floor"
    return "no_significant_gain"


def capture(out: Path) -> None:
    """Run every case through the `judge_groups` importable now and write the figures to `out`."""
    from kopt_mcp.rules.keep import judge_groups

    doc: dict = {"note": ("judge_groups' figures on every case of tests/rules/keep_groups_cases.py, captured from "
                          "the code before judge_groups was cut into predicates (commit ec6c01c, branch tcodes) "
                          "with `PYTHONPATH=$PWD python -m tests.rules.keep_groups_cases OUT.json`; `old_cause` is "
                          "the cause that code's reason named (keep_groups_cases._old_cause). Do not regenerate "
                          "from newer code: this file is the before."), "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in all_cases().items():
            folder = Path(tmp) / name.replace("/", "_")
            folder.mkdir()
            args, kwargs = case(folder)
            d = judge_groups(*args, **kwargs)
            doc["cases"][name] = {**figures(d), "old_cause": _old_cause(d)}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    capture(Path(sys.argv[1]) if len(sys.argv) > 1 else CAPTURED)
