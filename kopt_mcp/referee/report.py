"""Text the referee writes for people: performance.md rows and the Stop Summary (program.md form)."""

from __future__ import annotations

from kopt_mcp.ledger import PerfRow, now_iso
from kopt_mcp.session import SessionState


def fmt(v: float | None, unit: str = "") -> str:
    """A number with 4 significant digits (or '-')."""
    return "-" if v is None else f"{v:.4g}{unit}"


def perf_rows(status: str, commit: str, command: str, target: str, kernels: list[str],
              metrics: dict[str, float], gpu_us: float | None, changes: dict[str, float] | None,
              explanation: str, class_gpu_us: dict[str, float] | None = None) -> list[PerfRow]:
    """One performance.md row per config class. The GPU time cell is the class's own GPU time
    where `class_gpu_us` maps it (class key -> median launch of its target launch groups, us:
    `kopt_mcp.rules.keep.class_gpu_times`), else the target kernels' total `gpu_us`."""
    kernel = ", ".join(k[:50] for k in kernels) or "-"
    rows = []
    for key, value in metrics.items():
        change = "-" if changes is None else f"{changes.get(key, 0.0):+.2f}%"
        rows.append(PerfRow(date=now_iso(), commit=commit, status=status, command=command,
                            target=f"{key}" + (" (target)" if key == target else ""), kernel=kernel,
                            metric=fmt(metrics[key]),
                            gpu_time=fmt(class_gpu_us[key] if class_gpu_us and key in class_gpu_us else gpu_us),
                            change=change,
                            explanation=explanation))
    return rows


def stop_summary(state: SessionState, metric: str) -> str:
    """The Stop Summary block: time, reason, BEST_COMMIT, kept improvements (the script-only ones
    counted apart), best metrics, last regressions table."""
    lines = [
        "## Stop Summary", "",
        f"- time: {state.stopped_at or now_iso()}",
        f"- reason: {state.stop_reason}",
        f"- BEST_COMMIT: {state.best.commit}",
        f"- kept improvements: {state.kept}"
        + (f" (script only: {state.kept_script_only})" if state.kept_script_only else ""),
        f"- best {metric} per config class: "
        + (", ".join(f"{k} = {fmt(v)}" for k, v in state.best.metrics.items()) or "-"),
        f"- best profiler GPU time (us): {fmt(state.best.gpu_us)}",
        "",
        "Last regressions:",
        "",
        "| attempt | time | target | change | hypothesis |",
        "|---|---|---|---|---|",
    ]
    for r in state.regressions.window:
        hyp = r.hypothesis.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {r.attempt} | {r.at} | {r.target} | {r.change_pct:+.2f}% | {hyp} |")
    if not state.regressions.window:
        lines.append("| - | - | - | - | - |")
    return "\n".join(lines) + "\n"
