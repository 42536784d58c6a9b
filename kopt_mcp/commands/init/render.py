"""The commented kopt.toml text `kopt-mcp init` proposes (`render`, pure) and the `Proposal` it
returns and saves (kopt_mcp/commands/init/saved.py). What goes into it is found by
kopt_mcp/commands/init/propose.py."""

from __future__ import annotations

import json
import tomllib

from pydantic import BaseModel

from kopt_mcp.commands.init.correctness import Checked, drop_lines
from kopt_mcp.config import TargetConfig
from kopt_mcp.errors import InitError


class Proposal(BaseModel):
    """The proposed config (TOML with comments), what init found on the way, and what its runs of
    the correctness command showed (None where no test was found)."""

    toml: str
    findings: list[str]
    correctness: Checked | None = None
    #: what init's budget left unchecked: (what, the command to run by hand or '')
    unchecked: list[tuple[str, str]] = []


def _q(v: object) -> str:
    return json.dumps(v, ensure_ascii=False)


def _correctness_lines(checked: Checked | None, columns: list[str]) -> list[str]:
    """The [correctness] section: the command with what init's runs of it showed, or why none."""
    if checked is None:
        if columns:
            return ["# no pytest file found: the error columns above are the correctness check"]
        return ['# command = "python -m pytest -q tests/test_my_kernel.py"  # no test files found: write one']
    lines = []
    if checked.ran and checked.within:
        lines.append(f"# init ran these tests on the unmodified tree: {checked.summary} ({checked.within}: "
                     f"{checked.seconds:g} s); they must pass there, or every candidate fails for another reason")
        lines.append(f"# wall time of one run: ~{checked.seconds:g} s (it runs once per candidate)")
    elif checked.ran:
        lines.append(f"# init ran this command on the unmodified tree: {checked.summary or 'exit 0'} "
                     f"({checked.seconds:g} s); it must pass there, or every candidate fails for another reason")
        lines.append(f"# wall time of one run: {checked.seconds:g} s (it runs once per candidate)")
    elif checked.not_checked:
        lines += [f"# NOT CHECKED: {checked.not_checked}. Run it by hand on the unmodified tree (it must pass there",
                  "# before `kopt-mcp serve`; drop what fails, as the lines below show), or rerun init with a larger --budget"]
    else:
        lines += ["# NOT RUN: init did not run this command (--no-run-tests). Run it on the unmodified tree and check",
                  "# that it passes before `kopt-mcp serve`: a command that fails there fails every candidate"]
    lines += [f"# dropped: {line}" for line in drop_lines(checked.drops)]
    lines += [f"# note: {n}" for n in checked.notes]
    lines.append(f"command = {_q(checked.command)}  # run once per candidate; exit 0 = correct")
    if checked.seconds * 3 > 600:
        lines.append(f"timeout_s = {int(checked.seconds * 3) + 1}  # three times init's run")
    return lines


def render(command: str | None, keys: dict, unit: str | None, correctness: Checked | None, protect: list[str],
           kernel: tuple[str | None, str], findings: list[str], unchecked: list[tuple[str, str]] = ()) -> str:
    """The commented kopt.toml text; `unchecked`: what init's budget left unchecked, with the command
    to run by hand. Raises InitError if it would not load (a bug: report it)."""
    lines = ["# kopt.toml proposed by `kopt-mcp init`: read every line, then `kopt-mcp check-config`.", "#"]
    lines += [f"# NOT CHECKED (init's budget ran out): {what}" + (f"; run by hand: `{cmd}`" if cmd else "")
              for what, cmd in unchecked]
    lines += [f"# found: {f}" for f in findings]
    lines += ["", "[benchmark]"]
    lines.append(f"command = {_q(command)}" if command else
                 '# command = "python my_benchmark.py"  # REQUIRED: the command that writes the results below')
    if keys["format"] != "stdout":
        lines.append(f"csv = {_q(keys['csv'])}  # the result file the benchmark writes")
    lines.append(f"format = {_q(keys['format'])}")
    if keys["format"] == "csv-long":
        lines += [f"metric_name_column = {_q(keys['metric_name_column'])}",
                  f"value_column = {_q(keys['value_column'])}"]
    lines.append(f"metric = {_q(keys['metric'])}" + (f"  # unit: {unit}" if unit else ""))
    lines.append(f"higher_is_better = {'true' if keys['higher_is_better'] else 'false'}")
    if keys["rows"]:
        lines.append(f"rows = {_q(keys['rows'])}  # only these rows count")
    if keys.get("comparisons"):
        lines.append(f"# comparison rows (read, never judged): {'; '.join(keys['comparisons'])}")
    lines.append(f"config_columns = {_q(keys['config_columns'])}")
    if keys["correctness_columns"]:
        lines.append(f"correctness_columns = {_q(keys['correctness_columns'])}  # each 0 on every row")
    lines.append("timeout_s = 600")
    lines += ["", "[correctness]", *_correctness_lines(correctness, keys["correctness_columns"])]
    lines += ["", "[profiler]", 'backend = "auto"']
    regex, why = kernel
    lines.append(f"kernel = {_q(regex)}  # {why}" if regex else
                 f'# kernel = "^my_kernel"  # {why}: before the baseline, the tool kernel_trace_analysis gives the '
                 "repository's own kernels of one trace (own_regex): set it here")
    lines += ["", "[protect]", f"paths = {_q(protect)}  # the benchmark and the tests (their folders where those hold no kernel and no result): a candidate may not edit them"]
    text = "\n".join(lines) + "\n"
    try:
        TargetConfig.model_validate(tomllib.loads(text))
    except Exception as e:  # the proposal must load as written (once the user has filled in what it asks for)
        if command and (correctness or keys["correctness_columns"]):
            raise InitError(f"the proposed config does not load ({e}): please report this") from e
    return text
