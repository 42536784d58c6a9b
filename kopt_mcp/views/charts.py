"""Charts of a session's ledger as PNG bytes (pure: ledger events in, bytes out; no I/O, no MCP).

Units: metric values in the benchmark's own unit (the metric column, e.g. us_per_call); % of baseline
= value / baseline x 100; changes in % with + = better whatever the metric's direction; x = attempt
number (0 = baseline). matplotlib is imported inside the drawing functions and draws on an Agg canvas
(headless, no pyplot, no global backend switch). Events are read with `kopt_mcp.events.as_events`
(typed events or raw ledger records): a record that does not fit its model is set aside and a
non-finite number skipped, never raised on.
"""

from __future__ import annotations

import io
import math
import textwrap
from dataclasses import dataclass, field

from kopt_mcp.events import Attempt, Baseline, ClassChange, Commit, CommitRefused, as_events

MEASURED = {"improved": "#2ca02c", "tie": "#1f77b4", "regressed": "#d62728", "divergent": "#ff7f0e"}
NO_MEASUREMENT = {"incorrect": "x", "failed": "X", "rejected": "s", "abandoned": "D", "cancelled": ".", "conflict": "P"}
BETTER, WORSE, WITHIN_NOISE = "#2ca02c", "#d62728", "#9e9e9e"
LEGEND = {BETTER: "better", WORSE: "worse", WITHIN_NOISE: "within noise"}
#: an improved attempt whose commit was refused: a hollow dot of this edge color, never a keep's star
REFUSED = "#a0522d"
MAX_PANELS = 8


def _num(x) -> float | None:
    """`x` as a finite float, or None (bools, strings and NaN are no numbers here)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def _rows(classes: list[ClassChange], name: str) -> list[tuple[ClassChange, float]]:
    """(class, its field `name`) for each class of an attempt whose `name` is a finite number."""
    return [(c, v) for c in classes if (v := _num(getattr(c, name))) is not None]


def refusals(events) -> dict[int, str]:
    """attempt number -> the code of its `commit_refused` record ("refused" where an older record has
    none), for every refused attempt no later `commit` record kept."""
    out: dict[int, str] = {}
    for e in as_events(events):
        if isinstance(e, CommitRefused) and e.attempt is not None:
            out[e.attempt] = e.code or "refused"
        elif isinstance(e, Commit) and e.attempt is not None:
            out.pop(e.attempt, None)
    return out


def shown_verdict(verdict: str, refused: str | None) -> str:
    """An attempt's verdict as the report and the charts show it: "improved, not committed: <code>"
    where its commit was refused (`refused`: the code), else the verdict."""
    return f"{verdict}, not committed: {refused}" if refused else verdict


@dataclass
class Mark:
    """One attempt: number, verdict and the candidate's metric per class (empty: no valid measurement);
    `refused`: the code of its refused commit (an improved attempt that is not a keep), else None."""
    attempt: int
    verdict: str
    values: dict[str, float] = field(default_factory=dict)
    refused: str | None = None

    @property
    def state(self) -> str:
        """The verdict as shown (shown_verdict)."""
        return shown_verdict(self.verdict, self.refused)


@dataclass
class ProgressData:
    """What progress_chart draws. best[class]: BEST_COMMIT's metric as steps (x, value, "baseline" |
    "commit"), x = 0 for the baseline and the attempt number of each commit; marks: every attempt in
    ledger order; last_x: the highest attempt number (0 when none)."""
    classes: list[str] = field(default_factory=list)
    baseline: dict[str, float] = field(default_factory=dict)
    best: dict[str, list[tuple[int, float, str]]] = field(default_factory=dict)
    marks: list[Mark] = field(default_factory=list)
    commits: list[int] = field(default_factory=list)
    last_x: int = 0
    refused: dict[int, str] = field(default_factory=dict)


def progress_data(events) -> ProgressData:
    """Extract the best-metric steps and attempt marks from ledger events (oldest first; typed
    events or raw records). BEST moves only at a `commit` record: an attempt whose commit was refused
    is a mark with `refused` set (its code), never a step."""
    events = as_events(events)
    d = ProgressData(refused=refusals(events))
    for e in events:
        if isinstance(e, Baseline) or (isinstance(e, Commit) and e.attempt is not None):
            kind = e.event
            x = e.attempt if isinstance(e, Commit) else d.last_x
            metrics = {k: v for k, raw in e.metrics.items() if (v := _num(raw)) is not None}
            d.baseline = d.baseline or (metrics if kind == "baseline" else {})
            d.commits += [x] if kind == "commit" else []
            for key, v in metrics.items():
                d.classes += [] if key in d.best else [key]
                d.best.setdefault(key, []).append((x, v, kind))
        elif isinstance(e, Attempt):
            values = {c.key: v for c, v in _rows(e.classes, "candidate")} if e.verdict in MEASURED else {}
            d.marks.append(Mark(e.attempt, e.verdict, values, d.refused.get(e.attempt)))
        if isinstance(e, (Attempt, Commit)) and e.attempt is not None:  # a revert's archive number draws nothing
            d.last_x = max(d.last_x, e.attempt)
    return d


def _png(fig) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _message(title: str, text: str) -> bytes:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 2.6))
    fig.text(0.5, 0.62, title, ha="center", va="center", fontsize=13, weight="bold")
    fig.text(0.5, 0.36, text, ha="center", va="center", fontsize=11, color="#555555", wrap=True)
    return _png(fig)


def progress_chart(events, metric: str = "metric", higher_is_better: bool = False, screen: bool = False) -> bytes:
    """PNG: one panel per config class (up to 8): BEST_COMMIT's metric as a step line (baseline, then
    each commit), every measured attempt's candidate value as a dot colored by verdict (an improved
    attempt whose commit was refused as a hollow dot: not a keep), and attempts without a valid
    measurement as small grey markers on the x axis. Left axis in the metric's unit (log scale when
    values span > 8x), right axis in % of baseline. `screen`: profiler GPU time decided the session's
    verdicts, so the title calls the metric the script metric (screen)."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    d = progress_data(events)
    title = (("script metric (screen): " if screen else "")
             + f"{metric} per config class over attempts ({'higher' if higher_is_better else 'lower'} is better)")
    if not d.classes:
        return _message(title, "no baseline yet: call run_benchmark, then test candidates with save_and_test")
    keys = d.classes[:MAX_PANELS]
    ncols, nrows = (1, len(keys)) if len(keys) <= 3 else (2, math.ceil(len(keys) / 2))
    fig = Figure(figsize=(9 if ncols == 1 else 14, 1.9 + 2.5 * nrows), layout="constrained")
    axes = fig.subplots(nrows, ncols, sharex=True, squeeze=False).ravel()
    for ax, key in zip(axes, keys):
        _class_panel(ax, d, key, metric)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    for i, ax in enumerate(axes):
        ax.set_visible(i < len(keys))
        ax.set_xlabel("attempt number (0 = baseline)" if len(keys) - ncols <= i < len(keys) else "")
    more = f" (first {MAX_PANELS} of {len(d.classes)} classes)" if len(d.classes) > MAX_PANELS else ""
    fig.suptitle(title + more, fontsize=12, weight="bold")
    seen = {m.verdict for m in d.marks if (m.values or m.verdict not in MEASURED) and not m.refused}
    handles = [Line2D([], [], color="k", lw=1.6, marker="s", ms=5, label="BEST_COMMIT (■ baseline)")]
    handles += [Line2D([], [], ls="", marker="*", ms=13, mfc="none", mec="k", label="commit (kept)")] * bool(d.commits)
    handles += [Line2D([], [], ls="", marker="o", color=c, label=f"{v} attempt") for v, c in MEASURED.items()
                if v in seen]
    handles += [Line2D([], [], ls="", marker="o", mfc="white", mec=REFUSED, mew=1.8, label=f"{s} attempt") for s in
                dict.fromkeys(m.state for m in d.marks if m.refused and m.values)]
    handles += [Line2D([], [], ls="", marker=NO_MEASUREMENT.get(v, "."), color="grey", label=f"{v} (not measured)")
                for v in sorted(seen - set(MEASURED))]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(3 * ncols, len(handles)), frameon=False)
    return _png(fig)


def _class_panel(ax, d: ProgressData, key: str, metric: str) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    steps = d.best[key]
    xs = [s[0] for s in steps] + [max(d.last_x, steps[-1][0]) + 0.5]
    ys = [s[1] for s in steps] + [steps[-1][1]]
    ax.step(xs, ys, where="post", color="black", lw=1.6, zorder=2)
    for kind, marker, ms, mfc in (("baseline", "s", 5, "k"), ("commit", "*", 15, "none")):
        pts = [s for s in steps if s[2] == kind]
        ax.plot([s[0] for s in pts], [s[1] for s in pts], ls="", color="k", marker=marker, ms=ms, mfc=mfc, zorder=6)
    values = list(ys)
    for verdict, color in MEASURED.items():
        pts = [(m.attempt, m.values[key]) for m in d.marks if m.verdict == verdict and key in m.values and not m.refused]
        if pts:
            values += [p[1] for p in pts]
            ax.scatter(*zip(*pts), color=color, s=40, zorder=5, edgecolors="white", linewidths=0.6)
    pts = [(m.attempt, m.values[key]) for m in d.marks if m.refused and key in m.values]
    if pts:  # improved, but its commit was refused: hollow, not a keep
        values += [p[1] for p in pts]
        ax.scatter(*zip(*pts), facecolors="white", edgecolors=REFUSED, s=44, linewidths=1.8, zorder=5)
    for m in d.marks:
        if not m.values or m.verdict not in MEASURED:
            ax.scatter([m.attempt], [0.0], transform=ax.get_xaxis_transform(), color="grey", s=22, clip_on=False,
                       marker=NO_MEASUREMENT.get(m.verdict, "."), zorder=5)
    log = min(values) > 0 and max(values) / min(values) > 8
    ax.set_yscale("log" if log else "linear")
    ax.set_xlim(-0.5, max(d.last_x, 1) + 0.5)
    ax.set_title(key, loc="left", fontsize=10)
    ax.set_ylabel(metric)
    ax.grid(True, which="major", alpha=0.3)
    axes, base = [ax], d.baseline.get(key)
    if base and base > 0:  # the secondary axis follows the parent's scale
        axes.append(ax.secondary_yaxis("right", functions=(lambda v, b=base: v / b * 100,
                                                           lambda p, b=base: p * b / 100)))
        axes[1].set_ylabel("% of baseline")
    for a in axes if log else []:  # plain numbers at 1, 2, 5 x 10^k, no 10^k notation
        a.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        a.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        a.yaxis.set_minor_formatter(NullFormatter())
    if not d.marks:
        ax.text(0.5, 0.75, "baseline only: no attempts yet", transform=ax.transAxes, ha="center", color="#555555")


@dataclass
class LastVerdict:
    """The last attempt with a measurement: per class (key, mean change %, change % per round), + = better;
    later: (attempt, verdict) of the attempts logged after it (none of them measured)."""
    attempt: int
    verdict: str
    target: str
    hypothesis: str
    rows: list[tuple[str, float, list[float]]]
    later: list[tuple[int, str]] = field(default_factory=list)


def last_verdict_data(events) -> LastVerdict | None:
    """The last attempt event whose classes carry a mean change, and the attempts logged after it;
    verdicts as shown (shown_verdict: a refused commit reads "improved, not committed: <code>")."""
    events = as_events(events)
    found: LastVerdict | None = None
    refused = refusals(events)
    for e in events:
        if not isinstance(e, Attempt):
            continue
        rows = [(c.key, v, [x for r in c.deltas_pct if (x := _num(r)) is not None])
                for c, v in _rows(e.classes, "mean_pct")]
        verdict = shown_verdict(e.verdict, refused.get(e.attempt))
        if rows:
            found = LastVerdict(e.attempt, verdict, e.target or "global", e.hypothesis, rows)
        elif found is not None:
            found.later.append((e.attempt, verdict))
    return found


def last_verdict_chart(events, noise_pct: float | None = None) -> bytes:
    """PNG: horizontal bars of the last measured attempt's mean change per class in % (+ = better;
    green better, red worse, grey within the noise band), each round's change as a tick, the target
    class outlined and labelled, the noise band (+- noise_pct %) shaded when given."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    lv = last_verdict_data(events)
    if lv is None:
        return _message("last verdict: change per config class",
                        "no measured attempt yet: edit the kernel, then call save_and_test")
    noise = v if (v := _num(noise_pct)) and v > 0 else None
    keys, vals = [r[0] for r in lv.rows], [r[1] for r in lv.rows]
    colors = [WITHIN_NOISE if noise and abs(v) < noise else BETTER if v > 0 else WORSE for v in vals]
    fig = Figure(figsize=(9, 2.4 + 0.5 * len(keys)), layout="constrained")
    ax = fig.add_subplot()
    bars = ax.barh(range(len(keys)), vals, color=colors, height=0.6, zorder=2,
                   edgecolor=["black" if k == lv.target else "none" for k in keys], linewidth=2)
    ax.bar_label(bars, labels=[f"{v:+.2f}%" for v in vals], padding=10, fontsize=9)
    for i, (_k, _v, rounds) in enumerate(lv.rows):
        if len(rounds) > 1:
            ax.scatter(rounds, [i] * len(rounds), marker="|", s=160, color="black", zorder=3)
    handles = [Patch(color=c, label=n) for c, n in LEGEND.items() if c in colors]
    if noise:
        ax.axvspan(-noise, noise, color="grey", alpha=0.18, zorder=1)
        handles.append(Patch(color="grey", alpha=0.18, label=f"noise band ±{noise:g}%"))
    if any(len(r[2]) > 1 for r in lv.rows):
        handles.append(Line2D([], [], ls="", marker="|", ms=12, color="black", label="each measured round"))
    if lv.target in keys:
        handles.append(Patch(facecolor="white", edgecolor="black", linewidth=2, label="target class"))
    ax.axvline(0, color="black", lw=0.8)
    lo, hi = min(vals + [0, -(noise or 0)]), max(vals + [0, noise or 0])
    ax.set_xlim(lo - 0.2 * ((hi - lo) or 1), hi + 0.2 * ((hi - lo) or 1))
    ax.set_yticks(range(len(keys)), labels=[k + ("  (target)" if k == lv.target else "") for k in keys])
    for lab, k in zip(ax.get_yticklabels(), keys):
        lab.set_fontweight("bold" if k == lv.target else "normal")
    ax.invert_yaxis()
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_xlabel("change vs BEST_COMMIT measured in the same lease (%), + = better")
    fig.suptitle(f"last verdict: attempt {lv.attempt} {lv.verdict} (target: {lv.target})", weight="bold")
    note = "\n".join(textwrap.wrap(lv.hypothesis, 80, max_lines=2, placeholder=" …"))
    later = ", ".join(f"#{n} {v}" for n, v in lv.later[-6:])
    note += ("\n" if note and later else "") + (f"later attempts without a valid measurement: {later}" if later else "")
    ax.set_title(note, fontsize=9, style="italic", color="#444444")
    fig.legend(handles=handles, loc="outside lower center", ncols=min(6, len(handles)), fontsize=9, frameon=False)
    return _png(fig)
