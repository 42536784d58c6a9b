"""The correctness gate (DESIGN.md): the run must exit 0, produce a fresh metrics file (written
after the run started) and satisfy the correctness rule on every row; a separate correctness
command, where configured, must exit 0.

Outcomes: `ok`; `failed` (crash, timeout, missing or stale metrics: the run did not measure);
`incorrect` (the run measured, but results are wrong: repairable). Each with a stable `code`
(rules/decision.py): run_ok; run_timed_out, run_crashed, results_missing / results_stale /
results_unusable; rows_incorrect, check_failed.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel

from kopt_mcp.rules.decision import Code

GateKind = Literal["ok", "failed", "incorrect"]


class RunFacts(BaseModel):
    """What one benchmark run produced, as seen by the gate.

    `metrics_error`: why the metrics could not be read (None when read), `metrics_problem` which way
    (no file, only files older than the run, or files that cannot be read); `failing_classes`: class
    keys with a row failing the correctness rule; `check_exit`: exit code of the separate
    correctness command (None when not configured, or not run for this measurement: it runs once
    per candidate); `failed_tests`: the test ids it reported as failed (pytest's `FAILED <id>`).
    """

    exit_code: int | None
    timed_out: bool
    timeout_s: float
    metrics_error: str | None = None
    metrics_problem: Literal["missing", "stale", "unusable"] = "unusable"
    failing_classes: list[str] = []
    check_exit: int | None = None
    check_timed_out: bool = False
    failed_tests: list[str] = []


class GateResult(BaseModel):
    """The gate's decision, why (`code`, stable) and the reason a person or agent can act on."""

    kind: GateKind
    reason: str
    code: Code


_METRICS_CODE = {"missing": Code.RESULTS_MISSING, "stale": Code.RESULTS_STALE, "unusable": Code.RESULTS_UNUSABLE}


def correctness_gate(f: RunFacts) -> GateResult:
    """Apply the gate to one run's facts (order: timeout, exit code, metrics, rows, check command)."""
    if f.timed_out:
        return GateResult(kind="failed", code=Code.RUN_TIMED_OUT, reason=(
            f"the benchmark ran past timeout_s = {f.timeout_s:g} s and was killed with its whole "
            "process tree: look for a hang or an endless loop (see the run log)"))
    if f.exit_code != 0:
        return GateResult(kind="failed", code=Code.RUN_CRASHED, reason=(
            f"the benchmark exited with code {f.exit_code}: it crashed; read the tail of the run log"))
    if f.metrics_error:
        return GateResult(kind="failed", code=_METRICS_CODE[f.metrics_problem], reason=f.metrics_error)
    if f.failing_classes:
        return GateResult(kind="incorrect", code=Code.ROWS_INCORRECT, reason=(
            "correctness rule failed in class(es) " + ", ".join(f.failing_classes)
            + ": fix the result (the candidate stays in place for repair)"))
    if f.check_timed_out:
        return GateResult(kind="incorrect", code=Code.CHECK_FAILED, reason="the [correctness] command timed out")
    if f.check_exit not in (None, 0):
        shown = ", ".join(f.failed_tests[:10]) + (f" and {len(f.failed_tests) - 10} more" if len(f.failed_tests) > 10
                                                   else "")
        return GateResult(kind="incorrect", code=Code.CHECK_FAILED, reason=(
            f"the [correctness] command exited with code {f.check_exit}: the tests fail"
            + (f" ({shown})" if shown else " (see correctness.log in the run folder)")))
    return GateResult(kind="ok", code=Code.RUN_OK, reason="exit 0, fresh metrics, every row correct")


_FAILED = re.compile(r"^(?:FAILED|ERROR) (\S+)", re.M)


def failed_tests(log_text: str) -> list[str]:
    """The test ids a pytest run reported as failed or erroring (`FAILED tests/x.py::test_a - ...`
    lines of its short summary, which pytest prints with -ra, -rf or by default for failures),
    in order, without duplicates. Empty for other runners' output."""
    return list(dict.fromkeys(_FAILED.findall(log_text)))
