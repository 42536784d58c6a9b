"""`kopt-mcp rejudge STATE_DIR --attempt N`: decide a recorded attempt again under today's rules,
from its run folders (traces, result copies), the ledger and the session's config, without running
anything (issue 24 item 5).

What it reads: the attempt's `attempt` record (its run folders and the verdict it got), the
session's frozen config (state.json's `config_path`, or --config), the target kernels and noise
history of state.json, and the profiled runs of the baseline and of earlier attempts for the
A/A spreads (recomputed under today's rules: by harness unit where the traces have units, marked
or segmented, else by launch group). The profiled triple is the attempt's last profiled candidate
run with the profiled BEST runs just before and after it; the script rounds pair each candidate
run with the BEST run before it. Sessions recorded before harness units existed are judged by the
units `evidence/segment.py` finds, else by launch group.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from pydantic import BaseModel, Field

from kopt_mcp.config import load_config
from kopt_mcp.errors import KoptError, MetricsError, ProfilerError, StateError
from kopt_mcp.evidence.profiles import Profiles, TargetProfile
from kopt_mcp.evidence.segment import trace_units
from kopt_mcp.evidence.trace import KernelTrace, exact_names_regex, target_durations, target_gpu_time, target_launches
from kopt_mcp.ledger import Store
from kopt_mcp.profilers.cupti import parse_cupti_dir
from kopt_mcp.readers.base import ResultFile
from kopt_mcp.readers.metrics import read_results
from kopt_mcp.rules.gpu_time import judge_profiles
from kopt_mcp.rules.keep import group_spread_pct
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.script import Round, decide
from kopt_mcp.rules.units import unit_spread_pct
from kopt_mcp.rules.verdict import profiled_verdict

_RUN = re.compile(r"^(\d{4})-(.+?)(?:-(\d+))?$")


class ClassRow(BaseModel):
    """One config class (a harness unit): BEST's GPU time per invocation before and after (us), the
    candidate's, its gain (%) and its own floor (%)."""

    cls: str
    best_before_us: float
    best_after_us: float
    candidate_us: float
    gain_pct: float
    floor_pct: float


class Rejudged(BaseModel):
    """The recorded verdict and today's: verdict, code, GPU-time gain and floor (%), per class."""

    attempt: int
    recorded_verdict: str
    recorded_reason: str
    verdict: str
    code: str
    reason: str
    gpu_delta_pct: float | None = None
    gpu_floor_pct: float | None = None
    spread_pct: float | None = None
    units: str = "none"
    recent_spreads_pct: list[float] = Field(default_factory=list)
    classes: list[ClassRow] = Field(default_factory=list)


def _profiled(run_dir: Path) -> KernelTrace | None:
    if not (run_dir / "collected-cupti.json").exists() and not list(run_dir.glob("cupti-*.json")):
        return None
    try:
        return parse_cupti_dir(run_dir)
    except ProfilerError:
        return None


def _role(run_dir: Path) -> str:
    m = _RUN.match(run_dir.name)
    label = m.group(2) if m else run_dir.name
    return "candidate" if label.startswith("candidate") else "best" if label.startswith(("best", "baseline")) else ""


def _values(run_dir: Path, bench) -> dict[str, float] | None:
    files = [ResultFile.load(p) for p in sorted(run_dir.glob(bench.csv))] if bench.csv else []
    if not bench.csv:
        log = next((run_dir / n for n in ("benchmark.log", "profile.log") if (run_dir / n).exists()), None)
        files = [ResultFile.load(log)] if log else []
    try:
        return read_results(files, bench).values() if files else None
    except MetricsError:
        return None


def _spread(a: KernelTrace, b: KernelTrace, regex: str, by_unit: bool = True) -> float | None:
    ua, ub = (trace_units(a), trace_units(b)) if by_unit else (None, None)
    if ua and ub:
        return unit_spread_pct(ua, ub, regex)
    try:
        return group_spread_pct(a, b, regex)
    except ProfilerError:
        return None


def _target(trace: KernelTrace, regex: str | None) -> TargetProfile:
    us, names = target_gpu_time(trace, regex)
    return TargetProfile(trace=trace, us=us, names=names, launches=target_launches(trace, names),
                         durations_us=target_durations(trace, names))


def _recent_spreads(runs_root: Path, before: int, regex: str, by_unit: bool = True) -> list[float]:
    """A/A spreads of BEST from the profiled runs of the baseline and the attempts before `before`:
    adjacent profiled BEST runs of one attempt (the baseline is attempt 0)."""
    by_attempt: dict[int, list[Path]] = {}
    for d in sorted(p for p in runs_root.iterdir() if p.is_dir()):
        m = _RUN.match(d.name)
        if m and int(m.group(1)) < before and _role(d) == "best":
            by_attempt.setdefault(int(m.group(1)), []).append(d)
    out = []
    for n in sorted(by_attempt):
        traces = [t for t in (_profiled(d) for d in sorted(by_attempt[n], key=lambda p: p.stat().st_mtime)) if t]
        out.extend(s for s in (_spread(a, b, regex, by_unit) for a, b in zip(traces, traces[1:])) if s is not None)
    return out


def rejudge(state_dir: Path, attempt: int, config: Path | None = None, keep_metric: str = "auto") -> Rejudged:
    """Decide attempt `attempt` of the session in `state_dir` again (module docstring). Raises
    StateError naming what is missing (no such attempt, no profiled triple), ConfigError for a bad
    config, ProfilerError for an unreadable trace. `keep_metric`: "auto" (today's: by harness unit
    where the traces have units, marked or segmented) or "groups" (the launch-group rule that came
    before units; the A/A spreads too), to show a rule change on the same traces."""
    by_unit = keep_metric != "groups"
    store = Store(Path(state_dir))
    state = store.load_state_json()
    if state is None:
        raise StateError(f"{state_dir} holds no state.json: pass a session's state folder (status shows it)")
    rec = next((r for r in reversed(store.ledger()) if r.get("event") == "attempt" and r.get("attempt") == attempt),
               None)
    if rec is None:
        raise StateError(f"the ledger of {state_dir} has no attempt {attempt}")
    cfg = load_config(Path(config or state["config_path"])).target
    policy = Policy.from_gates(cfg.gates)
    regex = cfg.profiler.kernel or exact_names_regex(state.get("best", {}).get("kernels") or []) or "."
    # run folders as recorded, or found by name in this state folder (a session copied from another machine)
    runs = [Path(r) if Path(r).is_dir() else store.runs / Path(r).name for r in rec.get("runs", [])]
    profiled = [(d, _role(d), t) for d, t in ((d, _profiled(d)) for d in runs) if t is not None]
    cand = max((i for i, (_, role, _) in enumerate(profiled) if role == "candidate"), default=None)
    if cand is None or cand == 0 or cand + 1 >= len(profiled):
        raise StateError(f"attempt {attempt} has no profiled candidate run between two profiled BEST runs: nothing "
                         "to judge on GPU time (a script-only device, or the attempt ended before its profiles)")
    before, after = profiled[cand - 1][2], profiled[cand + 1][2]
    triple = Profiles(before=_target(before, regex), candidate=_target(profiled[cand][2], regex),
                      after=_target(after, regex))
    recent = _recent_spreads(store.runs, attempt, regex, by_unit)
    rounds, last_best = [], None
    for d in runs:
        values = _values(d, cfg.benchmark)
        if values and _role(d) == "best":
            last_best = values
        elif values and _role(d) == "candidate" and last_best is not None:
            rounds.append(Round(best=last_best, candidate=values))
    script = decide(rounds, rec.get("target") or "global", cfg.benchmark.higher_is_better, policy.screen(),
                    state.get("noise_history") or [])
    j = judge_profiles(triple, regex, policy, recent, bool(state.get("launch_counts_vary")),
                       list((state.get("best") or {}).get("metrics") or {}), False, by_unit=by_unit)
    v = profiled_verdict(script, j, policy, can_measure=False)
    keep = j.keep
    rows = [ClassRow(cls=u.cls, best_before_us=u.best_before_us, best_after_us=u.best_after_us,
                     candidate_us=u.candidate_us, gain_pct=u.gain_pct, floor_pct=u.floor_pct)
            for u in getattr(keep, "units", [])]
    units = trace_units(before)
    return Rejudged(attempt=attempt, recorded_verdict=rec.get("verdict", ""), recorded_reason=rec.get("reason", ""),
                    verdict=v.outcome, code=str(v.code), reason=v.reason, gpu_delta_pct=keep.gpu_delta_pct,
                    gpu_floor_pct=j.floor.pct if j.floor else None, spread_pct=j.spread_pct,
                    units=(units[0].source if units and by_unit else "none"), recent_spreads_pct=recent, classes=rows)


def rejudge_command(state_dir: Path, attempt: int, config: Path | None, as_json: bool,
                    keep_metric: str = "auto") -> int:
    """The CLI: print the rejudged attempt (a table, or one JSON object with --json); 0, or 2 with
    the error's message on stderr."""
    try:
        r = rejudge(state_dir, attempt, config, keep_metric)
    except (KoptError, OSError, ValueError) as e:
        print(f"kopt-mcp rejudge: {e}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps(r.model_dump(mode="json")))
        return 0
    print(f"attempt {r.attempt}: recorded {r.recorded_verdict}; today {r.verdict} ({r.code})")
    if r.gpu_delta_pct is not None:
        floor = f"{r.gpu_floor_pct:.3f}%" if r.gpu_floor_pct is not None else "n/a"
        print(f"GPU time {r.gpu_delta_pct:+.3f}%, floor {floor}, BEST's A/A spread "
              f"{r.spread_pct if r.spread_pct is not None else float('nan'):.3f}% (units: {r.units})")
    for c in r.classes:
        print(f"  {c.cls:40s} {c.best_before_us:10.2f} {c.candidate_us:10.2f} {c.best_after_us:10.2f} us  "
              f"{c.gain_pct:+7.2f}%  floor {c.floor_pct:.2f}%")
    print(f"reason: {r.reason}")
    print(f"recorded reason: {r.recorded_reason}")
    return 0


__all__ = ["Rejudged", "rejudge", "rejudge_command"]
