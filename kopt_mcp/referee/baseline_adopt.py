"""The baseline's first rounds from what `kopt-mcp init` measured (issue 35 item 4).

`adopt_init_runs` reads init's record (kopt_mcp/init_runs.py) and, where `init_runs.why_not` finds
nothing against it (the same tree as BEST_COMMIT with the config file left out, the same command,
config hash, interpreter and host, recent enough), turns init's plain runs into the baseline's first
plain runs: each run's result files are re-read from the record's copies with the session's own
reader and config (`read_results`, `correctness_gate`), copies kept in a run folder of the store
(`0000-baseline-init<k>`, with ADOPTED_FILE naming the record). At least one run is always
measured by the baseline itself, plain or profiled (it alone sees every file the benchmark writes in
its checkout, and its wall time on the leased device). Init's correctness run stands for the baseline's when the
config's [correctness] command is the one init ran, it passed, and within the config's timeout.

Adopted runs are script-metric runs: they count toward the run-to-run spread (the noise estimate)
like the baseline's own plain runs, never toward the profiled runs' spreads. Init's run made under a
profiler (InitRun.profiler: CUPTI, whose runs are script-metric runs) stands only where the session's
profiler is that one and `measures_script` (its verdicts read every run under it); else only init's
plain runs are adopted. That run's trace files (InitRun.trace, the profiler's own output) are copied
into its folder (`trace/`, TRACE_DIR) for the baseline to parse as the first of its profiled runs.
"""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from kopt_mcp import init_runs, vcs
from kopt_mcp.bench.measure import Measurement
from kopt_mcp.bench.preflight import resolved_interpreter
from kopt_mcp.bench.runner import RunResult
from kopt_mcp.errors import MetricsError
from kopt_mcp.readers.base import ResultFile
from kopt_mcp.readers.metrics import fresh_csvs, read_results
from kopt_mcp.readers.test_summary import CorrectnessRun
from kopt_mcp.referee.core import Session
from kopt_mcp.referee.parts import What
from kopt_mcp.rules.correctness import RunFacts, correctness_gate

#: the file of an adopted run's folder naming init's record and which of its runs it is
ADOPTED_FILE = "adopted-from-init.json"
#: the folder of an adopted run's folder holding init's trace files of that run (InitRun.trace)
TRACE_DIR = "trace"


@dataclass
class Adoption:
    """What the baseline takes from init: `runs` (Measurements, in init's order), whether init's
    correctness run stands for the baseline's (`tests`), and why (adopted, or why not)."""

    runs: list[Measurement] = field(default_factory=list)
    tests: bool = False
    #: the folders of init's trace files of adopted runs made under the session's profiler, in order
    traces: list[Path] = field(default_factory=list)
    reason: str = ""
    #: why not, stable: no_record, workdir, run_unusable, and init_runs.why_not's codes ('' where adopted)
    code: str = ""


def adopt_init_runs(sess: Session, best_tree: str, wanted: int, profiler: object = None) -> Adoption:
    """Init's runs that may stand for up to `wanted - 1` of the baseline's `wanted` plain runs of
    `best_tree` (module docstring; `profiler`: the session's), with the reason either way; nothing
    where the record is missing or any check fails. The baseline's ledger record says how many runs
    it adopted and why not."""
    rec, why = init_runs.load(sess.where.repo)
    code = "no_record" if rec is None else ""
    if rec is not None:
        code, why = _why_not(sess, rec, best_tree)
    if rec is not None and not code:
        return _adopt(sess, rec, best_tree, wanted, profiler)
    return Adoption(reason=f"init's runs not adopted: {why}; the baseline measured every run", code=code)


def _why_not(sess: Session, rec: init_runs.InitRecord, best_tree: str) -> tuple[str, str]:
    b, device = sess.what.cfg.benchmark, sess.jobs.device
    gpu = device is not None and device.vendor != "cpu"
    if b.workdir not in ("", "."):
        return "workdir", f"[benchmark] workdir = {b.workdir!r}: init ran the command in the repository's root"
    cwd = Path(sess.where.best_path) if Path(sess.where.best_path).is_dir() else sess.where.workspace_path
    found = resolved_interpreter(b.command, cwd, None, 30.0)
    return init_runs.why_not(rec, tree=init_runs.tree_without(sess.where.ws, best_tree, [rec.config_path]),
                             command=b.command, config_sha=sess.what.config.sha256,
                             interpreter=(found[0], found[1]) if found else None, here=init_runs.host(),
                             device=device.name if gpu else None,
                             device_uuid=gpu_uuid(sess.jobs.last_device) if gpu else None)


def gpu_uuid(device_id: str | None) -> str | None:
    """The GPU UUID in a job lease's device name (Jobs.last_device: the local lease's UUID, e.g.
    "GPU-8c1f...", or a cluster's "<node>:nvidia:<index>:<uuid>"): its last ':' field; None for none."""
    return device_id.rsplit(":", 1)[-1] if device_id else None


def _tests_adoptable(what: What, rec: init_runs.InitRecord) -> str:
    """'' where init's correctness run stands for the baseline's, else why not."""
    c = what.cfg.correctness
    if not c.command:
        return ""
    t = rec.tests
    if t is None or t.command != c.command:
        return "init did not run this [correctness] command"
    if not t.passed:
        return "init's run of the [correctness] command did not pass, or was not checked"
    if t.seconds > c.timeout_s:
        return f"init's run of the tests took {t.seconds:g} s, over [correctness] timeout_s = {c.timeout_s:g}"
    return ""


def _usable(rec: init_runs.InitRecord, profiler: object) -> list[int]:
    """The indices of init's runs that may stand for script-metric runs of this session (module docstring)."""
    same = getattr(profiler, "measures_script", False) and getattr(profiler, "name", None)
    return [k for k, r in enumerate(rec.runs) if not r.profiler or r.profiler == same]


def _adopt(sess: Session, rec: init_runs.InitRecord, best_tree: str, wanted: int, profiler: object) -> Adoption:
    tests_why = _tests_adoptable(sess.what, rec)
    usable = _usable(rec, profiler)
    n = min(len(usable), wanted - 1)
    tracked = set(vcs.tree_files(sess.where.ws, best_tree))
    runs = []
    for k in usable[:n]:
        m, why = _adopted_run(sess, rec, k, tracked, best_tree, check=not runs and not tests_why)
        if m is None:  # nothing of init's runs stands: their folders go
            for done in runs:
                shutil.rmtree(done.run_dir, ignore_errors=True)
            return Adoption(reason=f"init's runs not adopted: {why}; the baseline measured every run",
                            code="run_unusable")
        runs.append(m)
    for k, m in zip(usable, runs):  # marked only once every run stands: a folder without it was measured or dropped
        (Path(m.run_dir) / ADOPTED_FILE).write_text(json.dumps({
            "record": str(init_runs.where(sess.where.repo)), "run": k + 1, "written_at": rec.written_at,
            "tree": rec.tree, "profiler": rec.runs[k].profiler}) + "\n")
    tests = not tests_why and bool(sess.what.cfg.correctness.command)
    traced = "".join(f"; init's run {k + 1} ran under {rec.runs[k].profiler}, as every run of its verdicts does"
                     for k in usable[:n] if rec.runs[k].profiler)
    said = (f"{n} of {wanted} baseline run(s) adopted from `kopt-mcp init` (same tree, command, config and "
            f"interpreter, {_age(rec)} old{traced})" if n else
            f"no run adopted from `kopt-mcp init` ([gates] baseline_runs = {wanted}: the baseline measures at least one)")
    if sess.what.cfg.correctness.command:
        said += ("; init's passing run of the [correctness] command stands for the baseline's" if tests else
                 f"; the [correctness] command runs again ({tests_why})")
    traces = [Path(m.run_dir) / TRACE_DIR for m in runs if (Path(m.run_dir) / TRACE_DIR).is_dir()]
    return Adoption(runs=runs, tests=tests, reason=said, traces=traces)


def _age(rec: init_runs.InitRecord) -> str:
    return f"{max(0.0, time.time() - rec.written_at):.0f} s"


def _adopted_run(sess: Session, rec: init_runs.InitRecord, k: int, tracked: set[str], best_tree: str,
                 check: bool) -> tuple[Measurement | None, str]:
    """Init's run `k` as a Measurement of `best_tree`, its results read from the record's copies as a
    fresh checkout's run would leave them (content before: the tree's, before init's first run);
    None and why where it cannot stand for one (another set of files, appended rows, unreadable)."""
    b, run, first = sess.what.cfg.benchmark, rec.runs[k], rec.runs[0].files
    if set(run.files) != set(first):
        return None, f"init's run {k + 1} wrote other result files than its first run"
    for p, (before, after) in run.files.items():
        if k and before is not None and before != first[p][0] and len(after) > len(before) and after.startswith(before):
            return None, f"init's run {k + 1} appended to {p} after its run 1 (a fresh checkout starts without those rows)"
    d = sess.books.store.run_dir(0, f"baseline-init{k + 1}")
    (d / "benchmark.log").write_bytes(run.log)
    for p, (_, after) in run.files.items():
        (d / "files" / p).parent.mkdir(parents=True, exist_ok=True)
        (d / "files" / p).write_bytes(after)
    for name, content in run.trace.items():  # flat names: the profiler's output folder
        (d / TRACE_DIR).mkdir(exist_ok=True)
        (d / TRACE_DIR / Path(name).name).write_bytes(content)
    try:
        if not b.csv or b.format == "stdout":
            files = [ResultFile(path=str(d / "benchmark.log"), after=run.log)]
        else:
            hits = fresh_csvs(d / "files", b.csv, 0.0)
            files = [ResultFile(path=str(h), before=first.get(str(h.relative_to(d / "files")), (None,))[0],
                                after=h.read_bytes(), tracked=str(h.relative_to(d / "files")) in tracked) for h in hits]
        table = read_results(files, b)
    except MetricsError as e:
        shutil.rmtree(d, ignore_errors=True)
        return None, f"init's run {k + 1} cannot be read under this config ({e})"
    gate = correctness_gate(RunFacts(exit_code=0, timed_out=False, timeout_s=b.timeout_s,
                                     failing_classes=table.failing(), check_exit=0 if check else None))
    if gate.kind != "ok":
        shutil.rmtree(d, ignore_errors=True)
        return None, f"init's run {k + 1} does not pass the correctness gate under this config ({gate.reason})"
    t = rec.tests
    chk = CorrectnessRun(command=t.command, exit_code=0, ok=True, timed_out=False, wall_s=t.seconds,
                         log_path="", counts_from="") if check and t else None
    result = RunResult(command=rec.command, exit_code=0, timed_out=False, cancelled=False, started_at=rec.written_at,
                       duration_s=run.seconds, log_path=str(d / "benchmark.log"),
                       log_tail=run.log[-4000:].decode("utf-8", errors="replace"))
    return Measurement(tree=str(d), run=result, table=table, gate=gate, run_dir=str(d), snapshot=best_tree,
                       check=chk), ""
