"""Charts of profiler GPU time as PNG bytes (pure: ledger events in, bytes out): the target kernels'
total over attempts, and per config class the target kernels and the whole operation over attempts
(attempts judged by harness unit, views/gpu_classes.py). Units: us (per launch for the total, per
invocation summed over a class's units per class); x = attempt number (0 = baseline). matplotlib is
imported inside the drawing functions (Agg canvas, no pyplot).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kopt_mcp.events import Attempt, Baseline, Commit, as_events
from kopt_mcp.views.charts import REFUSED, _png, refusals, shown_verdict
from kopt_mcp.views.gpu_classes import ClassGpuData, class_gpu_data
from kopt_mcp.views.html_parts import VERDICT_COLORS, num

MAX_PANELS = 12  # config classes drawn per class chart (3 columns beyond 8)


@dataclass
class GpuSeries:
    """GPU time (us) of the target kernels: BEST as steps (x, us: baseline at x = 0, then each commit),
    and each attempt's measured candidate (x, us, verdict as shown: "improved, not committed: <code>"
    where its commit was refused)."""
    best: list[tuple[int, float]] = field(default_factory=list)
    candidates: list[tuple[int, float, str]] = field(default_factory=list)


def gpu_series(events) -> GpuSeries:
    """Extract the GPU time series from ledger events (oldest first); missing values are skipped. BEST
    moves only at a `commit` record, never for a refused one."""
    s, events = GpuSeries(), as_events(events)
    refused = refusals(events)
    for e in events:
        if isinstance(e, Baseline) and (v := num(e.gpu_us)) is not None:
            s.best.append((0, v))
        elif isinstance(e, Commit) and e.attempt is not None and (v := num(e.gpu_us)) is not None:
            s.best.append((e.attempt, v))
        elif isinstance(e, Attempt) and e.gpu is not None and (v := num(e.gpu.gpu_candidate_us)) is not None:
            s.candidates.append((e.attempt, v, shown_verdict(e.verdict, refused.get(e.attempt))))
    return s


def _dots(ax, pts: list[tuple[int, float, str]], marker: str = "o", label: bool = True) -> None:
    """Scatter (x, us, shown verdict) colored by verdict; a refused commit hollow."""
    for shown in dict.fromkeys(v for _, _, v in pts):
        xy = [(x, y) for x, y, v in pts if v == shown]
        kw = ({"facecolors": "white", "edgecolors": REFUSED, "linewidths": 1.8} if ", not committed" in shown else
              {"color": VERDICT_COLORS.get(shown, "#444"), "edgecolors": "white", "linewidths": 0.6})
        ax.scatter(*zip(*xy), s=40, zorder=5, marker=marker, label=shown if label else None, **kw)


def gpu_time_chart(events) -> bytes | None:
    """PNG: BEST_COMMIT's profiler GPU time (us) as a step line over attempts, each attempt's measured
    candidate GPU time as a dot colored by verdict (hollow: improved, commit refused); None where the
    ledger records no GPU time."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    s = gpu_series(events)
    if not s.best and not s.candidates:
        return None
    fig = Figure(figsize=(9, 3.2), layout="constrained")
    ax = fig.add_subplot()
    last = max([x for x, _ in s.best] + [x for x, _, _ in s.candidates] + [1])
    if s.best:
        xs = [x for x, _ in s.best] + [last + 0.5]
        ys = [y for _, y in s.best] + [s.best[-1][1]]
        ax.step(xs, ys, where="post", color="black", lw=1.6, label="BEST_COMMIT (■ baseline, ★ commit)")
        for pts, style in (([b for b in s.best if b[0] == 0], {"marker": "s", "color": "k", "ms": 5}),
                           ([b for b in s.best if b[0] > 0], {"marker": "*", "ms": 13, "mfc": "none", "mec": "k"})):
            if pts:
                ax.plot(*zip(*pts), ls="", **style)
    _dots(ax, s.candidates)
    ax.set_xlim(-0.5, last + 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("attempt number (0 = baseline)")
    ax.set_ylabel("GPU time (us)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=9, frameon=False)
    fig.suptitle("profiler GPU time of the target kernels (us, lower is better)", weight="bold")
    return _png(fig)


def class_gpu_chart(events) -> bytes | None:
    """PNG: one panel per config class (up to 12) of the attempts judged by harness unit: BEST's GPU time
    as measured beside each candidate (black line: target kernels; grey dashed: the whole operation,
    us per invocation summed over the class's units) and the candidate's (dots: target kernels,
    triangles: whole operation), colored by verdict (hollow: improved, commit refused). None where no
    attempt was judged by harness unit."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    d = class_gpu_data(events, refusals(events))
    if not d.classes:
        return None
    keys = d.classes[:MAX_PANELS]
    ncols = 1 if len(keys) <= 3 else 2 if len(keys) <= 8 else 3
    nrows = math.ceil(len(keys) / ncols)
    fig = Figure(figsize=(9 if ncols == 1 else 14 if ncols == 2 else 16, 1.9 + 2.5 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharex=True, squeeze=False).ravel()
    last = max(p.attempt for pts in d.points.values() for p in pts)
    for ax, key in zip(axes, keys):
        _class_panel(ax, d, key)
        ax.set_xlim(-0.5, max(last, 1) + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for i, ax in enumerate(axes):
        ax.set_visible(i < len(keys))
        ax.set_xlabel("attempt number" if len(keys) - ncols <= i < len(keys) else "")
    more = f" (first {MAX_PANELS} of {len(d.classes)} classes)" if len(d.classes) > MAX_PANELS else ""
    fig.suptitle("profiler GPU time per config class (us per invocation, lower is better)" + more,
                 fontsize=12, weight="bold")
    shown = dict.fromkeys(p.verdict for pts in d.points.values() for p in pts)
    handles = [Line2D([], [], color="k", lw=1.4, marker="_", ms=10, label="BEST, target kernels"),
               Line2D([], [], color="grey", lw=1.2, ls="--", marker="_", ms=10, label="BEST, whole operation"),
               Line2D([], [], ls="", marker="o", color="#444", label="candidate, target kernels"),
               Line2D([], [], ls="", marker="^", color="#444", label="candidate, whole operation")]
    handles += [Line2D([], [], ls="", marker="o", mfc="white", mec=REFUSED, mew=1.8, label=v) if ", not committed" in v
                else Line2D([], [], ls="", marker="o", color=VERDICT_COLORS.get(v, "#444"), label=v) for v in shown]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(4, len(handles)), frameon=False, fontsize=9)
    return _png(fig)


def _class_panel(ax, d: ClassGpuData, key: str) -> None:
    pts = d.points[key]
    xs = [p.attempt for p in pts]
    ax.plot(xs, [p.figures.target.best_us for p in pts], color="k", lw=1.4, marker="_", ms=10, zorder=3)
    _dots(ax, [(p.attempt, p.figures.target.candidate_us, p.verdict) for p in pts], label=False)
    ops = [p for p in pts if p.figures.op is not None]
    if ops:
        ax.plot([p.attempt for p in ops], [p.figures.op.best_us for p in ops], color="grey", lw=1.2, ls="--",
                marker="_", ms=10, zorder=3)
        _dots(ax, [(p.attempt, p.figures.op.candidate_us, p.verdict) for p in ops], marker="^", label=False)
    ax.set_title(key, loc="left", fontsize=10)
    ax.set_ylabel("GPU time (us)")
    ax.grid(True, alpha=0.3)
