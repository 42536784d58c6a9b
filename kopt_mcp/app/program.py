"""Render resources/program.md with the session's live command, paths and thresholds, so the
document the agent reads and the gates the server applies never disagree."""

from __future__ import annotations

from string import Template

from kopt_mcp.paths import resources_dir
from kopt_mcp.referee import Referee
from kopt_mcp.referee.guards import protected_paths


def render_program(ref: Referee) -> str:
    """program.md for this session (markdown text)."""
    cfg, s = ref.cfg, ref.state
    b, g = cfg.benchmark, cfg.gates
    rules = [f"`{c}` == 0 on every row" for c in b.correctness_columns]
    if b.correctness:
        rules.append(f"`{b.correctness}` on every row")
    if cfg.correctness.command:
        rules.append(f"`{cfg.correctness.command}` exits 0")
    classes = ", ".join(f"`{k}`" for k in s.best.metrics) or "(known after the baseline)"
    if cfg.profiler.backend == "none":
        keep = "the script metric (profiler backend none)"
    else:
        keep = f"profiler GPU time of kernel(s) matching `{cfg.profiler.kernel}`" if cfg.profiler.kernel else \
            "profiler GPU time of the hottest kernel (script metric where no profiler exists)"
    text = (resources_dir() / "program.md").read_text(encoding="utf-8")
    return Template(text).safe_substitute(
        workspace=s.workspace, branch=s.branch, best_commit=s.best.commit, command=b.command, workdir=b.workdir,
        metric=b.metric, direction="higher" if b.higher_is_better else "lower", csv=b.csv,
        correctness="; ".join(rules), classes=classes,
        protected=", ".join(f"`{p}`" for p in [*protected_paths(ref), "performance.md"]), keep_metric=keep,
        noise_pct=f"{g.noise_pct:g}", confirmations=g.confirmations, max_repairs=g.max_repairs,
        max_rounds=g.max_rounds, confidence=f"{g.confidence * 100:g}",
        max_regressions=g.max_consecutive_regressions, gpu_wait_s=f"{g.gpu_wait_s:g}",
        gpu_poll_s=f"{g.gpu_poll_s:g}")
