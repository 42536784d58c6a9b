"""The session report: one self-contained HTML page a person opens in a browser to watch a run.

`render_report` is pure (ledger events + archived patches in, an HTML string out; events typed or raw
records, read with `kopt_mcp.events.as_events`): inline CSS, charts
inlined as base64 PNG (`data:` URIs), no script, no network. Every string that comes from the ledger,
a patch or performance.md (hypotheses, reasons, diffs: written by the candidate) is escaped
(html.escape; performance.md goes through markdown-it with raw HTML off). `write_report` reads a
session's Store and writes the page atomically; the referee calls it after every verdict.

Units: metric values in the benchmark's own unit (the metric column); GPU time in us (profiler time of
the target kernels, per launch; per config class, per invocation summed over the class's harness units);
changes in % with + = better whatever the metric's direction; x = BEST / candidate.

The page's parts: html_parts.py (CSS, escaping, cells), report_sections.py (gain, summary, BEST per
class, charts, commits, Stop Summary, performance.md), report_attempts.py (attempts table, GPU time per
config class), gpu_charts.py / charts.py (the PNGs).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from pathlib import Path

from kopt_mcp.events import as_events
from kopt_mcp.ledger import atomic_write, now_iso
from kopt_mcp.views.gpu_charts import GpuSeries, gpu_series, gpu_time_chart
from kopt_mcp.views.html_parts import CSS, VERDICT_COLORS, esc
from kopt_mcp.views.report_attempts import MAX_PATCH_CHARS, Row, archived_number, attempts_section, class_gpu_section
from kopt_mcp.views.report_attempts import rows as _rows
from kopt_mcp.views.report_sections import SessionView

__all__ = ["MAX_PATCH_CHARS", "REPORT_NAME", "VERDICT_COLORS", "GpuSeries", "Row", "archived_number", "gpu_series",
           "gpu_time_chart", "read_patches", "render_report", "write_report", "write_session_report"]

log = logging.getLogger(__name__)
_WRITE = threading.Lock()  # one writer of a report file at a time (the referee's hook, a resource read)

REPORT_NAME = "report.html"


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
    the baseline, charts (GPU time per class over attempts where harness units decided, the metric per
    class over attempts, GPU time over attempts, last verdict), GPU time per config class of every
    attempt judged by harness unit, every attempt newest first (verdict, target, hypothesis, reason,
    per-class deltas, GPU time, its diff in a collapsible <details>), kept and refused commits,
    performance.md.
    """
    r = SessionView(events, metric, higher_is_better, noise_pct, performance_md)
    head = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width,initial-scale=1">',
            ("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; "
            "img-src data:; style-src 'unsafe-inline'\">"),
            f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>",
            f"<h1>{esc(title)}</h1>", r.subtitle(generated_at or now_iso())]
    stop = r.stop_section()
    body = [r.gain_section(), r.summary(), *([stop] if r.stopped else []), r.best_section(), r.charts_section(),
            class_gpu_section(r.rows), attempts_section(r.rows, patches), r.commits_section(), *([] if r.stopped else [stop]),
            r.performance_section()]
    return "\n".join(head + body + ["</main></body></html>\n"])


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
    b, g = ref.what.cfg.benchmark, ref.what.cfg.gates
    return write_report(ref.books.store, metric=b.metric, higher_is_better=b.higher_is_better, noise_pct=g.noise_pct,
                        performance_md=ref.where.workspace_path / "performance.md", strict=strict)
