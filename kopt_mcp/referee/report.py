"""Text the referee writes for people: performance.md rows, a keep's commit message and the Stop
Summary (program.md form)."""

from __future__ import annotations

from kopt_mcp.ledger import PerfRow, now_iso
from kopt_mcp.rules.stats import confidence_shown
from kopt_mcp.session import PendingImprovement, SessionState


def fmt(v: float | None, unit: str = "") -> str:
    """A number with 4 significant digits (or '-')."""
    return "-" if v is None else f"{v:.4g}{unit}"


def perf_rows(status: str, commit: str, command: str, target: str, kernels: list[str],
              metrics: dict[str, float], gpu_us: float | None, changes: dict[str, float] | None,
              explanation: str, class_gpu_us: dict[str, float] | None = None,
              class_op_us: dict[str, float] | None = None, gpu_changes: dict[str, str] | None = None) -> list[PerfRow]:
    """One performance.md row per config class. The GPU time cell is the class's own GPU time
    where `class_gpu_us` maps it (class key -> us: the target kernels per invocation of its harness
    units, or the median launch of its target launch groups), else the target kernels' total `gpu_us`;
    followed by the class's whole operation (`class_op_us`: every non-utility kernel of its
    invocations, us) where judged by harness unit: `12.3 (whole op 45.6)`. The change cell: the script
    metric's change (`changes`, % + = better), after the class's GPU-time change where GPU time per
    harness unit decided (`gpu_changes`: class key -> gpu_change_cells' text), so the row leads with the
    metric that decided the keep: `GPU time +37.91% (whole op +24.20%); script -4.21%`."""
    kernel = ", ".join(k[:50] for k in kernels) or "-"
    rows = []
    for key, value in metrics.items():
        change = "-" if changes is None else f"{changes.get(key, 0.0):+.2f}%"
        if gpu_changes and key in gpu_changes:
            change = f"GPU time {gpu_changes[key]}; script {change}"
        rows.append(PerfRow(date=now_iso(), commit=commit, status=status, command=command,
                            target=f"{key}" + (" (target)" if key == target else ""), kernel=kernel,
                            metric=fmt(metrics[key]),
                            gpu_time=fmt(class_gpu_us[key] if class_gpu_us and key in class_gpu_us else gpu_us)
                            + (f" (whole op {fmt(class_op_us[key])})" if class_op_us and key in class_op_us else ""),
                            change=change,
                            explanation=explanation))
    return rows


def gpu_change_cells(target_pct: dict[str, float], op_pct: dict[str, float]) -> dict[str, str]:
    """Per config class the GPU-time change of a keep judged by harness unit (% less GPU time, + =
    faster: VerdictSummary.classes_gpu_pct / classes_op_pct), e.g. `+37.91% (whole op +24.20%)`."""
    return {k: f"{v:+.2f}%" + (f" (whole op {op_pct[k]:+.2f}%)" if k in op_pct else "")
            for k, v in target_pct.items()}


def landing_lines(tag: str) -> list[str]:
    """How to bring the session's BEST line (branch `kernel-opt/<tag>`) into the main line, as
    Stop Summary bullet lines: merge it (performance.md comes along: the session's record), take
    the net kernel change alone, or cherry-pick single keeps after the `kopt: baseline` commit."""
    b = f"kernel-opt/{tag}"
    return [
        f"- to land it: `git merge {b}` brings the kept kernel changes and this performance.md (the session's "
        "record: baseline, keeps, Stop Summary; each keep's commit message carries its verdict and re-measure)",
        f"- the kernel changes alone: `git diff $(git merge-base HEAD {b}) {b} -- . ':(exclude)performance.md' | "
        "git apply --index`, then commit",
        f"- single keeps: `git cherry-pick` the `kopt: baseline` commit first (it adds performance.md), then the "
        f"keeps in order (`git log --reverse --grep='^kopt-mcp attempt' --format=%h {b}`)",
    ]


def latest_gain(records: list[dict], head_commit: str | None = None) -> dict | None:
    """The latest `session_gain` ledger record (referee.gain), of `head_commit` when given; None if none."""
    for e in reversed(records):
        if e.get("event") == "session_gain" and (head_commit is None or e.get("head_commit") == head_commit):
            return e
    return None


def gain_line(gain: dict | None, best_commit: str, note: str = "") -> str:
    """The Stop Summary's headline: the session's measured gain (the latest `session_gain` ledger
    record, referee.gain) when it measured BEST_COMMIT `best_commit`, else `note` (why none was
    measured, e.g. end_session's "no keep") or how to measure it."""
    if (not gain or gain.get("head_commit") != best_commit) and note:
        return f"- session gain: {note}"
    if not gain or gain.get("head_commit") != best_commit:
        return ("- session gain: not measured against this BEST_COMMIT; the tool measure_session_gain or "
                "`kopt-mcp compare` measures the session's baseline against it in one paired run")
    return f"- session gain (measured): {gain.get('headline', '')}"


def stop_summary(state: SessionState, metric: str, gain: dict | None = None, gain_note: str = "") -> str:
    """The Stop Summary block: time, reason, the session's measured gain (`gain`: the latest
    `session_gain` ledger record, or None; `gain_note`: why none was measured), BEST_COMMIT, kept improvements (the script-only ones
    counted apart; neutral keeps apart, never a gain), best metrics, how to land the branch, and the last regressions table."""
    lines = [
        "## Stop Summary", "",
        f"- time: {state.stopped_at or now_iso()}",
        f"- reason: {state.stop_reason}",
        gain_line(gain, state.best.commit, gain_note),
        f"- BEST_COMMIT: {state.best.commit}",
        f"- kept improvements: {state.kept}"
        + (f" (script only: {state.kept_script_only})" if state.kept_script_only else "")
        + (f"; neutral keeps (not a gain): {state.kept_neutral}" if state.kept_neutral else ""),
        f"- best {metric} per config class: "
        + (", ".join(f"{k} = {fmt(v)}" for k, v in state.best.metrics.items()) or "-"),
        *([f"- best profiler GPU time (us): {fmt(state.best.gpu_us)} (target kernels)"
           + (f", {fmt(state.best.op_us)} (whole operation)" if state.best.op_us is not None else "")]
          if state.best.gpu_us is not None else []),  # a GPU figure only where a GPU profiler measured one
        *landing_lines(state.tag),
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


def keep_note(p: PendingImprovement, title: str, commit_delta_pct: float | None, gpu_us: float | None,
              confirmed: str = "") -> str:
    """The note of a keep's performance.md rows: what kept it and both deltas of its target (% better:
    the save_and_test verdict's mean as the verdict showed it, `p.verdict.target_pct`, the geometric mean
    ratio's change; and the commit's re-measure, `commit_delta_pct`; None where the commit did not
    re-measure in process: rules/commit.py verdict_stands), then `confirmed`, the out-of-process
    confirmation's figure where it confirmed (e.g. "ncu out of process +16.67%"), e.g.
    `attempt 3: fuse (kept on profiler GPU time, -12.0% GPU time; n=1 +11.80% at the verdict,
    +11.20% re-measured at commit)`. The commit's own one-round decision reason is not used: one
    round is never a significant win, and the row would say `tie` for a keep."""
    gpu = (f", {100 * (gpu_us - p.gpu_best_us) / p.gpu_best_us:+.1f}% GPU time"
           if gpu_us is not None and p.gpu_best_us else "")
    if gpu and p.verdict is not None and p.verdict.op_gain_pct is not None:
        gpu += f" (whole operation {-p.verdict.op_gain_pct:+.1f}%)"
    at_verdict = p.verdict.target_pct if p.verdict is not None else p.target_delta_pct
    at_commit = ("not re-measured in process at commit" if commit_delta_pct is None
                 else f"{commit_delta_pct:+.2f}% re-measured at commit")
    return (f"attempt {p.attempt}: {title} (kept on {p.metric_used}{gpu}; {p.target} {at_verdict:+.2f}% "
            f"at the verdict, {at_commit}{', confirmed by ' + confirmed if confirmed else ''})")


def format_note(command: str, formatted: bool, ran: bool = True) -> dict[str, str]:
    """Why a commit result's `formatted` is what it is, as CommitResult's `format_status` and
    `formatted_reason`: from `command` ([format] command, "" for none), whether it changed the
    candidate, and whether the commit step got as far as formatting (`ran`)."""
    if not command:
        status, text = "not_configured", ("no [format] command configured (kopt.toml [format] command): the tested "
                                          "tree is committed as it is")
    elif not ran:
        status, text = "not_run", "the [format] command did not run: the commit step ended before formatting"
    elif formatted:
        status, text = "changed", ("the [format] command changed the candidate: the formatted tree was re-measured "
                                   "(and committed if still better)")
    else:
        status, text = "unchanged", "the [format] command ran and changed nothing"
    return {"format_status": status, "formatted_reason": text}


def _per_class(changes: dict[str, float]) -> str:
    return ", ".join(f"{k} {v:+.2f}%" for k, v in changes.items())


def _gpu_change(best_us: float | None, cand_us: float | None) -> str:
    """'profiler GPU time 100.0 -> 58.0 us (-42.00%)', or '' when a side is missing."""
    if best_us is None or cand_us is None or best_us <= 0:
        return ""
    return f"profiler GPU time {best_us:.1f} -> {cand_us:.1f} us ({100 * (cand_us - best_us) / best_us:+.2f}%)"


def commit_message(title: str, p: PendingImprovement, remeasure_line: str, notes: list[str] | None = None) -> str:
    """The message of a keep's commit (git: title, blank line, body). The body carries the
    save_and_test verdict that ruled it improved (`p.verdict`: target change with its lower bound,
    paired rounds, per-class changes, profiler GPU time), then the commit's re-measure as one line
    (`remeasure_line`, starting "re-measured at commit:": the metric that decided the verdict, judged
    by its rule; referee/commit_measure.py Remeasure.shown), then `notes` (one line each: formatting,
    re-applying, the out-of-process confirmation, result files committed). Changes in %, + = better.
    The line `kopt-mcp attempt N, target T` is what recovery looks for (recovery.is_commit_of)."""
    v = p.verdict
    lines = [title, "", f"kopt-mcp attempt {p.attempt}, target {p.target}: kept on {p.metric_used}"]
    if v is not None:
        conf = f"{confidence_shown(v.confidence)} " if v.confidence is not None else ""
        bound = f" ({conf}lower bound {v.target_lo_pct:+.2f}%)" if v.target_lo_pct is not None else ""
        gpu = _gpu_change(v.gpu_best_us, v.gpu_candidate_us)
        script = (f"{p.target} {v.target_pct:+.2f}%{bound} over {v.rounds} paired round{'s' if v.rounds != 1 else ''}; "
                  f"per class {_per_class(v.classes_pct)}")
        if v.classes_gpu_pct:  # GPU time per harness unit decided: it comes first, the script metric screened
            whole = f", whole operation {v.op_gain_pct:+.2f}%" if v.op_gain_pct is not None else ""
            lines.append(f"save_and_test verdict: improved on {gpu}{whole}; per class (GPU time, + = faster) "
                         + ", ".join(f"{k} {c}" for k, c in gpu_change_cells(v.classes_gpu_pct, v.classes_op_pct).items()))
            lines.append(f"script metric (the screen): {script}")
        else:
            lines.append(f"save_and_test verdict: improved, {script}" + (f"; {gpu}" if gpu else ""))
    else:  # a pending improvement saved before the verdict's numbers were kept
        lines.append(f"save_and_test verdict: improved, {p.target} {p.target_delta_pct:+.2f}%")
    lines.append(remeasure_line)
    lines += [n.strip() for n in notes or [] if n.strip()]
    return "\n".join(lines) + "\n"
