"""The correctness command `kopt-mcp init` proposes, run once on the unmodified tree.

On the H100 (issue 25) init proposed eight Liger-Kernel test files without running them: three
needed packages the machine lacked (cutedsl, cutile, megatron), one spawned 4 and 8 processes on a
one-GPU machine, and the baseline was refused after 245 s. Now init

1. picks the test files of the benchmark's topic and pytest's own selection for it
   (kopt_mcp/commands/init/test_files.py);
2. runs them once (`pytest -v -rA --junit-xml`, with a time limit and init's plugin, which
   deselects before they run the non-strict xfails for a multi-GPU host: Liger-Kernel's
   test_dtensor_rms_norm took 146 s of a 151 s run on one H200 and can never fail the suite) and
   reads pytest's report (kopt_mcp/commands/init/pytest_run.py, pytest_report.py);
3. drops what fails or errors there, each with why (`why_dropped`): a missing package, an import
   error, a test that needs more GPUs than the machine has (spawning world_size processes, an
   invalid device ordinal, or an xfail for a multi-GPU host), or a real failure of the unmodified
   tree: a whole file where nothing of it passed, else `--deselect NODE` (a prefix: every
   parametrization of a function). A run cut by the tests' own limit (--tests-timeout) while it
   was still finishing tests (`_long`: its selection known from init's plugin) leaves out each test
   it did not finish ("not reached"); one that a single test held leaves out that test (every case
   of its function) and the files it never reached;
4. where that run ended by itself, or was a long run cut at the limit, and every test it keeps
   passed, that one run stands for the narrowed command (the same tests; `Checked.within` says what
   was left out, `seconds` is its wall time less theirs: issue 35's one test run); else (a run a
   single test held) runs the narrowed command again (at most MAX_ROUNDS runs), or raises InitError
   saying what to write when nothing passes.
"""

from __future__ import annotations

import re
import shlex
import tempfile
from pathlib import Path

from pydantic import BaseModel

from kopt_mcp.commands.init.progress import Budget, Progress
from kopt_mcp.commands.init.pytest_report import Outcome, summary_line
from kopt_mcp.commands.init.pytest_run import (
    HUNG_SKIP,
    PytestRun,
    install_plugin,
    kept_summary,
    run_tests,
    running_count,
    stands_for,
)
from kopt_mcp.errors import InitError

MAX_ROUNDS = 3
MAX_FILES = 8
#: a failure that says the test needs more devices or processes than this machine gives it
MULTI_GPU = re.compile(
    r"invalid device ordinal|world_size|nprocs|ProcessRaisedException|ProcessExitedException|\bNCCL\b|"
    r"init_process_group|requires? (?:at least )?\d+ (?:GPU|device|rank|process)|"
    r"\b(?:multi|more|several|multiple)[- ]?(?:GPU|device|node)s?\b|\d+ GPUs\b|device_count\(\)", re.I)
#: the same evidence, most telling first: what a dropped test's reason quotes
GPU_EVIDENCE = tuple(re.compile(x, re.I) for x in (
    r"invalid device ordinal[^\n]{0,80}", r"requires? (?:at least )?\d+ (?:GPU|device|rank|process)[^\n]{0,60}",
    r"\b\d+ GPUs\b[^\n]{0,60}", r"\bNCCL\b[^\n]{0,80}", r"Process(?:Raised|Exited)Exception[^\n]{0,80}",
    r"\b(?:multi|more|several|multiple)[- ]?(?:GPU|device|node)s?\b[^\n]{0,60}", r"(?:world_size|nprocs)[^\n]{0,40}"))
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")
_E_LINE = re.compile(r"^E\s+(.+)$", re.M)


class Drop(BaseModel):
    """A test file or node id (a prefix, as pytest's --deselect takes it) left out, and why.
    `kind`: "missing package", "import error", "needs more GPUs", "too slow", "failure", "not reached"."""

    target: str
    kind: str
    detail: str


def drop_lines(drops: list[Drop], detail: bool = True) -> list[str]:
    """One line per drop, "TARGET: KIND: DETAIL" (`detail` False: "TARGET: KIND"), where consecutive cases
    of one function left out for the same reason share a line: "t.py::f[19], [20], [21]: not reached: ...
    (3 case(s))" (a long file cut at its limit leaves the tail of one function). Pure."""
    groups: list[list[Drop]] = []
    for d in drops:
        last = groups[-1][-1] if groups else None
        if (last is not None and "[" in d.target and "[" in last.target and (last.kind, last.detail) == (d.kind, d.detail)
                and last.target.split("[", 1)[0] == d.target.split("[", 1)[0]):
            groups[-1].append(d)
        else:
            groups.append([d])
    out = []
    for g in groups:
        target = g[0].target + "".join(", [" + d.target.split("[", 1)[1] for d in g[1:])
        out.append(f"{target}: {g[0].kind}" + (f": {g[0].detail}" + (f" ({len(g)} case(s))" if len(g) > 1 else "")
                                               if detail else ""))
    return out


class Checked(BaseModel):
    """The correctness command as proposed and what init's runs of it showed.

    `ran`: init ran `command` itself on the unmodified tree; `summary`: pytest's last line of that
    run ("38 passed, 2 skipped in 41.20s"); `seconds`: that run's wall time; `runs`: how many runs it took; `drops`: what was left
    out; `notes`: what the run showed but kept (tests skipped here for a multi-GPU host);
    `not_checked`: why init's budget left the command unchecked ('' when it was checked or not run)."""

    command: str
    ran: bool
    not_checked: str = ""
    summary: str = ""
    seconds: float = 0.0
    #: how many times init ran it (each narrowing is one more run)
    runs: int = 0
    drops: list[Drop] = []
    notes: list[str] = []
    #: '' where init ran `command` as written; else how one wider run of init stands for it (the same
    #: tests, the dropped ones left out): the run's size, what it left out, `seconds` without them
    within: str = ""


def why_dropped(o: Outcome, gpus: int, own_packages: set[str]) -> Drop | None:
    """Why the test (or test file) `o` of a run on the unmodified tree is left out of the correctness
    command, or None when it stays (passed, skipped, or an xfail that is not for a multi-GPU host).
    `gpus`: this machine's GPU count; `own_packages`: the repository's import names (its own package
    not importing is an import error, not a missing package). Pure."""
    if o.outcome == "skipped" and HUNG_SKIP in o.message:  # init's plugin: its function hung at the per-test limit
        return Drop(target=o.nodeid, kind="too slow", detail=o.message.strip()[:200])
    if o.outcome in ("passed", "xpassed", "skipped"):
        return None
    text = f"{o.message}\n{o.text}"
    lines = [x for x in o.text.splitlines() if x.strip()]
    first = (_E_LINE.findall(o.text) or ([lines[0]] if o.outcome == "collection_error" and lines else [])
             or [o.message or o.outcome])[-1 if o.outcome == "collection_error" else 0].strip()[:200]
    if o.outcome == "xfailed":
        if MULTI_GPU.search(o.message):
            return Drop(target=o.nodeid, kind="needs more GPUs",
                        detail=f"expected to fail here ({o.message.strip()[:160]}); it still runs and takes time")
        return None
    missing = _NO_MODULE.search(text)
    if missing:
        top = missing.group(1).split(".")[0]
        if top in own_packages:
            return Drop(target=o.nodeid, kind="import error",
                        detail=f"this repository's {top} does not import here ({missing.group(0)}): put its sources "
                        "first, e.g. PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH} in the benchmark command")
        return Drop(target=o.nodeid, kind="missing package", detail=f"{top} is not installed ({missing.group(0)})")
    if o.outcome == "collection_error" or re.search(r"\bImportError\b", text):
        return Drop(target=o.nodeid, kind="import error", detail=first)
    if MULTI_GPU.search(text):
        # the last match of the most telling pattern: the error message, not the source line that raised it
        seen = next(ms[-1].group(0).strip() for ms in (list(r.finditer(text)) for r in GPU_EVIDENCE + (MULTI_GPU,)) if ms)
        return Drop(target=o.nodeid, kind="needs more GPUs",
                    detail=f"this machine has {gpus} GPU(s); the test shows {seen!r}: {first}")
    if re.search(r"\bTimeout\b|timed out", o.message):
        return Drop(target=o.nodeid, kind="too slow", detail=first)
    return Drop(target=o.nodeid, kind="failure", detail=f"fails on the unmodified tree: {first}")


def _group(outcomes: list[Outcome], drops: list[Drop]) -> list[Drop]:
    """Drops of one run made as short as pytest allows: a file where nothing passed is dropped whole
    (its first reason); a function whose every case is dropped becomes its node id prefix."""
    dropped = {d.target: d for d in drops}
    out: list[Drop] = []
    by_file: dict[str, list[Outcome]] = {}
    for o in outcomes:
        by_file.setdefault(o.file, []).append(o)
    for file, os_ in by_file.items():
        mine = [dropped[o.nodeid] for o in os_ if o.nodeid in dropped]
        if not mine:
            continue
        if not any(o.outcome in ("passed", "xpassed") and o.nodeid not in dropped for o in os_):
            kinds = list(dict.fromkeys(d.kind for d in mine))
            out.append(Drop(target=file, kind=kinds[0], detail=mine[0].detail + (
                f" (also: {', '.join(kinds[1:])})" if len(kinds) > 1 else "")))
            continue
        done: set[str] = set()
        for d in mine:
            base = d.target.split("[", 1)[0]
            if base in done:
                continue
            cases = [o for o in os_ if o.nodeid.split("[", 1)[0] == base]
            clash = any(o.nodeid.startswith(base) and o.nodeid.split("[", 1)[0] != base for o in os_)
            if "[" in d.target and not clash and all(o.nodeid in dropped for o in cases):
                done.add(base)
                out.append(Drop(target=base, kind=d.kind, detail=d.detail + f" ({len(cases)} case(s))"))
            else:
                out.append(d)
    return out


def command_text(prefix: str, python: str, files: list[str], select: list[str], deselect: list[str],
                 report: str | None = None, test_timeout_s: float | None = None, plugin: str | None = None) -> str:
    """The pytest command: `prefix` (the benchmark's environment assignments), `python -m pytest`, the
    files, the selection and `--deselect` node ids. As proposed (`report` None): quiet, stop at the
    first failure (-x), no cache folder in the tree. As init runs it (`report`: a JUnit XML path):
    verbose progress, every outcome in the summary, collection errors do not stop the run, and with
    `test_timeout_s` pytest-timeout's per-test limit (`-o timeout=S`: pass it only where the plugin
    imports), with `plugin` that plugin module (`-p NAME`: kopt_mcp/commands/init/pytest_run.py). Pure."""
    if report is None:
        flags = ["-q", "-x", "-p", "no:cacheprovider"]
    else:
        flags = ["-v", "-rA", "-p", "no:cacheprovider", "--continue-on-collection-errors", f"--junit-xml={report}",
                 "-o", "junit_family=xunit1", "-o", "junit_logging=system-err", "-o", "junit_log_passing_tests=False"]
        if test_timeout_s:
            flags += ["-o", f"timeout={test_timeout_s:g}"]
        if plugin:
            flags += ["-p", plugin]
    args = [*flags, *files, *select, *(a for d in deselect for a in ("--deselect", d))]
    return f"{prefix}{python} -m pytest " + " ".join(shlex.quote(a) for a in args)


def check_correctness(repo: Path, prefix: str, python: str, files: list[str], select: list[str],
                      timeout_s: float = 600.0, gpus: int = 0, own_packages: set[str] = frozenset(),
                      budget: Budget | None = None, progress: Progress | None = None,
                      test_timeout_s: float | None = None) -> Checked:
    """Run the correctness command on the unmodified tree in `repo` and narrow it until it passes
    (module docstring). `prefix`/`python`: the benchmark's environment assignments and interpreter;
    `files`, `select`: the test files and pytest selection (`selection`); `timeout_s` (s): each run's
    limit, cut to what is left of `budget`; `test_timeout_s`: pytest-timeout's limit per test (a test
    it ends is dropped as too slow). Where the budget ends a run or leaves none for the next, the
    command narrowed so far comes back with `not_checked` saying so. Raises InitError, naming what
    failed and why, when no test passes."""
    budget = budget or Budget(max(timeout_s * MAX_ROUNDS, 1.0))
    progress = progress or Progress(budget, quiet=True)
    files, deselect, drops = list(files[:MAX_FILES]), [], []
    with tempfile.TemporaryDirectory(prefix="kopt-init-tests-") as tmp:
        install_plugin(Path(tmp))
        for done in range(MAX_ROUNDS):
            if not budget.can_start():
                return _unchecked(prefix, python, files, select, deselect, drops, budget, "before it could run")
            report, limit = Path(tmp) / "junit.xml", budget.limit(timeout_s)
            run = run_tests(repo, lambda plugin: command_text(prefix, python, files, select, deselect, str(report),
                                                              test_timeout_s, plugin),
                            report, limit, progress, MULTI_GPU.pattern)
            new = [d for d in (why_dropped(o, gpus, own_packages) for o in run.outcomes) if d]
            if run.timed_out and limit < timeout_s:  # the budget, not the tests' own limit, ended it
                grouped = [d for d in _group(run.outcomes, new)]
                return _unchecked(prefix, python, files, select,
                                  deselect + [d.target for d in grouped if d.target not in files],
                                  drops + grouped, budget, f"after {run.seconds:.0f} s inside its run "
                                  f"({running_count(report)})")
            long_cut = _long(run, timeout_s)
            if run.timed_out:  # the test it was inside is left out; what it never reached too
                new += _cut_drops(run, files, timeout_s)
            reached = run.outcomes + (_unreached(run) if long_cut else [])
            known = {o.nodeid for o in reached}
            grouped = list({d.target: d for d in [*_group(reached, new), *(d for d in new if d.target not in known)]
                            }.values())
            for line in drop_lines(grouped):
                progress.say(f"dropped from the correctness command: {line[:400]}")
            gone = {d.target for d in new}
            passed = [o for o in run.outcomes if o.outcome in ("passed", "xpassed") and o.nodeid not in gone]
            if run.exit_code == 0 and not grouped:
                return Checked(command=command_text(prefix, python, files, select, deselect), ran=True,
                               summary=summary_line(run.log), seconds=round(run.seconds, 1), runs=done + 1,
                               drops=drops, notes=_notes(run.outcomes))
            _no_drop_explains(run, grouped, command_text(prefix, python, files, select, deselect))
            drops += grouped
            whole = {d.target for d in grouped if d.target in files}
            files = [f for f in files if f not in whole]
            deselect += [d.target for d in grouped if d.target not in whole]
            # a whole session, or one cut at the limit whose every test is known: every test it keeps ran and passed
            stands = (run.finished and run.exit_code in (0, 1)) or long_cut
            if not files or (not passed and (stands or not run.timed_out)):
                raise InitError(_nothing_passes(drops, prefix, python))
            if stands:
                kept, left = [], []
                for o in run.outcomes:
                    (left if o.nodeid in gone or o.file in whole else kept).append(o)
                return Checked(command=command_text(prefix, python, files, select, deselect), ran=True,
                               summary=kept_summary(kept), within=stands_for(run, left, whole),
                               seconds=round(max(0.0, run.seconds - (run.tail_s or 0.0)
                                                 - sum(o.seconds for o in left)), 1),
                               runs=done + 1, drops=drops, notes=_notes(kept))
    raise InitError(f"the correctness command still failed after {MAX_ROUNDS} runs on the unmodified tree, each "
                    f"narrowed by what the last one showed (flaky tests?): {_nothing_passes(drops, prefix, python)}")


def _long(run: PytestRun, timeout_s: float) -> bool:
    """A run the tests' own limit (`timeout_s`, s) ended while it was still finishing tests: init's plugin
    wrote what it selected, and its last test event (the start of the test it was inside, or the end of
    the last one) came less than half the limit before the cut (`PytestRun.tail_s`). Such a run
    stands for the tests it finished; the rest was not reached (a long file: flash-linear-attention's
    test_layernorm.py holds 150 cases, test_groupnorm's 20 took 128-150 s on an H200)."""
    return run.timed_out and run.selected is not None and (run.tail_s or 0.0) < timeout_s / 2


def _cut_drops(run: PytestRun, files: list[str], timeout_s: float) -> list[Drop]:
    """What a run ended by the tests' own limit leaves out. A long run (`_long`): each test it did not
    finish, the one it was inside included (`_unreached`; `_group` makes them functions and files). Else
    (one test held the run): that test (every case of its function) and the files it never reached; the
    rest runs again."""
    running, seen = run.running, {o.file for o in run.outcomes}
    limit_text = f"init's {timeout_s:g} s limit for the tests (--tests-timeout)"
    if _long(run, timeout_s):
        return [Drop(target=o.nodeid, kind="not reached", detail=f"not finished within {limit_text}")
                for o in _unreached(run)]
    out = []
    if running:
        base = running.split("[", 1)[0] + "[" if "[" in running else running
        out.append(Drop(target=base, kind="too slow", detail=f"did not finish within {limit_text}"))
    return out + [Drop(target=f, kind="too slow", detail=f"not reached within {limit_text}") for f in files
                  if f not in seen and not (running or "").startswith(f + "::")]


def _unreached(run: PytestRun) -> list[Outcome]:
    """The tests a cut run selected and did not finish (the one it was inside included), as outcomes
    for `_group` ("skipped": none of them passed); [] where the plugin's lines are not there."""
    if not run.timed_out or run.selected is None:
        return []
    ended = {o.nodeid for o in run.outcomes}
    return [Outcome(nodeid=n, file=n.split("::", 1)[0], outcome="skipped", message="not reached")
            for n in run.selected if n not in ended]


def _no_drop_explains(run: PytestRun, grouped: list[Drop], command: str) -> None:
    """Raise InitError where a failed run names nothing to drop: no test collected, or no failing test."""
    if grouped:
        return
    if run.exit_code == 5:
        raise InitError(f"pytest collected no test with `{command}` on the unmodified tree: pass --correctness CMD "
                        "with tests of the kernel")
    raise InitError(f"the correctness command exited {run.exit_code} on the unmodified tree without a failing test "
                    f"init could name: `{command}`; log tail: {run.log[-1500:]}")


def _notes(outcomes: list[Outcome]) -> list[str]:
    """What a passing run showed but kept: the tests that skip here for a multi-GPU host."""
    skipped = [o for o in outcomes if o.outcome == "skipped" and MULTI_GPU.search(o.message)]
    return [f"{len(skipped)} test(s) skip here for a multi-GPU host ({skipped[0].message[:120]})"] if skipped else []


def _unchecked(prefix: str, python: str, files: list[str], select: list[str], deselect: list[str], drops: list[Drop],
               budget: Budget, when: str) -> Checked:
    """The command narrowed so far, marked as not checked because the budget ran out `when`."""
    cmd = command_text(prefix, python, files, select, deselect)
    why = f"init's budget ({budget.total_s:g} s) ran out {when}"
    budget.not_checked("the correctness command (it must pass on the unmodified tree)", cmd)
    return Checked(command=cmd, ran=False, not_checked=why, drops=drops)


def _nothing_passes(drops: list[Drop], prefix: str, python: str) -> str:
    lines = "; ".join(f"{d.target}: {d.kind} ({d.detail[:160]})" for d in drops[:8])
    return (f"no test of the proposed correctness command passes on the unmodified tree: {lines}. Write a "
            f"correctness command that passes on the unmodified tree and checks the kernel, e.g. "
            f"`{prefix}{python} -m pytest -q -x tests/test_my_kernel.py -k my_kernel`, and pass it as --correctness CMD "
            "(init runs it once), or fix what is named above")
