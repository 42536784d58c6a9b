"""Prompt texts built from the live session: the loop, and advisory research directions."""

from __future__ import annotations

from kopt_mcp.app.program import TRACE_CPU, device_words, render_program
from kopt_mcp.app.trace_age import trace_age
from kopt_mcp.events import Attempt, Trace, last
from kopt_mcp.referee import Referee

ATTEMPTS_SHOWN = 12


def _fmt(v) -> str:
    return "-" if v is None else (f"{v:.4g}" if isinstance(v, float) else str(v))


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}%"


def _functions_block(trace: Trace) -> str:
    lines = ["| function | file:line | self % | total % |", "|---|---|---|---|"]
    for f in trace.functions:
        lines.append(f"| {f.function} | {f.file}:{_fmt(f.line)} | {_fmt(f.self_pct)} | {_fmt(f.total_pct)} |")
    return "\n".join(lines) + "\n\nCPU sampling profile (py-spy): % of samples; self = in the function's own lines."


def _trace_block(events: list) -> str:
    trace = last(events, Trace)
    if trace is not None and trace.functions:
        return _functions_block(trace)
    if trace is None or not trace.kernels:
        return ("No trace yet: call kernel_trace_analysis first (GPU: kernels; CPU: Python functions via py-spy); "
                "where it has none, reason from the per-class table and the code.")
    cols = ["name", "calls", "total_us", "avg_us", "share_pct", "registers_per_thread",
            "shared_mem_per_block_bytes", "sm_throughput_pct", "dram_throughput_pct", "achieved_occupancy_pct"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for k in trace.kernels:  # vendor metrics (sm_throughput_pct, ...) are the kernel rows' extra fields
        row = k.model_dump()
        lines.append("| " + " | ".join(_fmt(row.get(c)) for c in cols) + " |")
    lines.append(f"\nTarget kernel(s): {', '.join(trace.target_kernels) or '-'}; "
                 f"target GPU time {_fmt(trace.target_gpu_us)} us of {_fmt(trace.total_gpu_us)} us.")
    return "\n".join(lines)


def _age_line(events: list, best_commit: str) -> str:
    """The trace's age above its table (app/trace_age.py): current, or STALE with how to refresh it."""
    age = trace_age(events, best_commit)
    return "" if age is None else f"Trace {age.text}.\n\n"


def _attempts_block(events: list) -> str:
    rows = [e for e in events if isinstance(e, Attempt)][-ATTEMPTS_SHOWN:]
    if not rows:
        return "No attempts yet."
    lines = ["| attempt | target | verdict | mean change per class | hypothesis |", "|---|---|---|---|---|"]
    for e in rows:
        changes = ", ".join(f"{c.key} {_pct(c.mean_pct)}" for c in e.classes) or "-"
        hyp = e.hypothesis.replace("|", "/").replace("\n", " ")
        lines.append(f"| {e.attempt} | {e.target} | {e.verdict} | {changes} | {hyp} |")
    return "\n".join(lines)


#: how a hypothesis names its bottleneck and which rewrites to weigh, per device (research_directions)
RETURN_GPU = """the trace that point to it (memory-bound: DRAM throughput near peak; compute-bound: SM throughput
near peak; latency/occupancy-bound: both low, occupancy limited by registers or shared memory);
the change; which config class it targets (or global); the expected gain and why; the risk to
correctness. Consider, besides tuning (tile sizes, warps, stages, vector width): fusing the
target kernel with its neighbours in the trace, a different algorithm (single-pass/online,
persistent, split-K), and another backend where it fits the hardware (Triton, CUDA/CUTLASS-CuTe,
CK, TileLang, FlyDSL, hand-written ASM)."""
RETURN_CPU = """the profile that point to it (cpu-bound: the own functions and lines holding the samples, with
their sample counts: a Python loop over rows, temporaries, one busy core; time in the harness or
in imports is not the kernel's);
the change; which config class it targets (or global); the expected gain and why; the risk to
correctness. Consider: vectorization (whole-array numpy instead of a Python loop), reduced-precision
compute where the tolerance allows, in-place buffers and fewer temporaries, a different algorithm
(single-pass/online), threads over blocks or compiled code (Numba, Cython) where the machine has
cores to spare, cache blocking for large inputs."""


def research_directions(ref: Referee) -> str:
    """A request for ranked, advisory optimization hypotheses from the latest trace, the per-class
    table and past attempts. The text says they are advice, never orders. On a CPU session it speaks
    of the sampled profile, functions and lines, never GPU time, DRAM/SM throughput or occupancy."""
    s, cfg = ref.books.state, ref.what.cfg
    events = ref.books.store.events()
    cpu = device_words(ref)[1] is TRACE_CPU
    best = "\n".join(f"| {k} | {_fmt(v)} |" for k, v in s.best.metrics.items()) or "| (no baseline yet) | - |"
    judged = ("the script metric: no kernel profiler on the CPU" if cpu
              else "profiler GPU time on a GPU, the script metric without a profiler")
    best_line = (f"BEST_COMMIT {s.best.commit[:12]}." if cpu else f"BEST_COMMIT {s.best.commit[:12]}; GPU time of the "
                 f"target kernel(s): {_fmt(s.best.gpu_us)} us (\"-\": none measured).")
    return f"""You are advising a kernel engineer's optimization loop. Propose research directions.

Your output is ADVICE: a ranked list of hypotheses the optimizing agent weighs against its own
profile and judgement. None of it is an order, and none of it changes the rules: every candidate is
still judged by save_and_test (correctness, noise threshold {cfg.gates.noise_pct:g}%, per-class verdicts,
{judged}).

## Current best per config class ({cfg.benchmark.metric}, {'higher' if cfg.benchmark.higher_is_better else 'lower'} is better)

| config class | {cfg.benchmark.metric} |
|---|---|
{best}

{best_line}

## Latest {'profile' if cpu else 'trace'} (hottest first)

{_age_line(events, s.best.commit)}{_trace_block(events)}

## Past attempts (latest {ATTEMPTS_SHOWN})

{_attempts_block(events)}

## What to return

If the trace above is marked STALE, say so first and offer to refresh it (kernel_trace_analysis) before
the ranking leans on its numbers. Up to 6 hypotheses, most promising first. For each: the bottleneck it addresses and the numbers in
{RETURN_CPU if cpu else RETURN_GPU} Do not repeat an idea the attempts table shows as
regressed or tie unless you say what is different; a `divergent` result suggests a specialised
kernel for its target class behind a dispatch on the config.
"""


def optimization_loop(ref: Referee) -> str:
    """The loop prompt: program.md with the session's live values."""
    return ("Optimize the kernel following this program. Use only the kopt-mcp tools for measuring "
            "and for git state.\n\n" + render_program(ref))
