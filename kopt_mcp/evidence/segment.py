"""Harness units found in a launch stream where the process did not mark them (pure).

Where the CUPTI injector could not mark the harness's units (a harness without a known timer, a
trace recorded before units existed, a backend without external correlation), the units are found
afterwards from each launch's start and shape (`segment_units`):

1. Invocations. A harness that clears the L2 cache before every timed call (triton's `do_bench`
   zeroes a 256 MB buffer: a fill kernel) launches that utility kernel once per invocation: the
   flush kernel is the utility kernel (evidence.names.is_utility_kernel) that most often comes right
   before a non-utility launch, and each stretch from one flush to the next is one invocation. No
   such kernel (at least MIN_FLUSHES times): no units (the launch-group rule decides).
2. Units. An invocation's context is the set of (kernel, grid, block) of its non-utility launches:
   the shapes of the target kernels that still scale with the config (a forward grid of one program
   per row beside a persistent backward grid of one program per SM) name the config. Consecutive
   invocations of one context are one unit; do_bench's warm-up calls, launched without a flush,
   fall into one long invocation (WARMUP_FACTOR x the median launches) that starts a new call of
   the timer: the unit boundary is placed DO_BENCH_ESTIMATES invocations before it (do_bench's
   estimate calls come first). Units of fewer than MIN_INVOCATIONS are set-up stretches, dropped.

What it cannot do: tell apart two configs whose every launch has the same shape and that the
harness runs one after the other without a warm-up block (then they are one unit), or count the
statements of a timed block. Marked units (kopt_units.py) have neither limit.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence

from kopt_mcp.evidence.groups import LaunchGroup
from kopt_mcp.evidence.names import is_utility_kernel
from kopt_mcp.evidence.trace import KernelTrace
from kopt_mcp.evidence.units import HarnessUnit, measured_units

#: a flush kernel is recognized when it precedes a non-utility launch at least this often
MIN_FLUSHES = 5
#: an invocation with this many times the median launches of its context is do_bench's warm-up block
WARMUP_FACTOR = 3.0
#: do_bench times five flushed calls to estimate the repetition count before its warm-up block
DO_BENCH_ESTIMATES = 5
#: a unit needs at least this many invocations (fewer: set-up launches between two timer calls)
MIN_INVOCATIONS = 3

Launch = tuple[float, str, tuple | None, tuple | None, float]  # start, kernel, grid, block, us


def launch_stream(groups: Sequence[LaunchGroup]) -> list[Launch]:
    """Every recorded launch of `groups` as (start, kernel, grid, block, us), by start. Groups
    without per-launch starts are left out."""
    out: list[Launch] = []
    for g in groups:
        if g.launch_starts is None or g.durations_us is None or len(g.launch_starts) != len(g.durations_us):
            continue
        out.extend((t, g.kernel, g.grid, g.block, d) for t, d in zip(g.launch_starts, g.durations_us))
    out.sort(key=lambda x: x[0])
    return out


def flush_kernel(stream: Sequence[Launch]) -> tuple[str, tuple | None] | None:
    """The (kernel, grid) of the harness's L2 flush: the utility launch shape that most often comes
    right before a non-utility launch, if it does so at least MIN_FLUSHES times; else None."""
    before: Counter = Counter()
    for prev, cur in zip(stream, stream[1:]):
        if is_utility_kernel(prev[1]) and not is_utility_kernel(cur[1]):
            before[(prev[1], prev[2])] += 1
    if not before:
        return None
    shape, count = before.most_common(1)[0]
    return shape if count >= MIN_FLUSHES else None


def invocations(stream: Sequence[Launch], flush: tuple[str, tuple | None]) -> list[list[Launch]]:
    """The launches between one flush and the next (the flush left out), in order; the stretch
    before the first flush too. Empty lists are invocations that launched nothing but the flush."""
    out: list[list[Launch]] = [[]]
    for launch in stream:
        if (launch[1], launch[2]) == flush:
            out.append([])
        else:
            out[-1].append(launch)
    return out


def _context(inv: Sequence[Launch]) -> frozenset:
    return frozenset((k, g, b) for _, k, g, b, _ in inv if not is_utility_kernel(k))


def _runs(invs: list[list[Launch]]) -> list[list[list[Launch]]]:
    """Consecutive invocations of one context (empty invocations join the run they are in)."""
    runs: list[list[list[Launch]]] = []
    last = None
    for inv in invs:
        ctx = _context(inv)
        if runs and (not ctx or ctx == last):
            runs[-1].append(inv)
            continue
        runs.append([inv])
        last = ctx
    return runs


def _split_at_warmups(run: list[list[Launch]]) -> list[list[list[Launch]]]:
    """One context run cut where a do_bench warm-up block shows a new timer call began."""
    sizes = [len(inv) for inv in run if inv]
    if not sizes:
        return [run]
    typical = statistics.median(sizes)
    starts = [0]
    for i, inv in enumerate(run):
        if typical > 0 and len(inv) >= WARMUP_FACTOR * typical and i > 0:
            cut = max(starts[-1], i - DO_BENCH_ESTIMATES)
            if cut > starts[-1]:
                starts.append(cut)
    return [run[a:b] for a, b in zip(starts, [*starts[1:], len(run)])]


def _unit(index: int, invs: list[list[Launch]]) -> HarnessUnit:
    per: dict[str, dict[int, float]] = {}
    counts: dict[str, dict[int, int]] = {}
    for i, inv in enumerate(invs):
        for _, kernel, _, _, us in inv:
            per.setdefault(kernel, {})[i] = per.get(kernel, {}).get(i, 0.0) + us
            counts.setdefault(kernel, {})[i] = counts.get(kernel, {}).get(i, 0) + 1
    return HarnessUnit(index=index, harness="segmented", invocations=len(invs), per_invocation=per,
                       launches=counts, source="segmented")


def segment_units(trace: KernelTrace) -> list[HarnessUnit] | None:
    """The harness units of `trace` found in its launch stream (see the module docstring), in the
    harness's order; None where the trace has no launch groups with per-launch starts or no flush
    kernel. Never raises."""
    if not trace.groups:
        return None
    stream = launch_stream(trace.groups)
    flush = flush_kernel(stream)
    if flush is None:
        return None
    units: list[list[list[Launch]]] = []
    for run in _runs(invocations(stream, flush)):
        units.extend(u for u in _split_at_warmups(run) if sum(1 for inv in u if inv) >= MIN_INVOCATIONS)
    return [_unit(i, invs) for i, invs in enumerate(units)] or None


def trace_units(trace: KernelTrace) -> list[HarnessUnit] | None:
    """The units the keep metric reads: the marked ones where the injector recorded them, without
    the autotuner's timing of its configs (evidence.units.measured_units), else those
    `segment_units` finds; None where neither exists."""
    marked = measured_units(trace.units) if trace.units else None
    return marked if marked else segment_units(trace)


__all__ = ["flush_kernel", "invocations", "launch_stream", "segment_units", "trace_units"]
