"""Reading what pytest reports about one run: its JUnit XML file, or its `-v` progress lines for a
run cut short (pytest writes the XML at the end of the session only).

`kopt-mcp init` runs the correctness command it proposes with `--junit-xml=FILE -o
junit_family=xunit1 -o junit_logging=system-err` (xunit1 puts each test's `file` on its
`<testcase>`, from which the node id is rebuilt: `classname` is the node id's path with "/" as "."
and ".py" dropped, then its classes; `name` the function with its parameters). The format is
pytest's own (src/_pytest/junitxml.py): `<failure>` a failed test, `<error>` an error in setup or
teardown (`message="collection failure"` with an empty classname: a module that did not import),
`<skipped type="pytest.skip">` a skip and `type="pytest.xfail"` an expected failure. Pure: text in,
outcomes out (xml.etree from the standard library).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from typing import Literal

from pydantic import BaseModel

OutcomeName = Literal["passed", "failed", "error", "skipped", "xfailed", "xpassed", "collection_error"]


class Outcome(BaseModel):
    """One test (or one test file that did not collect) and how it ended.

    `nodeid`: pytest's node id ("test/x.py::TestA::test_b[1-2]"; the file alone for a collection
    error); `file`: its path as pytest names it (relative to pytest's rootdir); `message`: pytest's
    one-line message (the exception, or the skip/xfail reason); `text`: the traceback and captured
    stderr; `seconds`: the test's time as the report gives it (s; 0 where it gives none)."""

    nodeid: str
    file: str
    outcome: OutcomeName
    message: str = ""
    text: str = ""
    seconds: float = 0.0


def _nodeid(file: str, classname: str, name: str) -> str:
    module = file[:-3].replace("/", ".") if file.endswith(".py") else file.replace("/", ".")
    rest = classname[len(module) + 1:] if classname.startswith(module + ".") else ""
    return "::".join([file, *(rest.split(".") if rest else []), name])


def parse_junit(xml_text: str) -> list[Outcome]:
    """The outcomes of a pytest JUnit XML report (junit_family=xunit1, for the `file` attribute).
    A test case without `file` (xunit2) gets its path from `classname`, which is exact for tests
    at module level. Raises xml.etree.ElementTree.ParseError on a file that is not XML."""
    out: list[Outcome] = []
    for case in ET.fromstring(xml_text).iter("testcase"):
        classname, name = case.get("classname", ""), case.get("name", "")
        file = case.get("file") or (name.replace(".", "/") + ".py" if not classname else
                                    classname.replace(".", "/") + ".py")
        err = "\n".join(e.text or "" for e in case.findall("system-err"))
        outcome: OutcomeName = "passed"
        message = text = ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                message, text = child.get("message", ""), (child.text or "")
                if child.tag == "failure":
                    outcome = "failed"
                elif child.tag == "error":
                    outcome = "collection_error" if not classname else "error"
                else:
                    outcome = "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
                break
        nodeid = file if outcome == "collection_error" else _nodeid(file, classname, name)
        try:
            seconds = float(case.get("time") or 0.0)
        except ValueError:
            seconds = 0.0
        out.append(Outcome(nodeid=nodeid, file=file, outcome=outcome, message=message,
                           text=(text + ("\n" + err if err else "")).strip(), seconds=seconds))
    return out


_STATUSES = "PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS"
_PROGRESS = re.compile(rf"^(?P<id>\S.*?::.+?) (?P<st>{_STATUSES})(?: \((?P<why>.*)\))?\s+\[\s*\d+%\]\s*$")
#: the outcome alone: under live logging (`log_cli = true`) it follows the test's log lines
_BARE = re.compile(rf"^(?P<st>{_STATUSES})(?: \((?P<why>.*)\))?\s+\[\s*\d+%\]\s*$")
_STATUS: dict[str, OutcomeName] = {"PASSED": "passed", "FAILED": "failed", "ERROR": "error", "SKIPPED": "skipped",
                                   "XFAIL": "xfailed", "XPASS": "xpassed"}


#: a line that starts with a test's node id (a path to a .py file, then "::")
_NODE = re.compile(r"^[^\s:]+\.py::\S")


def _started(line: str) -> bool:
    """A node id pytest wrote as its test started, no outcome after it yet ("tests/test_slow.py::test_slow ")."""
    return bool(_NODE.match(line)) and not _PROGRESS.match(line)


def _walk(log: str) -> tuple[dict[str, Outcome], str | None]:
    """The finished tests of a `pytest -v` log by node id, in order, and the test started last without an outcome."""
    seen: dict[str, Outcome] = {}
    pending: str | None = None
    for line in (x.rstrip() for x in log.splitlines()):
        m, bare = _PROGRESS.match(line), _BARE.match(line)
        nodeid = m.group("id") if m else pending if bare else None
        if nodeid:
            m = m or bare
            seen.pop(nodeid, None)
            seen[nodeid] = Outcome(nodeid=nodeid, file=nodeid.split("::", 1)[0], outcome=_STATUS[m.group("st")],
                                   message=m.group("why") or "")
            pending = None
        elif _started(line):
            pending = line.strip()
    return seen, pending


def parse_progress(log: str) -> list[Outcome]:
    """The tests a `pytest -v` run finished, from its progress lines ("t/x.py::test_a PASSED
    [ 50%]", or under live logging the node id, the test's log lines, then "PASSED  [ 50%]"), in
    order: what is known of a run that was killed before it wrote its report. A test may show twice
    (a failure in teardown after its pass): the last line counts."""
    return list(_walk(log)[0].values())


def running_test(log: str) -> str | None:
    """The test a killed `pytest -v` run was inside: the node id pytest wrote when the test started,
    with no outcome after it ("tests/test_slow.py::test_slow"); None when the run ended between tests."""
    return _walk(log)[1]


class Events(BaseModel):
    """What init's plugin wrote while a run went on (kopt_mcp/commands/init/pytest_xfail_plugin.py):
    `done`, the tests that finished, in order; `running`, the test it was inside (None: between
    tests, or done); `last_t`, when the last test started or ended (wall clock, s since the epoch);
    `selected`, the node ids the run was to run, in order (None: collection had not finished)."""

    done: list[Outcome] = []
    running: str | None = None
    last_t: float | None = None
    selected: list[str] | None = None


def parse_events(text: str) -> Events:
    """Read the JSON lines init's plugin appends as a run goes on: `{"selected": [nodeid, ...]}`,
    `{"start": nodeid, "t": s}`, and per finished test its outcome, message, text, seconds and `t` (as
    pytest's JUnit report names them). A line cut off by a kill is passed over. Pure."""
    done: dict[str, Outcome] = {}
    ev = Events()
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict):
            continue
        if isinstance(rec.get("t"), (int, float)):
            ev.last_t = float(rec["t"])
        if isinstance(rec.get("selected"), list):
            ev.selected = [str(x) for x in rec["selected"]]
        elif "start" in rec:
            ev.running = str(rec["start"])
        elif "nodeid" in rec and rec.get("outcome") in _STATUS.values():
            done.pop(rec["nodeid"], None)
            done[rec["nodeid"]] = Outcome(nodeid=rec["nodeid"], file=rec["nodeid"].split("::", 1)[0],
                                          outcome=rec["outcome"], message=str(rec.get("message") or ""),
                                          text=str(rec.get("text") or ""), seconds=float(rec.get("seconds") or 0.0))
            if ev.running == rec["nodeid"]:
                ev.running = None
    ev.done = list(done.values())
    return ev


_SUMMARY = re.compile(r"^(?:=+ )?(?P<s>\d+ \w+(?:, \d+ \w+)* in [\d.]+s(?: \([\d:]+\))?)(?: =+)?$", re.M)


def summary_line(log: str) -> str:
    """pytest's last summary line ("3 passed, 1 skipped in 4.12s"; between rules of "=", or bare
    under -q), or ''."""
    found = _SUMMARY.findall(log)
    return found[-1] if found else ""
