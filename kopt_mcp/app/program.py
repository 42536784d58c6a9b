"""Render resources/program.md with the session's live command, paths and thresholds, so the
document the agent reads and the gates the server applies never disagree."""

from __future__ import annotations

from string import Template

from kopt_mcp.app.trace_age import trace_status
from kopt_mcp.paths import resources_dir
from kopt_mcp.referee import Referee
from kopt_mcp.referee.guards import protected_paths

TRACE_GPU = (
    "`kernel_trace_analysis`: find the hottest kernel, its GPU time, registers, shared memory and\n"
    "   bottleneck class; `optimization_knowledge` then lists techniques with short example kernels for\n"
    "   that class, and `kopt://skills/<backend>/SKILL.md` covers rewriting in another backend. Where it\n"
    "   answers `available: false` (no profiler here), follow its notes and go on to 3: the keep metric\n"
    "   is then the script metric.")
TRACE_CPU = (
    "`kernel_trace_analysis`: py-spy samples the benchmark and returns the hottest Python functions\n"
    "   (self and total time in ms and %, each one's hottest file:line; `own` = the repository's code)\n"
    "   with the class `cpu-bound`; `optimization_knowledge` then lists CPU techniques (vectorization,\n"
    "   fewer temporaries, threads, cache blocking). Where it answers `available: false`, follow its\n"
    "   notes: read the code the benchmark calls and run_benchmark's time per config class, then go on to 3.")
TRACE_UNKNOWN = TRACE_GPU + ("\n   On the CPU (no GPU here) it returns the hottest Python functions from py-spy and the\n"
                             "   class `cpu-bound` instead.")


def device_words(ref: Referee) -> tuple[str, str]:
    """(device line, trace step) of program.md for the device the session measures on: the CPU (leased,
    or `[gates] gpu_probe = "none"`), a GPU, or not known yet (before the first lease)."""
    vendor = ref.jobs.device.vendor if ref.jobs.device is not None else None
    if vendor == "cpu" or (vendor is None and ref.what.cfg.gates.gpu_probe == "none"):
        return "the CPU (no GPU here); other processes' load is gated by [gates] idle_cpu_pct", TRACE_CPU
    if vendor is not None:
        return f"{vendor} GPU ({ref.jobs.device.name})", TRACE_GPU
    return "leased by the first measuring call: an idle GPU where there is one, else the CPU", TRACE_UNKNOWN


def render_program(ref: Referee) -> str:
    """program.md for this session (markdown text)."""
    cfg, s = ref.what.cfg, ref.books.state
    b, g = cfg.benchmark, cfg.gates
    rules = [f"`{c}` == 0 on every row" for c in b.correctness_columns]
    if b.correctness:
        rules.append(f"`{b.correctness}` on every row")
    if cfg.correctness.command:
        rules.append(f"`{cfg.correctness.command}` exits 0")
    classes = ", ".join(f"`{k}`" for k in s.best.metrics) or "(known after the baseline)"
    device, trace_step = device_words(ref)
    if trace_step is TRACE_CPU:
        keep = "the script metric (no kernel profiler on the CPU)"
    elif cfg.profiler.backend == "none":
        keep = "the script metric (profiler backend none)"
    else:
        keep = f"profiler GPU time of kernel(s) matching `{cfg.profiler.kernel}`" if cfg.profiler.kernel else \
            "profiler GPU time of the hottest kernel (script metric where no profiler exists)"
    text = (resources_dir() / "program.md").read_text(encoding="utf-8")
    return Template(text).safe_substitute(
        workspace=s.workspace, branch=s.branch, best_commit=s.best.commit, command=b.command, workdir=b.workdir,
        metric=b.metric, direction="higher" if b.higher_is_better else "lower", csv=b.csv,
        correctness="; ".join(rules), classes=classes,
        protected=", ".join(f"`{p}`" for p in [*protected_paths(ref.what, ref.where), "performance.md"]),
        keep_metric=keep,
        noise_pct=f"{g.noise_pct:g}", confirmations=g.confirmations, max_repairs=g.max_repairs,
        max_rounds=g.max_rounds, confidence=f"{g.confidence * 100:g}",
        max_regressions=g.max_consecutive_regressions, device_wait=_device_wait(g, trace_step is TRACE_CPU), gpu_wait_s=f"{g.gpu_wait_s:g}",
        device=device, trace_step=trace_step, trace_status=trace_status(ref.books.store.events(), s.best.commit))


def _device_wait(g, cpu: bool) -> str:
    """The gate's waiting in program.md's words: the CPU gate's `cpu_wait_s` (then it measures anyway)
    on the CPU, else the GPU gate's `gpu_wait_s` and `gpu_poll_s`."""
    if cpu:
        return f"CPU gate wait {g.cpu_wait_s:g} s (then it measures anyway)"
    return f"GPU wait {g.gpu_wait_s:g} s (poll {g.gpu_poll_s:g} s)"
