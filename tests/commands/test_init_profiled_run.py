"""Issue 35 item 2: init's separate profiled run (the one that names the target kernels where no
benchmark run was traced) starts only where the budget holds PROFILED_RUN_FACTOR plain runs, and
one the budget cuts is marked NOT CHECKED with how to name the kernels by hand.

Seen on one H200 (2026-12-03, benchmarks/results/2026-12-03-h200-init-fresh-s14-liger-flce*): Liger
FusedLinearCrossEntropy's plain run took 201.6 s; init started the profiled run with 215 s left, the
budget cut it after 215.0 s, and the proposal read "the profiled run exited None" with nothing marked.
The budget's clock is moved by hand here (Budget.t0) and the cut run sleeps 60 s against a 3 s limit,
so a loaded machine cannot change what is asserted."""

from __future__ import annotations

import time

import pytest

from kopt_mcp.commands.init import profiled as profiled_mod
from kopt_mcp.commands.init.progress import Budget, Progress
from kopt_mcp.commands.init.profiled import _BY_HAND, PROFILED_RUN_FACTOR, profiled_targets


def _budget(total_s: float, left_s: float) -> Budget:
    b = Budget(total_s)
    b.t0 = time.monotonic() - (total_s - left_s)
    return b


@pytest.fixture
def calls(monkeypatch):
    """kernel_regex's calls (its time limit), as if a GPU were here; it names one kernel."""
    seen: list[float] = []
    monkeypatch.setattr(profiled_mod, "gpu_count", lambda: 1)
    monkeypatch.setattr(profiled_mod, "kernel_regex",
                        lambda repo, command, timeout_s, profiler=None, topic=None: (seen.append(timeout_s) or
                                                                                     ("^k$", "one trace")))
    return seen


@pytest.mark.parametrize("left_s, started", [(110.0, False), (1.2 * 100, False), (130.0, True), (500.0, True)])
def test_the_profiled_run_starts_only_where_the_budget_holds_its_factor_of_a_plain_run(tmp_path, calls, left_s,
                                                                                       started):
    budget = _budget(600, left_s)
    kern = profiled_targets(tmp_path, "python bench.py", None, budget, Progress(budget, quiet=True), 100.0, 600.0)
    assert PROFILED_RUN_FACTOR == 1.25
    assert (kern[0] == "^k$") is started and len(calls) == int(started)
    assert budget.unchecked == ([] if started else [("the target kernels (one profiled run)", _BY_HAND)])
    if started:
        assert left_s - 5 < calls[0] <= left_s  # its limit: what is left of the budget


class SleepingProfiler:
    """A profiler whose run outlasts any budget here (60 s)."""

    name = "cupti"
    measures_script = True

    def available(self) -> bool:
        return True

    def wrap(self, command: str, out_dir) -> str:
        return "sleep 60"

    def parse(self, out_dir):
        raise AssertionError("a cut run's trace is never read")


def test_a_profiled_run_the_budget_cuts_is_marked_not_checked(tmp_path):
    budget = _budget(600, 3.0)
    t0 = time.monotonic()
    kern = profiled_targets(tmp_path, "python bench.py", None, budget, Progress(budget, quiet=True), 1.0, 600.0,
                    profiler=SleepingProfiler())
    assert time.monotonic() - t0 < 40  # killed at the budget, not at the run's end
    assert kern[0] is None and kern[1].startswith("the profiled run was cut by init's budget")
    assert budget.unchecked == [("the target kernels (one profiled run, cut by the budget)", _BY_HAND)]


def test_a_profiled_run_past_its_own_limit_says_so(tmp_path):
    kern = profiled_mod.kernel_regex(tmp_path, "python bench.py", 1.0, SleepingProfiler())
    assert kern == (None, "the profiled run did not end within its limit (1 s)")
