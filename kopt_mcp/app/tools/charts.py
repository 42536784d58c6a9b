"""Charts of the session as MCP surface: the read-only tool plot_progress (image + summary) and the
resources kopt://charts/progress.png and kopt://charts/last_verdict.png (image/png blobs).

Units as in kopt_mcp.views.charts: metric values in the benchmark's own unit (named by `metric`), % of
baseline = BEST / baseline x 100, changes in % with + = better. Rendering runs in a worker thread,
one chart at a time (matplotlib is not guaranteed thread-safe), and reads the ledger without the
session lock, so a chart can be drawn while a measurement runs.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from typing import Annotated

import anyio.to_thread
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel, Field

from kopt_mcp.app.tools._adapter import READ_ONLY, referee, tool
from kopt_mcp.app.tools.bounds import MAX_CLASSES
from kopt_mcp.referee import Referee
from kopt_mcp.views import charts
from kopt_mcp.views.gpu_classes import gpu_decided

PROGRESS_URI = "kopt://charts/progress.png"
LAST_VERDICT_URI = "kopt://charts/last_verdict.png"
_RENDER = threading.Lock()


class ClassProgress(BaseModel):
    """One config class: baseline and BEST_COMMIT metric (benchmark unit), BEST as % of baseline."""

    key: str
    baseline: float | None
    best: float
    pct_of_baseline: float | None


class ProgressPlot(BaseModel):
    """plot_progress: the numbers behind the progress chart (the chart itself is the image content)."""

    metric: str
    higher_is_better: bool
    attempts: int
    commits: int
    verdicts: dict[str, int]
    classes: list[ClassProgress]
    summary: str
    chart_resource: str = PROGRESS_URI
    classes_omitted: int = Field(0, description="config classes left out of `classes` and the summary to keep the "
                                 "result small (the first ones of the table are shown; all: kopt://report.html)")


def ledger_events(ref: Referee) -> list[dict]:
    """The session's ledger events, oldest first; a line that is not JSON (half-written) is skipped."""
    p = ref.books.store.ledger_path
    events = []
    for line in (p.read_text(encoding="utf-8").splitlines() if p.exists() else []):
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def progress_plot(events: list[dict], metric: str, higher_is_better: bool) -> ProgressPlot:
    """Counts per verdict, commits and per-class baseline -> BEST, with a few lines of text."""
    d = charts.progress_data(events)
    counts = dict(Counter(m.state for m in d.marks))  # a refused commit: "improved, not committed: <code>"
    rows = []
    for key in d.classes:
        base, best = d.baseline.get(key), d.best[key][-1][1]
        rows.append(ClassProgress(key=key, baseline=base, best=best,
                                  pct_of_baseline=round(best / base * 100, 2) if base else None))
    way = "higher" if higher_is_better else "lower"
    head = (f"{metric} ({way} is better): {len(d.marks)} attempt(s)"
            + (": " + ", ".join(f"{k} {v}" for k, v in counts.items()) if counts else "")
            + f"; {len(d.commits)} commit(s).")
    omitted, rows = max(0, len(rows) - MAX_CLASSES), rows[:MAX_CLASSES]
    lines = [head] + [
        f"{r.key}: baseline {r.baseline:.4g} -> BEST {r.best:.4g} {metric} ({r.pct_of_baseline:g}% of baseline)"
        if r.pct_of_baseline is not None else f"{r.key}: BEST {r.best:.4g} {metric}" for r in rows]
    if omitted:
        lines.append(f"... {omitted} more config classes: kopt://report.html")
    if not rows:
        lines.append("No baseline yet: call run_benchmark.")
    return ProgressPlot(metric=metric, higher_is_better=higher_is_better, attempts=len(d.marks),
                        commits=len(d.commits), verdicts=counts, classes=rows, summary="\n".join(lines),
                        classes_omitted=omitted)


def progress_png(ref: Referee, events: list[dict] | None = None) -> bytes:
    """PNG of the progress chart of `ref`'s session (see kopt_mcp.views.charts.progress_chart)."""
    b = ref.what.cfg.benchmark
    with _RENDER:
        events = ledger_events(ref) if events is None else events
        return charts.progress_chart(events, b.metric, b.higher_is_better, gpu_decided(events))


def last_verdict_png(ref: Referee) -> bytes:
    """PNG of the last measured attempt's per-class change, noise band from the frozen config."""
    with _RENDER:
        return charts.last_verdict_chart(ledger_events(ref), ref.what.cfg.gates.noise_pct)


def _plot(ref: Referee) -> CallToolResult:
    b = ref.what.cfg.benchmark
    events = ledger_events(ref)
    plot = progress_plot(events, b.metric, b.higher_is_better)
    image = Image(data=progress_png(ref, events), format="png").to_image_content()
    return CallToolResult(content=[image, TextContent(type="text", text=plot.summary)],
                          structured_content=plot.model_dump(mode="json"))


def register(tools: list[Tool]) -> None:
    @tool(tools, "Plot the optimization progress", **READ_ONLY)
    async def plot_progress(ctx: Context) -> Annotated[CallToolResult, ProgressPlot]:
        """A PNG chart of the session: BEST_COMMIT's metric per config class over the attempts, every
        attempt colored by verdict. Returns the image, a short summary and per-class baseline -> BEST.
        Also the resources kopt://charts/progress.png and last_verdict.png.
        """
        return await anyio.to_thread.run_sync(_plot, referee(ctx))


def register_resources(mcp: MCPServer, ref: Referee) -> None:
    """Register the two chart resources of `ref`'s session (image/png, served as base64 blobs)."""

    @mcp.resource(PROGRESS_URI, name="progress.png", mime_type="image/png",
                  description="Chart: BEST metric per config class over attempts, attempts colored by verdict.")
    def progress_chart() -> bytes:
        return progress_png(ref)

    @mcp.resource(LAST_VERDICT_URI, name="last_verdict.png", mime_type="image/png",
                  description="Chart: the last measured attempt's change per config class in % (+ = better), "
                  "target class marked, noise band shaded.")
    def last_verdict_chart() -> bytes:
        return last_verdict_png(ref)
