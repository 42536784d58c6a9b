"""A pytest plugin `kopt-mcp init` loads into its run of the proposed tests (issue 35 item 3): it
deselects, before anything runs, the tests expected to fail on this host for a reason init names.

Liger-Kernel's `test_dtensor_rms_norm` carries `@pytest.mark.xfail(torch.cuda.device_count() < 8,
reason="Pending multi-GPU host support...")`; on a one-GPU H200 (2026-12-02) its 8 cases each spawned
4 or 8 processes and took 146 s of a 151 s run, and a non-strict xfail can never fail the suite, so it
gave no verdict for that time. pytest's own `evaluate_xfail_marks` (src/_pytest/skipping.py, pytest
>= 6) evaluates each item's xfail marks, conditions included, as the run would; an item whose xfail
holds here, runs (`run=True`), is not strict and whose reason matches the regex in
KOPT_INIT_XFAIL_RE (case-insensitive) is deselected, and `{"nodeid", "reason"}` per item is
written as a JSON list to KOPT_INIT_XFAIL_OUT.

While the tests run, a test function one of whose cases pytest-timeout ended (its report names
"Timeout") has its later cases skipped with HUNG_SKIP in the reason: init drops them with it as too
slow. On one H200 (2026-12-03) Liger-Kernel's 4 `test_correctness_mixtralexperts` cases each hung
until the per-test limit (20 s of 20 s each), so at init's 60 s limit they cost 240 s of the run for
one finding. Anything else is left as pytest would run it.

Where KOPT_INIT_EVENTS_OUT names a file, the tests selected to run (`{"selected": [nodeid, ...]}`),
each test's start (`{"start": nodeid, "t": time.time()}`) and each test's end (`{"nodeid", "outcome",
"message", "text", "seconds", "t"}`, outcome and message as pytest's JUnit report gives them:
src/_pytest/junitxml.py) are appended to it as JSON lines while the run goes on. No output setting
changes them: with `log_cli = true` (flash-linear-attention's pyproject.toml) pytest writes each
outcome on a line of its own after the live log, which init's reading of the `-v` lines missed (0 of
150 tests counted in 255 s, an H200, 2026-12-03).

This file is copied into a temporary folder as `kopt_init_xfail.py` and loaded with `-p
kopt_init_xfail` by the tests' own interpreter, which need not have kopt_mcp installed: it imports
only the standard library and pytest.
"""

from __future__ import annotations

import json
import os
import re
import time

import pytest

#: the reason's start for a case skipped because another case of its function hit the per-test limit
HUNG_SKIP = "kopt-init: not run: another case of"
_HUNG: set[str] = set()  # test functions (node ids without parameters) with a case ended by pytest-timeout
_ENDING: dict[str, dict] = {}  # node id -> its end line so far (written at its teardown)


def _emit(record: dict) -> None:
    out = os.environ.get("KOPT_INIT_EVENTS_OUT")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps(record) + "\n")


def _function(nodeid: str) -> str:
    return nodeid.split("[", 1)[0]


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Skip a case whose function already had a case ended by the per-test limit (module docstring)."""
    if _function(item.nodeid) in _HUNG:
        pytest.skip(f"{HUNG_SKIP} {_function(item.nodeid)} hit the per-test limit")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Note the function of a case that pytest-timeout ended ("Timeout" in the failure's text)."""
    outcome = yield
    report = outcome.get_result()
    if report.when == "call" and report.failed and "Timeout" in (report.longreprtext or ""):
        _HUNG.add(_function(item.nodeid))


def pytest_runtest_logstart(nodeid, location):
    """A test starts: `{"start": nodeid, "t": wall-clock seconds}`."""
    _emit({"start": nodeid, "t": time.time()})


def pytest_collection_finish(session):
    """The tests this run will run, in order, deselected ones left out: `{"selected": [nodeid, ...]}`."""
    _emit({"selected": [item.nodeid for item in session.items]})


def _ended(report) -> tuple[str, str]:
    """The outcome of one failed or skipped phase and its message, as pytest's JUnit report names them."""
    if report.skipped:
        if hasattr(report, "wasxfail"):
            reason = report.wasxfail
            return "xfailed", reason[8:] if reason.startswith("reason: ") else reason
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        return "skipped", reason[9:] if reason.startswith("Skipped: ") else reason
    crash = getattr(report.longrepr, "reprcrash", None)
    message = crash.message if crash is not None else str(report.longrepr)
    return ("failed" if report.when == "call" else "error"), message


def pytest_runtest_logreport(report):
    """Fold a test's setup, call and teardown into its end line; write it at teardown (module docstring)."""
    rec = _ENDING.setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": "passed", "message": "",
                                             "text": "", "seconds": 0.0})
    rec["seconds"] += report.duration
    if report.passed and report.when == "call" and hasattr(report, "wasxfail"):
        rec["outcome"], rec["message"] = "xpassed", report.wasxfail
    elif not report.passed and rec["outcome"] == "passed":
        rec["outcome"], rec["message"] = _ended(report)
        if report.failed:  # the traceback and captured stderr, as the JUnit report's text of a failure or error
            rec["text"] = "\n".join(x for x in (report.longreprtext, report.capstderr) if x)
    if report.when == "teardown":
        _emit({**_ENDING.pop(report.nodeid), "t": time.time()})


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    """Deselect the items described in the module docstring; write them to KOPT_INIT_XFAIL_OUT."""
    try:
        from _pytest.skipping import evaluate_xfail_marks
    except ImportError:  # a pytest older than 6: nothing is deselected
        return
    pattern = re.compile(os.environ.get("KOPT_INIT_XFAIL_RE", r"(?!)"), re.I)
    keep, gone, found = [], [], []
    for item in items:
        try:
            xfail = evaluate_xfail_marks(item)
        except Exception:  # a condition that does not evaluate: pytest reports it when the test runs
            xfail = None
        if xfail is not None and xfail.run and not xfail.strict and pattern.search(xfail.reason or ""):
            gone.append(item)
            found.append({"nodeid": item.nodeid, "reason": xfail.reason or ""})
        else:
            keep.append(item)
    if gone:
        config.hook.pytest_deselected(items=gone)
        items[:] = keep
    out = os.environ.get("KOPT_INIT_XFAIL_OUT")
    if out:
        with open(out, "w") as f:
            json.dump(found, f)
