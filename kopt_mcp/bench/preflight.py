"""Preflight: can the benchmark and correctness commands start here at all? Checked by `serve`
before a session waits for a device or runs anything (kopt_mcp/referee/opening.py), by
`kopt-mcp check-config`, and by `kopt-mcp init` before it runs the tests it proposes.

A session whose correctness command cannot start fails every candidate for a reason that is not
the candidate: on the H100 (issue 25) a test runner that was not installed read as "the tests
fail". So, per command (the first simple command of each; what follows `&&`, `;` or `|` is not
checked):

- its program is on PATH or a file (`python`, `pytest`, `./run.sh`);
- the files it names exist: the script an interpreter is given, every relative word ending in
  .py/.sh (a pytest node id's file too), and such paths inside a `python -c` program
  (`runpy.run_path('benchmarks/rms_norm.py')`);
- for `python -m pytest`: pytest is importable by that interpreter under the command's own
  environment assignments (one short subprocess: `<assignments> python -c "find_spec('pytest')"`),
  and `pytest` itself is on PATH where the command runs it directly.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path

from kopt_mcp.config import TargetConfig
from kopt_mcp.errors import PreflightError

_SHELL_WORDS = {"cd", "export", "source", ".", "set", "exec", "env", "time", "nice", "timeout", "if", "for", "while",
                "(", "{", "!", "true", "false", "test", "[", "echo", "eval"}
_INTERPRETERS = re.compile(r"^(python[0-9.]*|bash|sh|zsh|pytest|torchrun|node)$")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SCRIPT = re.compile(r"\.(py|sh|bash)$")
_PATH_PIECE = re.compile(r"[\w./-]+\.(?:py|sh)\b")
#: prints the interpreter's path; exit 3 when pytest is not importable
_FIND_PYTEST = "import sys, importlib.util as u; print(sys.executable); sys.exit(0 if u.find_spec('pytest') else 3)"


def command_words(command: str) -> tuple[list[str], str]:
    """The words of `command`'s first simple command without its leading VAR=value assignments,
    and those assignments as written ("PYTHONPATH=src python -m pytest -q" -> (["python", "-m",
    "pytest", "-q"], "PYTHONPATH=src ")). Raises ValueError for unbalanced quotes."""
    lex = shlex.shlex(command, posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    words = []
    for w in lex:  # up to the first control operator (&&, ||, ;, |), quoted ones aside
        if not w.strip(";&|"):
            break
        words.append(w)
    n = next((i for i, w in enumerate(words) if not _ASSIGNMENT.match(w)), len(words))
    m = re.match(r"""^\s*((?:[A-Za-z_]\w*=(?:"[^"]*"|'[^']*'|[^\s"'])*\s+){%d})""" % n, command) if n else None
    return words[n:], (m.group(1).strip() + " " if m else "")


def named_files(words: list[str]) -> list[str]:
    """The relative script paths a command's words name: words ending in .py/.sh (a node id's
    file, a `--flag=path` value), and such paths inside the program of `-c`. Pure."""
    out: list[str] = []
    for i, w in enumerate(words[1:], start=1):
        if words[i - 1] == "-c":
            out += [p for p in _PATH_PIECE.findall(w) if "/" in p]
            continue
        w = w.split("::", 1)[0].split("=", 1)[-1]
        if w and not w.startswith(("-", "$", "/", "~")) and not any(c in w for c in "*?[") and _SCRIPT.search(w):
            out.append(w)
    return list(dict.fromkeys(out))


def command_problems(command: str, cwd: Path, what: str = "[benchmark] command") -> list[str]:
    """Why `command` cannot start in `cwd` (empty when it may): its program is not on PATH nor a
    file, or a file it names (`named_files`) does not exist. Shell words (cd, export, ...) end the
    check: what they run is not known here."""
    try:
        words, _ = command_words(command)
    except ValueError as e:
        return [f"the command is not valid shell ({e}): fix its quotes"]
    if not words or words[0] in _SHELL_WORDS or words[0].startswith("$"):
        return []
    prog = words[0]
    if "/" in prog:
        if not (cwd / prog).exists():
            return [f"the command's program {prog} does not exist in {cwd}: fix {what} or workdir"]
    elif shutil.which(prog) is None:
        return [f"the command's program {prog!r} is not on PATH: install it or write its full path"]
    if not _INTERPRETERS.match(Path(prog).name):
        return []
    return [f"{prog} is given {f}, which does not exist in {cwd}: fix {what} or workdir"
            for f in named_files(words) if not (cwd / f).exists()]


def runner_problems(command: str, cwd: Path, timeout_s: float = 60.0) -> list[str]:
    """Why the test runner of a pytest `command` cannot start (empty when it can, or when the
    command runs no pytest): "the test runner is not installed in <python>" where
    `python -m pytest` names an interpreter that cannot import pytest (under the command's own
    environment assignments, in `cwd`), or `pytest` is not on PATH."""
    try:
        words, prefix = command_words(command)
    except ValueError:
        return []
    if not words:
        return []
    prog = words[0]
    if Path(prog).name == "pytest":
        found = (cwd / prog).exists() if "/" in prog else shutil.which(prog) is not None
        return [] if found else ["the test runner is not installed: `pytest` is not on PATH (install pytest, or "
                                 "write `python -m pytest` with the interpreter that has it)"]
    if not (re.match(r"^python[0-9.]*$", Path(prog).name) and words[1:3] == ["-m", "pytest"]):
        return []
    probe = f"{prefix}{shlex.quote(prog)} -c {shlex.quote(_FIND_PYTEST)}"
    try:
        r = subprocess.run(["bash", "-c", probe], cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
                           check=False)
    except subprocess.TimeoutExpired:
        return [f"{prog} did not start within {timeout_s:g} s in {cwd}"]
    where = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else shutil.which(prog) or prog
    if r.returncode == 3:
        return [f"the test runner is not installed in {where}: pytest is not importable there, so every correctness "
                f"run would fail for that reason, not the kernel's. Install it (`{where} -m pip install pytest`) or "
                "write the correctness command with an interpreter that has it"]
    if r.returncode != 0:
        return [f"{prog} does not start in {cwd} (exit {r.returncode}): {(r.stderr or r.stdout).strip()[-300:]}"]
    return []


#: prints the interpreter's path and version; exit 3 when the module argv[1] names is not importable
_PROBE = ("import sys, importlib.util as u; print(sys.executable); print(sys.version.split()[0]); "
          "sys.exit(0 if len(sys.argv) < 2 or u.find_spec(sys.argv[1]) else 3)")


def interpreter_word(command: str) -> str:
    """The Python interpreter `command` runs (its program where that is `python`, `python3.11`, a
    path to one), else `python`: what a pytest or shell-script command leaves to PATH. Pure."""
    try:
        words, _ = command_words(command)
    except ValueError:
        return "python"
    return words[0] if words and re.match(r"^python[0-9.]*$", Path(words[0]).name) else "python"


def resolved_interpreter(command: str, cwd: Path, module: str | None = None,
                         timeout_s: float = 60.0) -> tuple[str, str, bool] | None:
    """The interpreter `command` resolves to in `cwd` under its own leading environment assignments
    (`interpreter_word`; one short subprocess): (its sys.executable, its version "3.11.9", whether
    `module` imports there: True when `module` is None). None when it does not start."""
    try:
        _, prefix = command_words(command)
    except ValueError:
        prefix = ""
    probe = (f"{prefix}{shlex.quote(interpreter_word(command))} -c {shlex.quote(_PROBE)}"
             + (f" {shlex.quote(module)}" if module else ""))
    try:
        r = subprocess.run(["bash", "-c", probe], cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
                           check=False)
    except (subprocess.TimeoutExpired, OSError):
        return None
    lines = r.stdout.strip().splitlines()
    if r.returncode not in (0, 3) or len(lines) < 2:
        return None
    return lines[-2], lines[-1], r.returncode == 0


def interpreter_line(command: str, cwd: Path, timeout_s: float = 60.0) -> str:
    """One line naming the interpreter `command`'s `python` resolves to: "python -> /usr/bin/python3
    (3.11.9)", or that it does not start (within `timeout_s`)."""
    word = interpreter_word(command)
    found = resolved_interpreter(command, cwd, timeout_s=timeout_s)
    return f"{word} -> {found[0]} ({found[1]})" if found else f"{word} -> does not start in {cwd}"


def preflight_problems(target: TargetConfig, repo: Path) -> list[str]:
    """Everything that stops the benchmark or correctness command of `target` from starting in
    `repo` (its [benchmark] workdir): a missing workdir, program, named file or test runner. Each
    entry says what to fix."""
    b, c = target.benchmark, target.correctness
    cwd = repo / b.workdir
    if not cwd.is_dir():
        return [f"[benchmark] workdir {b.workdir!r} is not a directory under {repo}"]
    out = command_problems(b.command, cwd)
    if c.command:
        out += [f"[correctness] {p}" for p in command_problems(c.command, repo, "[correctness] command")]
        out += [f"[correctness] {p}" for p in runner_problems(c.command, repo)]
    return out


def preflight(target: TargetConfig, repo: Path) -> None:
    """Raise PreflightError listing `preflight_problems` when there are any."""
    problems = preflight_problems(target, repo)
    if problems:
        raise PreflightError("the commands of the config cannot start here, so no run could be judged: "
                             + "; ".join(problems))
