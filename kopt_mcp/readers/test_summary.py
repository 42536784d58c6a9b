"""What a [correctness] command found: its test counts, read from the pytest summary line of its log
or from a JUnit XML report it wrote (`--junitxml=PATH` in the command), and its wall time.

`pytest_counts` and `junit_counts` are pure readers (text in, counts out); `correctness_run` puts
them together with the command's exit status into the `CorrectnessRun` a verdict carries."""

from __future__ import annotations

import re
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path

from pydantic import BaseModel, Field

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: pytest's final line: "= 1 failed, 2 passed, 1 skipped in 4.34s =", "17 passed in 0.42s",
#: "6 passed in 75.43s (0:01:15)", "no tests ran in 0.01s"
_SUMMARY = re.compile(r"^=*\s*(?P<parts>(?:\d+ [a-z]+(?:, )?)+|no tests ran) in (?P<s>[0-9.]+)s\b(?: \([0-9:]+\))?\s*=*$")
_PART = re.compile(r"(\d+) ([a-z]+)")
#: pytest's words (singular and plural) -> TestCounts field
_WORDS = {"passed": "passed", "failed": "failed", "skipped": "skipped", "error": "errors", "errors": "errors",
          "xfailed": "xfailed", "xpassed": "xpassed", "deselected": "deselected"}


class TestCounts(BaseModel):
    """How many tests passed, failed, were skipped, errored (setup/collection errors), xfailed,
    xpassed and deselected, and where the counts come from (`source`)."""

    __test__ = False  # not a pytest test class

    passed: int = 0
    failed: int = 0
    skipped: int = 0
    errors: int = 0
    xfailed: int = 0
    xpassed: int = 0
    deselected: int = 0
    source: str = Field(description='"pytest summary line" or "junit <path>"')


def pytest_counts(text: str) -> TestCounts | None:
    """The counts of pytest's summary line (the last one in `text`, colour codes ignored), e.g.
    "= 1 failed, 2 passed, 1 skipped, 1 xfailed, 1 warning, 1 error in 4.34s =" -> failed 1,
    passed 2, skipped 1, xfailed 1, errors 1 (warnings are not tests). None when `text` holds no
    such line (another test runner, a run killed before its summary)."""
    for line in reversed(_ANSI.sub("", text).splitlines()):
        m = _SUMMARY.match(line.strip())
        if m is None:
            continue
        counts: dict[str, int] = {}
        for n, word in _PART.findall(m.group("parts")):
            if word in _WORDS:
                counts[_WORDS[word]] = counts.get(_WORDS[word], 0) + int(n)
        return TestCounts(**counts, source="pytest summary line")
    return None


def junit_path(command: str) -> str | None:
    """The report path a pytest command names with `--junitxml=PATH` / `--junit-xml=PATH` (or the
    option and the path as two words), else None."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    for i, w in enumerate(words):
        for opt in ("--junitxml", "--junit-xml"):
            if w.startswith(opt + "="):
                return w.split("=", 1)[1] or None
            if w == opt and i + 1 < len(words):
                return words[i + 1]
    return None


def junit_counts(path: Path) -> TestCounts | None:
    """The counts of a JUnit XML report (the sum over its <testsuite> elements: tests, failures,
    errors, skipped; passed = the rest). None when the file is missing or not JUnit XML."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else root.findall("testsuite") if root.tag == "testsuites" else []
    if not suites:
        return None
    total = {k: 0 for k in ("tests", "failures", "errors", "skipped")}
    try:
        for s in suites:
            for k in total:
                total[k] += int(s.get(k, "0") or 0)
    except ValueError:
        return None
    passed = total["tests"] - total["failures"] - total["errors"] - total["skipped"]
    return TestCounts(passed=max(0, passed), failed=total["failures"], errors=total["errors"],
                      skipped=total["skipped"], source=f"junit {path.name}")


class CorrectnessRun(BaseModel):
    """One run of the [correctness] command: the command, exit status, wall time (s), whether it
    timed out, and its test counts where its output says them (null otherwise), with its log."""

    command: str
    exit_code: int | None
    ok: bool = Field(description="exit 0 within its timeout")
    timed_out: bool
    wall_s: float = Field(description="wall time of the command (s)")
    passed: int | None = None
    failed: int | None = None
    skipped: int | None = None
    errors: int | None = Field(None, description="tests that errored in setup or collection")
    counts_from: str = Field("", description='where the counts come from: "pytest summary line", "junit <file>", '
                             'or "" (the output does not say them: counts null)')
    log_path: str


def correctness_run(command: str, exit_code: int | None, timed_out: bool, wall_s: float, log_path: str,
                    cwd: Path) -> CorrectnessRun:
    """The CorrectnessRun of a finished [correctness] command that ran in `cwd`: counts from the JUnit
    report the command names (relative to `cwd`), else from pytest's summary line in its log."""
    tests = None
    report = junit_path(command)
    if report:
        p = Path(report)
        tests = junit_counts(p if p.is_absolute() else cwd / p)
    if tests is None:
        try:
            tests = pytest_counts(Path(log_path).read_text(encoding="utf-8", errors="replace")[-20000:])
        except OSError:
            tests = None
    counts = {} if tests is None else {"passed": tests.passed, "failed": tests.failed, "skipped": tests.skipped,
                                       "errors": tests.errors, "counts_from": tests.source}
    return CorrectnessRun(command=command, exit_code=exit_code, ok=exit_code == 0 and not timed_out,
                          timed_out=timed_out, wall_s=round(wall_s, 3), log_path=log_path, **counts)
