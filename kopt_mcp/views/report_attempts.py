"""The report's attempt sections: every attempt newest first (verdict, target, hypothesis, reason,
per-class change, GPU time, its diff), and the GPU time per config class of each attempt judged by
harness unit (target kernels and whole operation, BEST vs candidate, gain % and x).

Where profiler GPU time per harness unit decided an attempt, its per-class GPU gains come first and the
script metric's changes follow as "script metric (screen)"; elsewhere (CPU sessions, older ledgers)
the script metric's changes are the cell, as before. An improved attempt whose commit was refused
shows "improved, not committed: <code>" (data-refused="<code>"), never as a keep.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from kopt_mcp.events import Attempt, ClassChange, GpuKeep, Revert
from kopt_mcp.views.charts import refusals, shown_verdict
from kopt_mcp.views.gpu_classes import ClassGpu, class_gpu
from kopt_mcp.views.html_parts import REFUSED_COLOR, badge, diff_html, esc, fmt, num, pct, ratio, utc

MAX_PATCH_CHARS = 200_000  # per attempt; longer diffs are cut with a note naming the archived file


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
    (verdict `reverted`). Fields as in `events.Attempt`; `refused`: the code of its refused commit;
    `class_gpu`: its GPU time per config class where judged by harness unit."""
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
    refused: str | None = None
    class_gpu: list[ClassGpu] = field(default_factory=list)

    @property
    def state(self) -> str:
        """The verdict as shown ("improved, not committed: <code>" where the commit was refused)."""
        return shown_verdict(self.verdict, self.refused)


def rows(events: list) -> list[Row]:
    """The attempts table's rows, oldest first: every `attempt` event, and every revert_to_best that
    archived a diff (verdict `reverted`, its reason the caller's)."""
    refused, out = refusals(events), []
    for e in events:
        if isinstance(e, Attempt):
            out.append(Row(e.attempt, e.at, e.verdict, e.target or "global", e.hypothesis, e.reason, e.classes,
                           e.gpu, e.changed, e.patch, refused.get(e.attempt), class_gpu(e)))
        elif isinstance(e, Revert) and (n := archived_number(e)) is not None:
            out.append(Row(n, e.at, "reverted", "-", "(revert_to_best: the working diff was archived, the tree reset)",
                           e.reason or "no reason given", changed=e.changed, patch=e.archived))
    return out


def _changes(e: Row) -> str:
    """The per-class cell: GPU gains per class (target kernels, whole operation) then the script metric
    as a screen where GPU time per unit decided; the script metric's changes otherwise."""
    script = "".join(f"<div>{esc(c.key)}: {pct(c.mean_pct)}</div>" for c in e.classes)
    if not e.class_gpu:
        return script or '<span class="muted">not measured</span>'
    gpu = "".join(f"<div>{esc(c.cls)}: {pct(c.target.gain_pct)} ({ratio(c.target.ratio_x)})"
                  + (f", whole operation {pct(c.op.gain_pct)}" if c.op else "") + "</div>" for c in e.class_gpu)
    return ('<div class="gpu-classes"><b>GPU time</b>' + gpu + "</div>"
            + (f'<div class="screen">script metric (screen){script}</div>' if script else ""))


def _diff(e: Row, patch: str | None) -> str:
    if patch is None:
        return '<span class="muted">no archived patch</span>'
    lines = patch.count("\n") + (0 if patch.endswith("\n") or not patch else 1)
    cut = len(patch) > MAX_PATCH_CHARS
    body = diff_html(patch[:MAX_PATCH_CHARS]) + (
        f"\n… cut at {MAX_PATCH_CHARS} characters of {len(patch)}: see {esc(e.patch)}" if cut else "")
    return (f"<details><summary>diff of attempt {esc(e.attempt)} ({lines} lines, {esc(', '.join(e.changed)) or 'no files'})"
            f"</summary><pre>{body}</pre></details>")


def attempt_row(e: Row, patch: str | None) -> str:
    """Two <tr>: the attempt (data-attempt, data-verdict, data-refused where refused) and its diff."""
    gpu = e.gpu or GpuKeep()
    gpu_cell = (f"{fmt(gpu.gpu_best_us)} → {fmt(gpu.gpu_candidate_us)} us<br>{pct(gpu.gpu_delta_pct)}"
                if num(gpu.gpu_candidate_us) is not None else '<span class="muted">-</span>')
    shown = badge(e.verdict, e.state, REFUSED_COLOR) if e.refused else badge(e.verdict)
    refused = f' data-refused="{esc(e.refused)}"' if e.refused else ""
    return (f'<tr class="attempt" data-attempt="{esc(e.attempt)}" data-verdict="{esc(e.verdict)}"{refused}>'
            f'<td class="num">{esc(e.attempt)}</td><td class="t">{esc(utc(e.at))}</td><td>{shown}</td>'
            f'<td>{esc(e.target)}</td><td>{esc(e.hypothesis)}</td>'
            f'<td>{esc(e.reason)}</td><td class="num">{_changes(e)}</td><td class="num">{gpu_cell}</td>'
            f'<td>{esc(", ".join(e.changed))}</td></tr><tr class="diff-row"><td></td><td colspan="8">{_diff(e, patch)}</td></tr>')


def attempts_section(all_rows: list[Row], patches: Mapping[int, str]) -> str:
    """The attempts table, newest first, reverts included."""
    n = sum(r.verdict != "reverted" for r in all_rows)
    p = [(f'<h2 id="attempts">Attempts ({n}, newest first; reverts included)</h2>'
         '<table id="attempts-table">'
         "<thead><tr><th>#</th><th>time (UTC)</th><th>verdict</th><th>target</th><th>hypothesis</th><th>reason</th>"
         "<th>change per class (+ = better)</th><th>GPU time</th><th>changed</th></tr></thead><tbody>")]
    p += [attempt_row(e, patches.get(e.attempt)) for e in reversed(all_rows)]
    if not all_rows:
        p.append('<tr><td colspan="9" class="muted">no attempt yet</td></tr>')
    return "".join(p) + "</tbody></table>"


def _side_cells(side, key: str) -> str:
    if side is None:
        return '<td class="num muted" colspan="4">-</td>'
    return (f'<td class="num" data-k="{key}best_us">{fmt(side.best_us)}</td>'
            f'<td class="num" data-k="{key}candidate_us">{fmt(side.candidate_us)}</td>'
            f'<td class="num" data-k="{key}gain_pct">{pct(side.gain_pct)}</td>'
            f'<td class="num" data-k="{key}ratio_x">{ratio(side.ratio_x)}</td>')


def _class_gpu_table(judged: list[Row], ident: str) -> str:
    head = (f'<table id="{ident}" class="class-gpu-table"><thead><tr><th rowspan="2">#</th><th rowspan="2">verdict</th>'
            '<th rowspan="2">config class</th><th colspan="4">target kernels</th><th colspan="4">whole operation</th>'
            '<th rowspan="2">script metric (screen)</th></tr><tr>'
            + "<th>BEST (us)</th><th>candidate (us)</th><th>gain</th><th>x</th>" * 2 + "</tr></thead><tbody>")
    p = [head]
    for r in judged:
        shown = badge(r.verdict, r.state, REFUSED_COLOR) if r.refused else badge(r.verdict)
        for c in r.class_gpu:
            flags = " worse" * c.loss + " op-worse" * c.op_loss
            p.append(f'<tr class="class-gpu{flags}" data-attempt="{esc(r.attempt)}" data-class="{esc(c.cls)}" '
                     f'data-units="{c.units}"><td class="num">{esc(r.attempt)}</td><td>{shown}</td><td>{esc(c.cls)}</td>'
                     f'{_side_cells(c.target, "")}{_side_cells(c.op, "op_")}'
                     f'<td class="num screen" data-k="script_pct">{pct(c.script_pct)}</td></tr>')
    return "".join(p) + "</tbody></table>"


def class_gpu_section(all_rows: list[Row]) -> str:
    """The GPU time per config class of every attempt judged by harness unit: target kernels and whole
    operation, BEST (mean of its runs before and after the candidate) vs the candidate (us per
    invocation, a class's units summed), gain (%) and ratio (x, BEST / candidate), and the script
    metric's change (%, the screen); the latest such attempt in a table, the earlier ones (newest
    first) in a collapsed one. '' where no attempt was judged by harness unit."""
    judged = [r for r in reversed(all_rows) if r.class_gpu]
    if not judged:
        return ""
    p = [('<h2 id="class-gpu">GPU time per config class (the metric that decided)</h2>'
         '<p class="muted">Profiler GPU time per invocation (us), a class\'s harness units summed; BEST is the mean '
         "of BEST's runs before and after the candidate; + = faster, x = BEST / candidate.</p>"),
         _class_gpu_table(judged[:1], "class-gpu-table")]
    if judged[1:]:
        p.append(f"<details><summary>earlier attempts ({len(judged) - 1})</summary>"
                 f'{_class_gpu_table(judged[1:], "class-gpu-earlier")}</details>')
    return "".join(p)
