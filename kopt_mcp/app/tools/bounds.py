"""Keep every tool result small: per-class tables cut to the classes that matter, with a count of
what was left out and where all of it is.

MCP clients cap what one tool call may return (Claude Code: 25k tokens of output), and MCPServer
sends a structured result twice (as `structuredContent` and as its JSON text). A benchmark with
hundreds of config classes (FlagGems' have several hundred) would give a verdict of 100k+
characters. So each result keeps at most MAX_CLASSES classes: the ones the agent acts on first
(the target class, divergent or failing classes, then the largest changes), in the benchmark's own
order, and says in `omitted` how many it left out and that the HTML report (kopt://report.html),
performance.md and the ledger (kopt://ledger.jsonl) hold all of them. Presentation only: the
verdict, the ledger and performance.md are computed from every class before this runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from kopt_mcp.results import (
    AttemptResult,
    BenchmarkResult,
    CommitResult,
    Omitted,
    StatusResult,
    VerdictResult,
)

T = TypeVar("T")

#: config classes one result shows at most (about 350 characters of JSON each with its interval)
MAX_CLASSES = 24
#: classes of an archived attempt's ledger record get_attempt shows (its patch takes most of the room)
RECORD_CLASSES = MAX_CLASSES // 2
SEE = "every class: kopt://report.html (the HTML report), kopt://performance.md and kopt://ledger.jsonl"


def _pick(keys: list[str], first: Iterable[str], score: dict[str, float], limit: int = MAX_CLASSES) -> set[str]:
    """`limit` of `keys`: those in `first` (in its order), then the highest `score` (ties: table order)."""
    chosen: list[str] = [k for k in dict.fromkeys(first) if k in set(keys)][:limit]
    rest = sorted((k for k in keys if k not in chosen), key=lambda k: (-score.get(k, -1.0), keys.index(k)))
    return set(chosen + rest[: limit - len(chosen)])


def _abs(v: float | None) -> float:
    return abs(v) if v is not None else -1.0


def _omitted(total: int, kept: int, why: str) -> Omitted | None:
    return None if kept >= total else Omitted(counts={"classes": total - kept}, kept=why, see=SEE)


def _cut_classes(r: T, first: Iterable[str], score: dict[str, float], why: str, dicts: tuple[str, ...] = ()) -> T:
    """`r` with `classes` (and the per-class dicts named in `dicts`) cut to `_pick`'s classes, and `omitted`."""
    keys = [c.key for c in r.classes]
    if len(keys) <= MAX_CLASSES:
        return r
    keep = _pick(keys, first, score)
    update = {name: {k: v for k, v in getattr(r, name).items() if k in keep} for name in dicts}
    return r.model_copy(update={**update, "classes": [c for c in r.classes if c.key in keep],
                                "omitted": _omitted(len(keys), len(keep), why)})


def bound_verdict(r: VerdictResult) -> VerdictResult:
    """At most MAX_CLASSES classes: the target, the divergent and failing ones, then the largest |mean change|."""
    return _cut_classes(r, [r.target, *r.divergent_classes, *r.class_errors],
                        {c.key: _abs(c.mean_pct) for c in r.classes},
                        "the target class, divergent and failing classes, then the largest mean changes",
                        dicts=("class_errors",))


def bound_commit(r: CommitResult) -> CommitResult:
    """At most MAX_CLASSES re-measured classes: the worst first (a commit is refused on them), then the best."""
    worst = [c.key for c in sorted(r.classes, key=lambda c: c.mean_pct if c.mean_pct is not None else 0.0)]
    return _cut_classes(r, worst[: MAX_CLASSES // 2], {c.key: _abs(c.mean_pct) for c in r.classes},
                        "the most negative changes, then the largest changes")


def bound_benchmark(r: BenchmarkResult) -> BenchmarkResult:
    """At most MAX_CLASSES rows: the incorrect ones first, then the largest |change vs BEST|, else table order."""
    return _cut_classes(r, [c.key for c in r.classes if not c.correct], {k: _abs(v) for k, v in r.vs_best_pct.items()},
                        "incorrect classes, then the largest changes against BEST (the first classes of the table "
                        "for the baseline)", dicts=("vs_best_pct",))


def bound_status(r: StatusResult) -> StatusResult:
    """BEST_COMMIT's metric for at most MAX_CLASSES classes, in table order."""
    keys = list(r.best_metrics)
    if len(keys) <= MAX_CLASSES:
        return r
    return r.model_copy(update={"best_metrics": {k: r.best_metrics[k] for k in keys[:MAX_CLASSES]},
                                "omitted": _omitted(len(keys), MAX_CLASSES, "the first classes of the table")})


def bound_attempt(r: AttemptResult) -> AttemptResult:
    """The attempt's ledger record with its per-class list cut to RECORD_CLASSES (the patch beside it is
    cut by the referee: referee.ops.PATCH_CHARS)."""
    record = r.record or {}
    classes = record.get("classes")
    if not isinstance(classes, list) or len(classes) <= RECORD_CLASSES:
        return r
    cut = {**record, "classes": classes[:RECORD_CLASSES],
           "classes_omitted": f"{len(classes) - RECORD_CLASSES} more; {SEE}"}
    return r.model_copy(update={"record": cut})


_BOUNDS = {VerdictResult: bound_verdict, CommitResult: bound_commit, BenchmarkResult: bound_benchmark,
           StatusResult: bound_status, AttemptResult: bound_attempt}


def bounded(result: T) -> T:
    """`result` with its per-class lists cut (see the module docstring); other results unchanged."""
    fn = _BOUNDS.get(type(result))
    return fn(result) if fn is not None else result
