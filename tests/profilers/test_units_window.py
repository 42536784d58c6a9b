"""Issue 38 item 4, the cheats first: work on another stream, and work deferred past the timed window.

What the harness units attribute (kopt_cupti_trace.Trace, the injector's aggregation, run here on rows
in the collector's layout): a launch belongs to the invocation whose external correlation id its API
call carried, else to the invocation whose host-time window its API call started in, whatever stream
it ran on and whenever its GPU time ended. So a kernel on another stream launched inside the
invocation and finishing after it counts toward it (already, tested here), while a launch made
between two invocations (a thread the timed call left running, a batch flushed later) belonged to no
invocation and was free: the gap closed here (HarnessUnit.between_us, counted by
rules/unit_figures.py). Kernel names, durations and counts are stand-ins in the trace's real layout."""

from __future__ import annotations

import importlib.util
import re

from kopt_mcp.profilers.cupti import INJECT_DIR
from kopt_mcp.profilers.cupti_parse import _unit_of
from kopt_mcp.rules.decision import Code
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.unit_figures import figures
from kopt_mcp.rules.units import judge_units

spec = importlib.util.spec_from_file_location("kopt_trace_w", INJECT_DIR / "kopt_cupti_trace.py")
TRACE = importlib.util.module_from_spec(spec)
spec.loader.exec_module(TRACE)
TARGET = "softmax_kernel"
N = 40


def _run(us_by_inv, deferred=None, other_stream=False, noise=0.0):
    """One unit of N invocations, window i = [i*1000, i*1000+500] ns of host time: invocation i launches
    the target (us_by_inv(i) us, None: nothing) from inside its window; `deferred(i)` (us) launched from
    another thread between window i and i+1; `other_stream`: each launch's API call carries no external id
    and its GPU time ends long after the window (another stream, another thread)."""
    t = TRACE.Trace()
    corr, pairs, windows = 1, [], []
    for i in range(N):
        a = 1_000_000 + i * 1000
        windows.append([i, a, a + 500])
        us = us_by_inv(i)
        if us is not None:
            gpu = a + (100_000 if other_stream else 100)
            t.add_row([TARGET, gpu, gpu + int(us * 1000 * (1 + noise * ((i % 3) - 1))), [1, 1, 1], [128, 1, 1],
                       32, 0, corr, a + 50])
            if not other_stream:
                pairs.append([corr, (1 << TRACE.INV_BITS) | i])
            corr += 1
        d = deferred(i) if deferred else None
        if d is not None and i < N - 1:
            t.add_row([TARGET, a + 700, a + 700 + int(d * 1000), [1, 1, 1], [128, 1, 1], 32, 0, corr, a + 700])
            corr += 1
    t.add_ext(pairs)
    t.add_unit({"k": 1, "harness": "do_bench", "label": "softmax", "invocations": N, "windows": windows})
    return [_unit_of(0, t.units_doc()[0], {})]


def test_a_kernel_on_another_stream_finishing_after_the_window_counts_toward_its_invocation():
    unit = _run(lambda i: 10.0, other_stream=True)[0]
    f = figures(unit, re.compile(TARGET))
    assert f.target_invocations == N and f.target_us == 10.0 and unit.between_us == {}


def test_launches_between_invocations_count_toward_the_unit():
    unit = _run(lambda i: 10.0, deferred=lambda i: 4.0)[0]
    assert unit.between_launches == {TARGET: N - 1} and unit.between_us[TARGET] == 4.0 * (N - 1)
    f = figures(unit, re.compile(TARGET))
    assert f.target_us == 10.0 + 4.0 * (N - 1) / N  # spread over the unit's invocations


def test_cheat_batch_flushed_between_invocations_is_not_a_win():
    """The target runs for real once in four invocations; the other three calls queue their rows and a
    thread launches the batch after the window: per invocation the same work, none of it free."""
    best = lambda: _run(lambda i: 10.0, noise=0.01)  # noqa: E731
    cand = _run(lambda i: 10.0 if i % 4 == 0 else None, deferred=lambda i: 30.0 if i % 4 == 3 else None, noise=0.01)
    d = judge_units(best(), cand, best(), TARGET, Policy(noise_pct=1.0))
    assert not d.kept and d.code == Code.SKIPPED_WORK  # 30 of 40 invocations launched nothing
    f = figures(cand[0], re.compile(TARGET))
    assert f.target_us >= 10.0  # the deferred work counted: its time per invocation is not below BEST's


def test_cheat_one_call_in_ten_deferred_past_its_window_is_replayed_result_naming_the_launches():
    best = lambda: _run(lambda i: 10.0, noise=0.01)  # noqa: E731
    cand = _run(lambda i: None if i % 10 == 9 else 10.0, deferred=lambda i: 10.0 if i % 10 == 9 else None, noise=0.01)
    d = judge_units(best(), cand, best(), TARGET, Policy(noise_pct=1.0))
    assert not d.kept and d.code == Code.REPLAYED_RESULT
    assert "36/40" in d.reason and "3 target launch(es) between invocations" in d.reason
