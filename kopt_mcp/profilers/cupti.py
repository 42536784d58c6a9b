"""CUPTI kernel trace backend (NVIDIA): every kernel's GPU duration at small overhead, the default
keep-metric source on NVIDIA where cupti-python is installed.

`wrap` runs the fixed command with `cupti_inject/` first on PYTHONPATH and KOPT_CUPTI_OUT set,
so each Python process of the benchmark records CUPTI CONCURRENT_KERNEL activity and writes
`cupti-<pid>.json` into the run folder (format: `cupti_inject/sitecustomize.py`). `parse` merges
those files into one KernelTrace. The benchmark is not edited. A benchmark that is not Python
(a compiled binary) leaves no file: the error says to use `[profiler] backend = "ncu"`.
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import sys
from pathlib import Path

from kopt_mcp.evidence.trace import KernelTrace
from kopt_mcp.profilers.cupti_parse import MANIFEST, parse_cupti_dir

__all__ = ["INJECT_DIR", "MANIFEST", "CuptiProfiler", "cupti_importable", "keep_injector", "parse_cupti_dir",
           "pythonpath_problems"]

INJECT_DIR = Path(__file__).parent / "cupti_inject"
COLLECTOR = Path(__file__).parent / "cupti_collect.py"


def cupti_importable() -> bool:
    """True where `import cupti` would work in this interpreter (checked without importing it)."""
    try:
        return importlib.util.find_spec("cupti") is not None
    except (ImportError, ValueError):
        return False


class CuptiProfiler:
    """Kernel trace through CUPTI activity records, injected into the benchmark's Python processes."""

    name = "cupti"
    per_launch = True  # records each launch's GPU time (the keep metric's paired test)
    #: a profiled run costs about what a plain run does (0.95-1.00x, benchmarks/results/2026-11-23-h100-cupti-accuracy.md)
    #: and reads the same results: every run of a verdict is profiled (referee/profiled.py)
    measures_script = True
    #: stream the launches to the collector (True) or let each process write its file (False)
    stream = True

    def available(self) -> bool:
        """True where cupti-python is importable here (the benchmark's interpreter is checked at run time)."""
        return cupti_importable()

    def wrap(self, command: str, out_dir: Path) -> str:
        """`command` with the injector first on PYTHONPATH (the caller's PYTHONPATH after it) and
        KOPT_CUPTI_OUT=out_dir, as one bash line. cupti-python must be importable by the
        benchmark's own interpreter; where it is not, the run's trace file says so.

        A PYTHONPATH the command sets itself (`PYTHONPATH=../src python b.py`, `export
        PYTHONPATH=...; ...`, `env PYTHONPATH=... python ...`) would drop the injector: each such
        assignment in the command text gets the injector put in front (`keep_injector`). One made
        inside a script the command runs cannot be seen here: `pythonpath_problems` (check-config)
        and the missing-trace error say what to write there.

        Stream mode (the default): the command runs as the child of the collector
        (`cupti_collect.py`, this interpreter), which receives the launches over a socket and writes
        the trace files after the command ended, so the benchmark cannot rewrite them. `stream =
        False` (file mode): each process writes its own file at exit into `out_dir`."""
        inject = shlex.quote(str(INJECT_DIR))
        inner = f'export PYTHONPATH={inject}"${{PYTHONPATH:+:$PYTHONPATH}}"; {keep_injector(command)}'
        if not self.stream:
            return f"export KOPT_CUPTI_OUT={shlex.quote(str(out_dir))}; {inner}"
        return (f"{shlex.quote(sys.executable)} {shlex.quote(str(COLLECTOR))} {shlex.quote(str(out_dir))} -- "
                f"bash -c {shlex.quote(inner)}")

    def parse(self, out_dir: Path) -> KernelTrace:
        """Merge the run's trace files in `out_dir` into one KernelTrace; in stream mode only those
        of the collector's manifest, hash-checked. Raises ProfilerError."""
        return parse_cupti_dir(Path(out_dir), require_collector=self.stream)


#: a PYTHONPATH assignment word: at the start, or after a blank or a shell operator
_ASSIGN = re.compile(r"(?<![^\s;&|(`])PYTHONPATH=")
_KEEP_IDIOM = '${PYTHONPATH:+:$PYTHONPATH}'


def keep_injector(command: str) -> str:
    """`command` with the CUPTI injector's folder put in front of every PYTHONPATH value it assigns
    (`PYTHONPATH=../src python b.py` -> `PYTHONPATH=<injector>:../src python b.py`; an empty
    value becomes the injector alone), so a command that sets its own PYTHONPATH keeps the trace.
    Text that only looks like an assignment (an `echo PYTHONPATH=x` argument) is changed too,
    harmlessly. Never raises."""
    inject = shlex.quote(str(INJECT_DIR))

    def put(m: re.Match) -> str:
        rest = command[m.end():m.end() + 1]
        return f"PYTHONPATH={inject}" + ("" if rest == "" or rest.isspace() or rest in ";&|)" else ":")
    return _ASSIGN.sub(put, command)


def pythonpath_problems(command: str, workdir: Path) -> list[str]:
    """Where the CUPTI injector will be lost: PYTHONPATH assignments that replace the caller's value
    inside shell scripts the command runs (files named in `command` that exist under `workdir` and
    end in .sh or start with a sh/bash shebang). `keep_injector` handles assignments in the command
    itself. Returns one line per problem: file:line, the assignment, and exactly what to write
    instead. Never raises (unreadable files are skipped)."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        words = command.split()
    out = []
    for word in dict.fromkeys(words):
        path = (Path(workdir) / word) if not Path(word).is_absolute() else Path(word)
        try:
            if not path.is_file() or path.stat().st_size > 1_000_000:
                continue
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        first = text.split("\n", 1)[0]
        if not (path.suffix == ".sh" or (first.startswith("#!") and ("sh" in first.rsplit("/", 1)[-1]))):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0]
            for m in _ASSIGN.finditer(code):
                value = re.split(r"[\s;&|]", code[m.end():], maxsplit=1)[0]
                if "PYTHONPATH" in value:
                    continue
                out.append(f"{word}:{n}: `{code.strip()}` replaces PYTHONPATH, which drops kopt-mcp's CUPTI "
                           f"trace injector (no GPU time then): write PYTHONPATH={value}\"{_KEEP_IDIOM}\" "
                           "there (keeps the caller's entries), or set [profiler] backend = \"ncu\"")
    return out
