"""The report's session sections: the measured session gain, summary cards, BEST_COMMIT per config
class, charts, kept and refused commits, the Stop Summary and performance.md (see
report_html.render_report for the page; the attempt sections are in report_attempts.py).

Where profiler GPU time per harness unit decided the session's verdicts, the GPU charts (per config
class: target kernels and whole operation) come first and the script metric is titled "script metric
(screen)"; where the script metric decided (CPU sessions, no units) it is the main one, as before.
"""

from __future__ import annotations

from collections import Counter

from kopt_mcp.events import Baseline, Commit, CommitRefused, SessionGain, SessionStarted, Stopped, as_events
from kopt_mcp.views import charts
from kopt_mcp.views.gpu_charts import class_gpu_chart, gpu_time_chart
from kopt_mcp.views.gpu_classes import gpu_decided
from kopt_mcp.views.html_parts import (
    VERDICT_COLORS,
    device,
    esc,
    figure,
    fmt,
    markdown,
    num,
    pct,
    split_performance,
    utc,
)
from kopt_mcp.views.report_attempts import rows

#: the summary card of improved attempts whose commit was refused (not keeps)
NOT_COMMITTED = "improved, not committed"


class SessionView:
    """The ledger events sorted into what the report's sections need (see render_report)."""

    def __init__(self, events, metric: str, higher_is_better: bool, noise_pct, performance_md: str | None):
        self.events = as_events(events)
        kinds = lambda k: [e for e in self.events if isinstance(e, k)]
        self.rows = rows(self.events)
        self.attempts = [r for r in self.rows if r.verdict != "reverted"]
        self.commits: list[Commit] = kinds(Commit)
        self.refused: list[CommitRefused] = kinds(CommitRefused)
        self.started: SessionStarted | None = next(iter(kinds(SessionStarted)), None)
        self.baseline: Baseline | None = next(iter(kinds(Baseline)), None)
        self.stop: Stopped | None = (kinds(Stopped) or [None])[-1]
        self.gain: SessionGain | None = (kinds(SessionGain) or [None])[-1]
        self.metric, self.higher_is_better, self.noise_pct = metric, higher_is_better, noise_pct
        self.perf_body, self.stop_md = split_performance(performance_md)
        self.stopped = self.stop is not None or bool(self.stop_md)
        self.gpu_decided = gpu_decided(self.events)

    def subtitle(self, generated_at: str) -> str:
        way = "higher" if self.higher_is_better else "lower"
        noise = f" · noise threshold {fmt(self.noise_pct)}%" if num(self.noise_pct) is not None else ""
        tag, branch = (self.started.tag, self.started.branch) if self.started else ("?", "?")
        decided = " · verdicts decided by profiler GPU time per config class" if self.gpu_decided else ""
        return (f"<div class=\"sub\">session <b>{esc(tag)}</b> · branch "
                f"<code>{esc(branch)}</code> · metric <code>{esc(self.metric)}</code> "
                f"({way} is better){noise}{decided} · generated {esc(utc(generated_at))} UTC</div>")

    def gain_section(self) -> str:
        """The headline: the latest measured session gain (referee.gain) with its per-class bounds."""
        g = self.gain
        if g is None:
            return ('<p id="session-gain" class="muted">Session gain: not measured yet (the tool '
                    'measure_session_gain, or <code>kopt-mcp compare</code>).</p>')
        best = self.commits[-1].commit if self.commits else None
        moved = (f" BEST_COMMIT moved since, to <code>{esc(best[:12])}</code>." if best and best != g.head_commit else "")
        body = "".join(f'<tr><td>{esc(c.key)}</td><td class="num">{fmt(c.best)}</td><td class="num">{fmt(c.candidate)}'
                       f'</td><td class="num">{pct(c.mean_pct)}</td></tr>' for c in g.classes)
        return (f'<h2 id="session-gain">Session gain (measured {esc(utc(g.at))} UTC)</h2><p class="headline"><b>'
                f"{pct(g.target_pct)} ({fmt(g.ratio_x)}x)</b> {esc(g.headline)}.{moved}</p>"
                f'<table id="gain-table"><thead><tr><th>config class</th><th>base</th><th>head</th><th>change</th>'
                f"</tr></thead><tbody>{body}</tbody></table>")

    def summary(self) -> str:
        """Cards: attempts, kept commits, one per verdict as shown (a refused commit's attempt counts as
        'improved, not committed', never as improved), the session's state."""
        counts = Counter(NOT_COMMITTED if r.refused else r.verdict for r in self.rows)
        state = (f"stopped: {(self.stop.reason if self.stop else '') or 'see the Stop Summary'}" if self.stopped
                 else "running" if self.baseline else "no baseline yet")
        cards = [(len(self.attempts), "attempts"), (len(self.commits), "kept commits")]
        order = [*VERDICT_COLORS, NOT_COMMITTED]
        cards += [(counts[v], v) for v in [*order, *sorted(set(counts) - set(order))] if counts.get(v)]
        script_only = sum(c.code == "script_only" for c in self.commits)  # decided by the script metric alone
        apart = (f'<div class="card" id="script-only-keeps"><b>{script_only}</b><span>of the kept commits script '
                 "only (no profiler measured them)</span></div>") if script_only else ""
        return ('<div class="cards" id="summary">' + "".join(
            f'<div class="card" data-card="{esc(k)}"><b>{esc(v)}</b><span>{esc(k)}</span></div>' for v, k in cards)
            + apart + f'<div class="card"><b style="font-size:14px">{esc(state)}</b><span>session</span></div></div>')

    def best_section(self) -> str:
        p = ['<h2 id="best">BEST_COMMIT per config class</h2>']
        if self.baseline:
            b = self.baseline
            name, vendor = device(b.device)
            p.append(f"<p id=\"baseline\">Baseline: commit <code>{esc(b.best_commit[:12])}</code> "
                     f"measured {esc(utc(b.at))} on {esc(name)} ({esc(vendor)}); "
                     f"profiler GPU time {fmt(b.gpu_us, ' us')}.</p>")
        else:
            p.append('<p id="baseline" class="muted">No baseline yet: run_benchmark records it.</p>')
        m = esc(self.metric) + (", script metric: the screen" if self.gpu_decided else "")
        p.append(f'<table id="best-table"><thead><tr><th>config class</th><th>baseline ({m})</th>'
                 f"<th>BEST ({m})</th><th>% of baseline</th><th>set by</th></tr></thead><tbody>")
        data = charts.progress_data(self.events)
        for key in data.classes:
            base, (x, best, kind) = data.baseline.get(key), data.best[key][-1]
            share = f"{best / base * 100:.1f}%" if base else "-"
            by = "baseline" if kind == "baseline" else f"commit of attempt {x}"
            p.append(f'<tr><td>{esc(key)}</td><td class="num">{fmt(base)}</td><td class="num">{fmt(best)}</td>'
                     f'<td class="num">{share}</td><td>{by}</td></tr>')
        if not data.classes:
            p.append('<tr><td colspan="5" class="muted">no measurement yet</td></tr>')
        if self.gpu_decided:
            p.append('</tbody></table><p class="muted">Profiler GPU time decided the verdicts: its figures per config '
                     'class are in <a href="#class-gpu">GPU time per config class</a>.</p>')
            return "".join(p)
        return "".join(p) + "</tbody></table>"

    def charts_section(self) -> str:
        screen = "script metric (screen): " if self.gpu_decided else ""
        progress = (f"{screen}{self.metric} per config class over attempts: BEST_COMMIT as a step line, each measured "
                    "attempt as a dot (hollow: improved, commit refused)")
        last = "the last measured attempt: change per config class (%, + = better), noise band shaded"
        gpu, per_class = gpu_time_chart(self.events), class_gpu_chart(self.events)
        figures = [("chart-progress", charts.progress_chart(self.events, self.metric, self.higher_is_better,
                                                            self.gpu_decided), progress)]
        if gpu is not None:
            figures.append(("chart-gpu", gpu, "profiler GPU time (us) of the target kernels over attempts"))
        if per_class is not None:  # the metric that decided goes first
            figures.insert(0, ("chart-gpu-classes", per_class, ("profiler GPU time per config class over attempts (us "
                                                              "per invocation): target kernels and whole operation")))
        figures.append(("chart-last-verdict", charts.last_verdict_chart(self.events, self.noise_pct), last))
        p = ['<h2 id="charts">Charts</h2>'] + [figure(ident, png, caption) for ident, png, caption in figures]
        if gpu is None:
            p.append('<p class="muted" id="chart-gpu-note">No profiler GPU time was recorded in this session '
                     "(no profiler on this device: the script metric decided every verdict).</p>")
        return "".join(p)

    def commits_section(self) -> str:
        p = [('<h2 id="commits">Kept commits</h2><table id="commits-table"><thead><tr><th>attempt</th>'
             f"<th>time (UTC)</th><th>commit</th><th>previous</th><th>{esc(self.metric)} per class</th>"
             "<th>GPU time (us)</th></tr></thead><tbody>")]
        for c in self.commits:
            p.append(f'<tr><td class="num">{esc(c.attempt)}</td><td class="t">{esc(utc(c.at))}</td>'
                     f"<td><code>{esc(c.commit[:12])}</code>{' (script only)' if c.code == 'script_only' else ''}</td>"
                     f"<td><code>{esc(c.previous[:12])}</code></td>"
                     f"<td>{'<br>'.join(f'{esc(k)} = {fmt(v)}' for k, v in c.metrics.items())}</td>"
                     f'<td class="num">{fmt(c.gpu_us)}</td></tr>')
        for r in self.refused:
            code = r.code or "refused"
            p.append(f'<tr class="refused" data-attempt="{esc(r.attempt)}" data-code="{esc(code)}">'
                     f'<td class="num">{esc(r.attempt)}</td><td class="t">{esc(utc(r.at))}</td>'
                     f'<td colspan="4" class="worse">improved, not committed: {esc(code)}: {esc(r.reason)}</td></tr>')
        if not self.commits and not self.refused:
            p.append('<tr><td colspan="6" class="muted">none yet</td></tr>')
        return "".join(p) + "</tbody></table>"

    def stop_section(self) -> str:
        head = '<h2 id="stop-summary">Stop Summary</h2>'
        if self.stop_md:
            return head + f'<div class="stop md">{markdown(self.stop_md.replace("## Stop Summary", "", 1))}</div>'
        if self.stop:
            s = self.stop
            return head + (f'<div class="stop"><p>stopped {esc(utc(s.at))}: {esc(s.reason)}; '
                           f'BEST_COMMIT <code>{esc(s.best_commit)}</code></p></div>')
        return head + '<p class="muted">The session has not stopped.</p>'

    def performance_section(self) -> str:
        head = '<h2 id="performance">performance.md</h2>'
        if not self.perf_body.strip():
            return head + '<p class="muted">(no performance.md yet)</p>'
        return head + (f'<details><summary>baseline and kept rows</summary><div class="md">'
                       f"{markdown(self.perf_body)}</div></details>")
