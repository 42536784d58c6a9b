"""The session report: one self-contained HTML page a person opens in a browser to watch a run.

`render_report` is pure (ledger events + archived patches in, an HTML string out; events typed or raw
records, read with `kopt_mcp.events.as_events`): inline CSS, charts
inlined as base64 PNG (`data:` URIs), no script, no network. Every string that comes from the ledger,
a patch or performance.md (hypotheses, reasons, diffs: written by the candidate) is escaped
(html.escape; performance.md goes through markdown-it with raw HTML off). `write_report` reads a
session's Store and writes the page atomically; the referee calls it after every verdict.

Units: metric values in the benchmark's own unit (the metric column); GPU time in us (profiler time of
the target kernels, per launch); changes in % with + = better whatever the metric's direction.
"""

from __future__ import annotations

import base64
import html
import io
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kopt_mcp.events import (
    Attempt,
    Baseline,
    ClassChange,
    Commit,
    CommitRefused,
    DeviceRecord,
    GpuKeep,
    Revert,
    SessionGain,
    SessionStarted,
    Stopped,
    as_events,
)
from kopt_mcp.ledger import atomic_write, now_iso
from kopt_mcp.views import charts

log = logging.getLogger(__name__)
_WRITE = threading.Lock()  # one writer of a report file at a time (the referee's hook, a resource read)

REPORT_NAME = "report.html"
MAX_PATCH_CHARS = 200_000  # per attempt; longer diffs are cut with a note naming the archived file
VERDICT_COLORS = {"improved": "#2ca02c", "tie": "#1f77b4", "regressed": "#d62728", "divergent": "#ff7f0e",
                  "incorrect": "#8c564b", "failed": "#7f7f7f", "rejected": "#9467bd", "abandoned": "#555555",
                  "interrupted": "#bcbd22", "cancelled": "#bbbbbb", "conflict": "#e377c2", "reverted": "#6c757d"}

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1f;background:#f6f7f9}
main{max-width:1280px;margin:0 auto;padding:18px 24px 48px}
h1{font-size:22px;margin:6px 0 2px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#555}.cards{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.card{background:#fff;border:1px solid #e1e3e8;border-radius:8px;padding:8px 14px;min-width:110px}
.card b{display:block;font-size:20px}.card span{color:#666;font-size:12px}
table{border-collapse:collapse;background:#fff;width:100%;font-size:13px}
th,td{border:1px solid #e1e3e8;padding:4px 7px;text-align:left;vertical-align:top}
th{background:#eef0f4;font-weight:600}td.t{white-space:nowrap;font-size:12px}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.badge{display:inline-block;color:#fff;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600}
.better{color:#1a7f37}.worse{color:#c62828}.muted{color:#777}
figure{background:#fff;border:1px solid #e1e3e8;border-radius:8px;margin:10px 0;padding:8px;text-align:center}
figure img{max-width:100%;height:auto}figcaption{color:#555;font-size:12px}
details>summary{cursor:pointer;color:#0b57d0}pre{background:#0f1115;color:#e6e6e6;padding:8px;overflow:auto;
max-height:480px;font:12px/1.35 ui-monospace,SFMono-Regular,Menlo,monospace;white-space:pre}
pre .add{color:#7ee787}pre .del{color:#ff7b72}pre .hunk{color:#79c0ff}
.md table{width:auto}.md code{font-size:12px}.stop{background:#fff4e5;border:1px solid #f0c36d;border-radius:8px;padding:4px 14px}
"""


def _e(x) -> str:
    """`x` as text, HTML-escaped (quotes too)."""
    return html.escape("" if x is None else str(x), quote=True)


def _num(x) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def _fmt(x, unit: str = "") -> str:
    v = _num(x)
    return "-" if v is None else f"{v:.4g}{unit}"


def _pct(x) -> str:
    """A change in % (+ = better) as a colored cell body."""
    v = _num(x)
    if v is None:
        return '<span class="muted">-</span>'
    return f'<span class="{"better" if v > 0 else "worse" if v < 0 else ""}">{v:+.2f}%</span>'


def _time(at) -> str:
    """An ISO time from the ledger as 'YYYY-MM-DD HH:MM:SS' (UTC); other text as it is."""
    return str(at or "").replace("T", " ").replace("+00:00", "")


def _device(device: DeviceRecord | str | None) -> tuple[str, str]:
    """(name, vendor) of a baseline's device: a DeviceInfo dump, or an id such as "nvidia:0:GPU-..."."""
    if isinstance(device, DeviceRecord):
        return device.name or "?", device.vendor or "?"
    return (device, device.split(":", 1)[0]) if device else ("?", "?")


def _badge(verdict: str) -> str:
    return f'<span class="badge" style="background:{VERDICT_COLORS.get(verdict, "#444")}">{_e(verdict)}</span>'


def _img(png: bytes, alt: str, ident: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img id="{ident}" alt="{_e(alt)}" src="data:image/png;base64,{data}">'


@dataclass
class GpuSeries:
    """GPU time (us) of the target kernels: BEST as steps (x, us: baseline at x = 0, then each commit),
    and each attempt's measured candidate (x, us, verdict)."""
    best: list[tuple[int, float]] = field(default_factory=list)
    candidates: list[tuple[int, float, str]] = field(default_factory=list)


def gpu_series(events) -> GpuSeries:
    """Extract the GPU time series from ledger events (oldest first); missing values are skipped."""
    s = GpuSeries()
    for e in as_events(events):
        if isinstance(e, Baseline) and (v := _num(e.gpu_us)) is not None:
            s.best.append((0, v))
        elif isinstance(e, Commit) and e.attempt is not None and (v := _num(e.gpu_us)) is not None:
            s.best.append((e.attempt, v))
        elif isinstance(e, Attempt) and e.gpu is not None and (v := _num(e.gpu.gpu_candidate_us)) is not None:
            s.candidates.append((e.attempt, v, e.verdict))
    return s


def gpu_time_chart(events) -> bytes | None:
    """PNG: BEST_COMMIT's profiler GPU time (us) as a step line over attempts, each attempt's measured
    candidate GPU time as a dot colored by verdict; None where the ledger records no GPU time."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    s = gpu_series(events)
    title = "profiler GPU time of the target kernels (us, lower is better)"
    if not s.best and not s.candidates:
        return None
    fig = Figure(figsize=(9, 3.2), layout="constrained")
    ax = fig.add_subplot()
    last = max([x for x, _ in s.best] + [x for x, _, _ in s.candidates] + [1])
    if s.best:
        xs = [x for x, _ in s.best] + [last + 0.5]
        ys = [y for _, y in s.best] + [s.best[-1][1]]
        ax.step(xs, ys, where="post", color="black", lw=1.6, label="BEST_COMMIT (■ baseline, ★ commit)")
        for pts, style in (([b for b in s.best if b[0] == 0], dict(marker="s", color="k", ms=5)),
                           ([b for b in s.best if b[0] > 0], dict(marker="*", ms=13, mfc="none", mec="k"))):
            if pts:
                ax.plot(*zip(*pts), ls="", **style)
    for verdict in dict.fromkeys(v for _, _, v in s.candidates):
        pts = [(x, y) for x, y, v in s.candidates if v == verdict]
        ax.scatter(*zip(*pts), s=40, zorder=5, color=VERDICT_COLORS.get(verdict, "#444"), label=verdict,
                   edgecolors="white", linewidths=0.6)
    ax.set_xlim(-0.5, last + 0.5)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("attempt number (0 = baseline)")
    ax.set_ylabel("GPU time (us)")
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=9, frameon=False)
    fig.suptitle(title, weight="bold")
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    return buf.getvalue()


def _split_performance(text: str | None) -> tuple[str, str]:
    """(performance.md without the Stop Summary, the Stop Summary block or '')."""
    if not text:
        return "", ""
    i = text.find("## Stop Summary")
    return (text, "") if i < 0 else (text[:i], text[i:])


def _markdown(text: str) -> str:
    """Markdown -> HTML with raw HTML disabled (it is escaped), tables on; markdown-it blocks
    javascript:/data: links."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table").render(text)


def _diff_html(patch: str) -> str:
    out = []
    for line in patch.splitlines():
        cls = ("hunk" if line.startswith("@@") else "add" if line.startswith("+") and not line.startswith("+++")
               else "del" if line.startswith("-") and not line.startswith("---") else "")
        out.append(f'<span class="{cls}">{_e(line)}</span>' if cls else _e(line))
    return "\n".join(out)


def archived_number(event: Attempt | Revert) -> int | None:
    """The attempt number of an attempt or revert event: its `attempt` field, or for a revert of an
    older ledger the number of its archived patch (`attempts/NNNN-reverted.patch`); None when it
    has neither."""
    if event.attempt is not None:
        return event.attempt
    name = Path(getattr(event, "archived", None) or "").name
    return int(name[:4]) if len(name) > 5 and name[:4].isdigit() and name[4] == "-" else None


@dataclass(frozen=True)
class Row:
    """One row of the attempts table: an attempt's verdict, or a revert_to_best that archived a diff
    (verdict `reverted`). Fields as in `events.Attempt`."""
    attempt: int
    at: str
    verdict: str
    target: str
    hypothesis: str
    reason: str
    classes: list[ClassChange] = field(default_factory=list)
    gpu: GpuKeep | None = None
    changed: list[str] = field(default_factory=list)
    patch: str | None = None


def _rows(events: list) -> list[Row]:
    """The attempts table's rows, oldest first: every `attempt` event, and every revert_to_best that
    archived a diff (verdict `reverted`, its reason the caller's)."""
    rows = []
    for e in events:
        if isinstance(e, Attempt):
            rows.append(Row(e.attempt, e.at, e.verdict, e.target or "global", e.hypothesis, e.reason, e.classes,
                            e.gpu, e.changed, e.patch))
        elif isinstance(e, Revert) and (n := archived_number(e)) is not None:
            rows.append(Row(n, e.at, "reverted", "-", "(revert_to_best: the working diff was archived, the tree reset)",
                            e.reason or "no reason given", changed=e.changed, patch=e.archived))
    return rows


def _attempt_row(e: Row, patch: str | None) -> str:
    n, verdict = e.attempt, e.verdict
    deltas = "".join(f"<div>{_e(c.key)}: {_pct(c.mean_pct)}</div>" for c in e.classes) \
        or '<span class="muted">not measured</span>'
    gpu = e.gpu or GpuKeep()
    gpu_cell = (f"{_fmt(gpu.gpu_best_us)} → {_fmt(gpu.gpu_candidate_us)} us<br>{_pct(gpu.gpu_delta_pct)}"
                if _num(gpu.gpu_candidate_us) is not None else '<span class="muted">-</span>')
    changed = ", ".join(e.changed)
    if patch is None:
        diff = '<span class="muted">no archived patch</span>'
    else:
        lines = patch.count("\n") + (0 if patch.endswith("\n") or not patch else 1)
        cut = len(patch) > MAX_PATCH_CHARS
        body = _diff_html(patch[:MAX_PATCH_CHARS]) + (
            f"\n… cut at {MAX_PATCH_CHARS} characters of {len(patch)}: see {_e(e.patch)}" if cut else "")
        diff = (f"<details><summary>diff of attempt {_e(n)} ({lines} lines, {_e(changed) or 'no files'})</summary>"
                f"<pre>{body}</pre></details>")
    return (f'<tr class="attempt" data-attempt="{_e(n)}" data-verdict="{_e(verdict)}">'
            f'<td class="num">{_e(n)}</td><td class="t">{_e(_time(e.at))}</td><td>{_badge(verdict)}</td>'
            f'<td>{_e(e.target)}</td><td>{_e(e.hypothesis)}</td>'
            f'<td>{_e(e.reason)}</td><td class="num">{deltas}</td><td class="num">{gpu_cell}</td>'
            f'<td>{_e(changed)}</td></tr><tr class="diff-row"><td></td><td colspan="8">{diff}</td></tr>')


def render_report(events: list[dict], patches: Mapping[int, str], *, metric: str = "metric",
                  higher_is_better: bool = False, noise_pct: float | None = None,
                  performance_md: str | None = None, title: str = "kopt-mcp session report",
                  generated_at: str | None = None) -> str:
    """The report page as one HTML string (UTF-8 text, no external resources, no script).

    events: the session's ledger events, oldest first, typed or raw (a record that does not fit its
    model is set aside);
    patches: attempt number -> archived diff text; metric / higher_is_better: the benchmark's metric
    column and direction; noise_pct: the noise threshold (%) shaded in the last-verdict chart;
    performance_md: the text of performance.md (its Stop Summary is shown in its own section).
    Sections: the session's measured gain as the headline (the latest `session_gain` record, when one was
    measured), summary cards, Stop Summary (at the top once stopped), BEST_COMMIT per config class vs
    the baseline, charts (metric per class over attempts, GPU time over attempts, last verdict), every
    attempt newest first (verdict, target, hypothesis, reason, per-class deltas, GPU time, its diff in
    a collapsible <details>), kept commits, performance.md.
    """
    r = _Session(events, metric, higher_is_better, noise_pct, performance_md)
    head = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width,initial-scale=1">',
            "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "img-src data:; style-src 'unsafe-inline'\">",
            f"<title>{_e(title)}</title><style>{CSS}</style></head><body><main>",
            f"<h1>{_e(title)}</h1>", r.subtitle(generated_at or now_iso())]
    stop = r.stop_section()
    body = [r.gain_section(), r.summary(), *([stop] if r.stopped else []), r.best_section(), r.charts_section(),
            r.attempts_section(patches), r.commits_section(), *([] if r.stopped else [stop]),
            r.performance_section()]
    return "\n".join(head + body + ["</main></body></html>\n"])


class _Session:
    """The ledger events sorted into what the report's sections need (see render_report)."""

    def __init__(self, events, metric: str, higher_is_better: bool, noise_pct, performance_md: str | None):
        self.events = as_events(events)
        kinds = lambda k: [e for e in self.events if isinstance(e, k)]  # noqa: E731
        self.rows = _rows(self.events)
        self.attempts = [r for r in self.rows if r.verdict != "reverted"]
        self.commits: list[Commit] = kinds(Commit)
        self.refused: list[CommitRefused] = kinds(CommitRefused)
        self.started: SessionStarted | None = next(iter(kinds(SessionStarted)), None)
        self.baseline: Baseline | None = next(iter(kinds(Baseline)), None)
        self.stop: Stopped | None = (kinds(Stopped) or [None])[-1]
        self.gain: SessionGain | None = (kinds(SessionGain) or [None])[-1]
        self.metric, self.higher_is_better, self.noise_pct = metric, higher_is_better, noise_pct
        self.perf_body, self.stop_md = _split_performance(performance_md)
        self.stopped = self.stop is not None or bool(self.stop_md)

    def subtitle(self, generated_at: str) -> str:
        way = "higher" if self.higher_is_better else "lower"
        noise = f" · noise threshold {_fmt(self.noise_pct)}%" if _num(self.noise_pct) is not None else ""
        tag, branch = (self.started.tag, self.started.branch) if self.started else ("?", "?")
        return (f"<div class=\"sub\">session <b>{_e(tag)}</b> · branch "
                f"<code>{_e(branch)}</code> · metric <code>{_e(self.metric)}</code> "
                f"({way} is better){noise} · generated {_e(_time(generated_at))} UTC</div>")

    def gain_section(self) -> str:
        """The headline: the latest measured session gain (referee.gain) with its per-class bounds."""
        g = self.gain
        if g is None:
            return ('<p id="session-gain" class="muted">Session gain: not measured yet (the tool '
                    'measure_session_gain, or <code>kopt-mcp compare</code>).</p>')
        best = self.commits[-1].commit if self.commits else None
        moved = (f" BEST_COMMIT moved since, to <code>{_e(best[:12])}</code>." if best and best != g.head_commit else "")
        rows = "".join(f'<tr><td>{_e(c.key)}</td><td class="num">{_fmt(c.best)}</td><td class="num">{_fmt(c.candidate)}'
                       f'</td><td class="num">{_pct(c.mean_pct)}</td></tr>' for c in g.classes)
        return (f'<h2 id="session-gain">Session gain (measured {_e(_time(g.at))} UTC)</h2><p class="headline"><b>'
                f"{_pct(g.target_pct)} ({_fmt(g.ratio_x)}x)</b> {_e(g.headline)}.{moved}</p>"
                f'<table id="gain-table"><thead><tr><th>config class</th><th>base</th><th>head</th><th>change</th>'
                f"</tr></thead><tbody>{rows}</tbody></table>")

    def summary(self) -> str:
        counts = Counter(r.verdict for r in self.rows)
        state = (f"stopped: {(self.stop.reason if self.stop else '') or 'see the Stop Summary'}" if self.stopped
                 else "running" if self.baseline else "no baseline yet")
        cards = [(len(self.attempts), "attempts"), (len(self.commits), "kept commits")]
        cards += [(counts[v], v) for v in [*VERDICT_COLORS, *sorted(set(counts) - set(VERDICT_COLORS))] if counts.get(v)]
        script_only = sum(c.code == "script_only" for c in self.commits)  # decided by the script metric alone
        apart = (f'<div class="card" id="script-only-keeps"><b>{script_only}</b><span>of the kept commits script '
                 "only (no profiler measured them)</span></div>") if script_only else ""
        return ('<div class="cards" id="summary">' + "".join(
            f'<div class="card"><b>{_e(v)}</b><span>{_e(k)}</span></div>' for v, k in cards) + apart
            + f'<div class="card"><b style="font-size:14px">{_e(state)}</b><span>session</span></div></div>')

    def best_section(self) -> str:
        p = ['<h2 id="best">BEST_COMMIT per config class</h2>']
        if self.baseline:
            b = self.baseline
            name, vendor = _device(b.device)
            p.append(f"<p id=\"baseline\">Baseline: commit <code>{_e(b.best_commit[:12])}</code> "
                     f"measured {_e(_time(b.at))} on {_e(name)} ({_e(vendor)}); "
                     f"profiler GPU time {_fmt(b.gpu_us, ' us')}.</p>")
        else:
            p.append('<p id="baseline" class="muted">No baseline yet: run_benchmark records it.</p>')
        m = _e(self.metric)
        p.append(f'<table id="best-table"><thead><tr><th>config class</th><th>baseline ({m})</th>'
                 f"<th>BEST ({m})</th><th>% of baseline</th><th>set by</th></tr></thead><tbody>")
        data = charts.progress_data(self.events)
        for key in data.classes:
            base, (x, best, kind) = data.baseline.get(key), data.best[key][-1]
            pct = f"{best / base * 100:.1f}%" if base else "-"
            by = "baseline" if kind == "baseline" else f"commit of attempt {x}"
            p.append(f'<tr><td>{_e(key)}</td><td class="num">{_fmt(base)}</td><td class="num">{_fmt(best)}</td>'
                     f'<td class="num">{pct}</td><td>{by}</td></tr>')
        if not data.classes:
            p.append('<tr><td colspan="5" class="muted">no measurement yet</td></tr>')
        return "".join(p) + "</tbody></table>"

    def charts_section(self) -> str:
        p = ['<h2 id="charts">Charts</h2>']
        progress = f"{self.metric} per config class over attempts: BEST_COMMIT as a step line, each measured attempt as a dot"
        last = "the last measured attempt: change per config class (%, + = better), noise band shaded"
        gpu = gpu_time_chart(self.events)
        figures = [("chart-progress", charts.progress_chart(self.events, self.metric, self.higher_is_better), progress)]
        if gpu is not None:
            figures.append(("chart-gpu", gpu, "profiler GPU time (us) of the target kernels over attempts"))
        figures.append(("chart-last-verdict", charts.last_verdict_chart(self.events, self.noise_pct), last))
        for ident, png, caption in figures:
            p.append(f"<figure>{_img(png, caption, ident)}<figcaption>{_e(caption)}</figcaption></figure>")
        if gpu is None:
            p.append('<p class="muted" id="chart-gpu-note">No profiler GPU time was recorded in this session '
                     "(no profiler on this device: the script metric decided every verdict).</p>")
        return "".join(p)

    def attempts_section(self, patches: Mapping[int, str]) -> str:
        p = [f'<h2 id="attempts">Attempts ({len(self.attempts)}, newest first; reverts included)</h2>'
             '<table id="attempts-table">'
             "<thead><tr><th>#</th><th>time (UTC)</th><th>verdict</th><th>target</th><th>hypothesis</th><th>reason</th>"
             "<th>change per class (+ = better)</th><th>GPU time</th><th>changed</th></tr></thead><tbody>"]
        for e in reversed(self.rows):
            p.append(_attempt_row(e, patches.get(e.attempt)))
        if not self.rows:
            p.append('<tr><td colspan="9" class="muted">no attempt yet</td></tr>')
        return "".join(p) + "</tbody></table>"

    def commits_section(self) -> str:
        p = ['<h2 id="commits">Kept commits</h2><table id="commits-table"><thead><tr><th>attempt</th>'
             f"<th>time (UTC)</th><th>commit</th><th>previous</th><th>{_e(self.metric)} per class</th>"
             "<th>GPU time (us)</th></tr></thead><tbody>"]
        for c in self.commits:
            p.append(f'<tr><td class="num">{_e(c.attempt)}</td><td class="t">{_e(_time(c.at))}</td>'
                     f"<td><code>{_e(c.commit[:12])}</code>{' (script only)' if c.code == 'script_only' else ''}</td>"
                     f"<td><code>{_e(c.previous[:12])}</code></td>"
                     f"<td>{'<br>'.join(f'{_e(k)} = {_fmt(v)}' for k, v in c.metrics.items())}</td>"
                     f'<td class="num">{_fmt(c.gpu_us)}</td></tr>')
        for r in self.refused:
            p.append(f'<tr><td class="num">{_e(r.attempt)}</td><td class="t">{_e(_time(r.at))}</td>'
                     f'<td colspan="4" class="worse">commit refused: {_e(r.reason)}</td></tr>')
        if not self.commits and not self.refused:
            p.append('<tr><td colspan="6" class="muted">none yet</td></tr>')
        return "".join(p) + "</tbody></table>"

    def stop_section(self) -> str:
        head = '<h2 id="stop-summary">Stop Summary</h2>'
        if self.stop_md:
            return head + f'<div class="stop md">{_markdown(self.stop_md.replace("## Stop Summary", "", 1))}</div>'
        if self.stop:
            s = self.stop
            return head + (f'<div class="stop"><p>stopped {_e(_time(s.at))}: {_e(s.reason)}; '
                           f'BEST_COMMIT <code>{_e(s.best_commit)}</code></p></div>')
        return head + '<p class="muted">The session has not stopped.</p>'

    def performance_section(self) -> str:
        head = '<h2 id="performance">performance.md</h2>'
        if not self.perf_body.strip():
            return head + '<p class="muted">(no performance.md yet)</p>'
        return head + (f'<details><summary>baseline and kept rows</summary><div class="md">'
                       f"{_markdown(self.perf_body)}</div></details>")


def read_patches(store, events: list) -> dict[int, str]:
    """attempt number -> archived patch text, for every attempt in `events` (typed or raw) that has
    one in `store`."""
    out: dict[int, str] = {}
    for e in _rows(as_events(events)):
        n = e.attempt
        if n not in out:
            path = store.find_patch(n)
            if path is not None:
                try:
                    out[n] = Path(path).read_text(encoding="utf-8", errors="replace")
                except OSError:
                    continue
    return out


def _ledger(store, tries: int = 3) -> list[dict]:
    """store.ledger(), read again (after 50 ms) if it caught a line being appended (ValueError)."""
    for i in range(tries):
        try:
            return store.ledger()
        except ValueError:
            if i == tries - 1:
                raise
            time.sleep(0.05)
    return []


def write_report(store, *, metric: str = "metric", higher_is_better: bool = False,
                 noise_pct: float | None = None, performance_md: Path | None = None,
                 out: Path | None = None, strict: bool = False) -> Path | None:
    """Render the session's report and write it atomically; returns its path.

    store: the session's `kopt_mcp.ledger.Store` (uses `ledger()`, `find_patch(n)`, `root`);
    performance_md: path of the workspace's performance.md (absent file: no section);
    out: where to write (default `<store.root>/report.html`). The referee calls this after every
    verdict, commit, revert and stop. strict=False (the hook's default): an error is logged and None
    returned, so a report never breaks a verdict; strict=True raises it (the CLI).
    """
    try:
        events = as_events(_ledger(store))
        perf = performance_md.read_text(encoding="utf-8") if performance_md and performance_md.exists() else None
        page = render_report(events, read_patches(store, events), metric=metric, higher_is_better=higher_is_better,
                             noise_pct=noise_pct, performance_md=perf)
        path = Path(out) if out is not None else Path(store.root) / REPORT_NAME
        with _WRITE:
            atomic_write(path, page)
        return path
    except Exception:
        if strict:
            raise
        log.exception("kopt-mcp: writing the HTML report failed (the session goes on)")
        return None


def write_session_report(ref, strict: bool = False) -> Path | None:
    """write_report for a Referee `ref` (its store, frozen config and workspace performance.md): the
    hook the referee calls after every verdict, commit, revert and stop. Same errors as write_report."""
    b, g = ref.cfg.benchmark, ref.cfg.gates
    return write_report(ref.store, metric=b.metric, higher_is_better=b.higher_is_better, noise_pct=g.noise_pct,
                        performance_md=ref.workspace_path / "performance.md", strict=strict)
