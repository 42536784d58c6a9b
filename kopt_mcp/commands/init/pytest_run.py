"""One run of the proposed tests by `kopt-mcp init` (kopt_mcp/commands/init/correctness.py): the
command with its JUnit report and the deselecting plugin (pytest_xfail_plugin.py), read back as
outcomes, with a running count for the progress line.

The plugin is copied into the run's temporary folder, which goes first on PYTHONPATH (a benchmark
prefix such as `PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}` keeps it); where the tests' interpreter
still cannot load it (a prefix that replaces PYTHONPATH), the same run is made once more without it,
as before the plugin existed.

While the run goes on, the plugin appends each test's start and end to `<report>.events.jsonl`
(pytest_report.parse_events): the running count, and what a run cut short had done and was inside,
come from there; the `-v` lines of the log are read only where the plugin did not load.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

from pydantic import BaseModel

from kopt_mcp.bench.runner import run_command
from kopt_mcp.commands.init.progress import Progress
from kopt_mcp.commands.init.pytest_report import (
    Events,
    Outcome,
    parse_events,
    parse_junit,
    parse_progress,
    running_test,
    summary_line,
)

#: the plugin's module name in the run's folder, and its source (never imported here: it imports pytest)
PLUGIN = "kopt_init_xfail"
PLUGIN_SOURCE = Path(__file__).with_name("pytest_xfail_plugin.py")
_COLLECTED = re.compile(r"\bcollected (\d+) items?")
#: the plugin's HUNG_SKIP (the plugin imports nothing of kopt_mcp, so it spells it out too): a skip
#: reason starting so is a case whose function hit pytest-timeout's per-test limit in the same run
HUNG_SKIP = "kopt-init: not run: another case of"


class PytestRun(BaseModel):
    """What one run of the tests showed: `outcomes` (from the JUnit report, else the progress lines;
    the items the plugin deselected come first, as `xfailed` with their reason), `log` (its text),
    `exit_code`, `timed_out`, `seconds` (wall, s), `deselected` (how many the plugin left out) and
    `finished`: pytest wrote its JUnit report, which it does at the end of a whole session only (a run
    that pytest-timeout's thread method ended with os._exit leaves none); `running`: the test a run
    cut short was inside (its node id; None: between tests, or the run ended), `tail_s` the seconds
    from its last test event (that test's start, or the last test's end) to the cut (None: unknown);
    `selected`: the node ids the run was to run, in order, as init's plugin wrote them (None where the
    plugin did not load, or collection had not finished)."""

    outcomes: list[Outcome]
    log: str
    exit_code: int | None  # None: killed at the time limit
    timed_out: bool
    seconds: float
    deselected: int = 0
    finished: bool = False
    running: str | None = None
    tail_s: float | None = None
    selected: list[str] | None = None


def _events(report: Path) -> Path:
    return report.with_suffix(".events.jsonl")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def _seen(report: Path, log: str) -> Events:
    """What the run whose JUnit report is `report` has done so far: the plugin's lines
    (`<report>.events.jsonl`), else the `-v` lines of its log text `log` (no selection known)."""
    events = _read(_events(report))
    return parse_events(events) if events is not None else Events(done=parse_progress(log), running=running_test(log))


def running_count(report: Path) -> str:
    """How far the run whose JUnit report is `report` is: "12/40 test(s) done (1 failed)", from the
    plugin's lines (`<report>.events.jsonl`), else from the `-v` lines of its log (`<report>.log`)."""
    log = _read(report.with_suffix(".log")) or ""
    if not log and not _events(report).exists():
        return ""
    return _count(_seen(report, log), log)


def _count(ev: Events, log: str) -> str:
    """"12/40 test(s) done (1 failed)": the tests `ev` holds as done, of those selected (else of the
    `collected N items` of the log text `log`)."""
    total = len(ev.selected) if ev.selected is not None else next(iter(reversed(_COLLECTED.findall(log))), "?")
    bad = sum(o.outcome in ("failed", "error") for o in ev.done)
    return f"{len(ev.done)}/{total} test(s) done" + (f" ({bad} failed)" if bad else "")


def install_plugin(folder: Path) -> None:
    """Copy the deselecting plugin into `folder` as `kopt_init_xfail.py`."""
    shutil.copyfile(PLUGIN_SOURCE, folder / f"{PLUGIN}.py")


def run_tests(repo: Path, command, report: Path, timeout_s: float, progress: Progress, xfail_re: str) -> PytestRun:
    """Run `command(plugin)` (the pytest command text, with `-p PLUGIN` where `plugin` is not None) in
    `repo` within `timeout_s` s, the plugin deselecting the xfails whose reason matches `xfail_re`;
    `report` is the JUnit XML path, in the folder that holds the plugin (`install_plugin`)."""
    chosen = report.with_suffix(".deselected.json")
    env = {"PYTHONPATH": os.pathsep.join(x for x in (str(report.parent), os.environ.get("PYTHONPATH", "")) if x),
           "KOPT_INIT_XFAIL_RE": xfail_re, "KOPT_INIT_XFAIL_OUT": str(chosen),
           "KOPT_INIT_EVENTS_OUT": str(_events(report))}
    chosen.unlink(missing_ok=True)  # an earlier round's list is not this run's
    run = _once(repo, command(PLUGIN), report, timeout_s, progress, env)
    if not chosen.is_file() and f"No module named '{PLUGIN}'" in run.log and not run.outcomes:
        progress.say("the tests' interpreter could not load init's plugin (PYTHONPATH replaced?): running them "
                     "without it")
        return _once(repo, command(None), report, max(1.0, timeout_s - run.seconds), progress, {})
    gone = []
    if chosen.is_file():
        try:
            gone = [Outcome(nodeid=x["nodeid"], file=x["nodeid"].split("::", 1)[0], outcome="xfailed",
                            message=x["reason"]) for x in json.loads(chosen.read_text())]
        except (ValueError, KeyError, TypeError):
            gone = []
    if gone:
        progress.say(f"deselected before they ran: {len(gone)} test(s) expected to fail on this host "
                     f"({gone[0].message.strip()[:120]})")
    return run.model_copy(update={"outcomes": gone + run.outcomes, "deselected": len(gone)})


def _once(repo: Path, command: str, report: Path, timeout_s: float, progress: Progress,
          env: dict[str, str]) -> PytestRun:
    log, events = report.with_suffix(".log"), _events(report)
    report.unlink(missing_ok=True)
    events.unlink(missing_ok=True)
    t = time.monotonic()
    with progress.step("the correctness tests on the unmodified tree", lambda: running_count(report)):
        r = run_command(command, repo, env, timeout_s, log)
    secs = time.monotonic() - t
    text = log.read_text(errors="replace") if log.exists() else r.log_tail
    outcomes: list[Outcome] = []
    finished = False
    if report.is_file() and not r.timed_out:
        try:
            outcomes = parse_junit(report.read_text(errors="replace"))
            finished = True
        except ET.ParseError:
            outcomes = []
    ev, ended = _seen(report, text), time.time()
    progress.say(f"tests: {summary_line(text) or (_count(ev, text) if text or events.exists() else 'no summary')}")
    return PytestRun(outcomes=outcomes or ev.done, log=text, exit_code=r.exit_code, timed_out=r.timed_out,
                     seconds=secs, finished=finished, running=None if finished else ev.running,
                     tail_s=None if finished or ev.last_t is None else max(0.0, ended - ev.last_t),
                     selected=ev.selected)


def kept_summary(kept: list[Outcome]) -> str:
    """pytest's words for the outcomes of the tests a command keeps ("77 passed, 12 skipped")."""
    counts = Counter(o.outcome for o in kept)
    return ", ".join(f"{counts[k]} {k}" for k in ("passed", "xpassed", "skipped", "xfailed") if counts[k])


def stands_for(run: PytestRun, dropped: list[Outcome], whole: set[str]) -> str:
    """How init's one run stands for the narrowed command: the same tests, less the `dropped` outcomes:
    those the plugin deselected, the `whole` files dropped, the failing or slow tests, and in a run
    cut at its limit (its selection known: `run.selected`) the tests it had not finished."""
    pre = {o.nodeid for o in run.outcomes[:run.deselected]}
    left = [o for o in dropped if o.nodeid not in pre]
    in_files = sum(o.file in whole for o in left)
    cut = run.timed_out and run.selected is not None
    ended = {o.nodeid for o in run.outcomes}
    parts = [f"{len(pre)} deselected before they ran" if pre else "",
             f"{len(whole)} whole file(s) ({in_files} test outcome(s))" if whole else "",
             f"{len(left) - in_files} failing or slow test(s)" if len(left) > in_files else "",
             f"{sum(n not in ended for n in run.selected)} test(s) not finished when the run's limit ended it"
             if cut else ""]
    return (f"in one run {'cut at its limit after' if cut else 'of'} {len(run.outcomes)} test outcome(s) "
            f"({run.seconds:.1f} s) holding the same tests; left out: {', '.join(x for x in parts if x)}; wall time "
            "without them")
