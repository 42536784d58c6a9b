"""One attempt's record and its verified runs: the `Attempt` being judged (save_and_test) or
re-measured (commit_improvement), and the runs of its snapshots (`measure_run`, `profile_run`), each
in a disposable checkout, checked afterwards by `verify_run`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from kopt_mcp.bench.measure import Measurement, Profiled
from kopt_mcp.readers.test_summary import CorrectnessRun
from kopt_mcp.referee.core import Session
from kopt_mcp.referee.guards import judge_run_changes
from kopt_mcp.rules.keep_totals import KeepDecision
from kopt_mcp.rules.load import LoadRounds
from kopt_mcp.rules.protect import FileChange, describe
from kopt_mcp.rules.script import Round, ScriptDecision


@dataclass
class Attempt:
    """One attempt being judged (save_and_test) or re-measured (commit_improvement).

    `n`: its number; `tree` / `best_tree`: the candidate's and BEST's snapshot tree ids; `changed`:
    repo-relative paths of its diff; `runs`: run folders so far; `checked`: trees whose
    [correctness] command ran; `decision` / `keep`: the script-metric and keep-metric decisions
    once made; `rounds`: paired rounds run; `cand_run_values`: the candidate's per-class metrics in
    every round (`cand_values`: the last round's); `class_errors` / `class_gpu_us`: per-class error
    numbers and GPU time (us) when known."""

    n: int
    target: str
    hypothesis: str
    tree: str
    best_tree: str
    changed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    checked: set[str] = field(default_factory=set)
    decision: ScriptDecision | None = None
    keep: KeepDecision | None = None
    rounds: int = 0
    cand_run_values: list[dict[str, float]] = field(default_factory=list)
    class_errors: dict = field(default_factory=dict)
    class_gpu_us: dict[str, float] | None = None
    #: the candidate's whole-operation GPU time per config class and in total (us), where judged by unit
    class_op_us: dict[str, float] | None = None
    op_us: float | None = None
    lost_devices: list[str] = field(default_factory=list)
    #: the GPU-time floor (%) the keep metric's gain had to clear (rules.floor.gpu_gain_floor)
    gpu_floor_pct: float | None = None
    #: compiled-code provenance of the target kernels, BEST and candidate (rules/provenance.py)
    provenance: dict | None = None
    #: which rounds ran under foreign load and which the decision counted (rules/load.py)
    load: LoadRounds | None = None
    #: the script-metric rounds the verdict counted (BEST and candidate per class): the commit step's
    #: script re-measure is judged together with them (rules/commit.py)
    counted_rounds: list[Round] = field(default_factory=list)
    #: the run folder of the candidate's last counted run ([commit] include files when the verdict stands)
    cand_run_dir: str = ""
    #: when the attempt started measuring (time.monotonic, s): its cost's wall time counts from here
    t0: float = field(default_factory=time.monotonic)
    #: the candidate's [correctness] command run (counts, wall time), once it ran
    correctness: CorrectnessRun | None = None

    @property
    def cand_values(self) -> dict[str, float]:
        """The candidate's per-class metrics of the last round ({} before any)."""
        return self.cand_run_values[-1] if self.cand_run_values else {}

    def measured_again(self) -> None:
        """Forget the measurements (the device was lost: the whole measuring call runs again on
        a new lease); the runs made so far stay listed."""
        self.checked, self.decision, self.keep, self.rounds, self.cand_run_values = set(), None, None, 0, []
        self.load, self.counted_rounds, self.correctness = None, [], None
        self.class_errors, self.class_gpu_us = {}, None


def measure_run(sess: Session, a: Attempt, tree: str, label: str) -> Measurement:
    """One run of snapshot `tree` (the attempt's candidate or BEST) in a disposable checkout,
    verified afterwards (`verify_run`). The [correctness] command runs once per candidate tree (its
    first run); BEST passed it at the baseline. Raises Tampered."""
    check = "candidate" in label and tree not in a.checked
    a.checked.add(tree)
    m = sess.measure(tree, sess.books.store.run_dir(a.n, label), check)
    a.runs.append(m.run_dir)
    a.correctness = m.check or a.correctness
    verify_run(sess, a, m.changes, tree)
    return m


def profile_run(sess: Session, a: Attempt, prof, tree: str, label: str, check: bool = False) -> Profiled:
    """One run of snapshot `tree` under profiler `prof` in a disposable checkout, verified
    afterwards (`verify_run`); returns the Profiled (its `trace` None when the run left none; its
    `measurement` the same run's results and gate). `check`: run the [correctness] command after it,
    once per tree (`a.checked`). Raises Tampered."""
    check = check and tree not in a.checked
    if check:
        a.checked.add(tree)
    p = sess.profile(prof, tree, sess.books.store.run_dir(a.n, label), check=check)
    a.runs.append(str(p.log_path.rsplit("/", 1)[0]))
    a.correctness = (p.measurement.check if p.measurement else None) or a.correctness
    verify_run(sess, a, p.changes, tree)
    return p


def verify_run(sess: Session, a: Attempt, changes: list[FileChange], tree: str) -> None:
    """What a run of `tree` changed in its checkout: a protected file raises Tampered (named);
    a run of BEST adds its other changes to the benchmark outputs; a candidate's other changes
    become a warning."""
    is_best = tree == a.best_tree
    rest = judge_run_changes(sess, changes, "the run of BEST_COMMIT" if is_best else "the run")
    if rest and not is_best:
        w = (describe(rest) + " in its checkout: reported only, the tested snapshot (not the tree left "
             "after the run) is what is judged and committed")
        if w not in a.warnings:
            a.warnings.append(w)
