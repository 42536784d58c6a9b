"""A benchmark command that sets PYTHONPATH keeps the CUPTI injector (issue 15 item 6).

Real bash and Python subprocesses, no GPU: the injector is loaded when its trace file appears in
KOPT_CUPTI_OUT (without cupti-python the file says so: status "error"; with it, "ok").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kopt_mcp.profilers.cupti import INJECT_DIR, CuptiProfiler, keep_injector, pythonpath_problems

PY = sys.executable


def _repo(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "mykernels.py").write_text("VALUE = 42\n")
    (tmp_path / "bench.py").write_text("import mykernels\nopen('ran.txt', 'w').write(str(mykernels.VALUE))\n")
    return tmp_path


def _run(tmp_path: Path, command: str) -> Path:
    out = tmp_path / "trace"
    out.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run(["bash", "-c", CuptiProfiler().wrap(command, out)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=False, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "ran.txt").read_text() == "42"  # the command's own PYTHONPATH still works
    return out


def _injected(out: Path) -> bool:
    files = list(out.glob("cupti-*.json"))
    return len(files) == 1 and json.loads(files[0].read_text())["status"] in ("ok", "error")


@pytest.mark.parametrize("command", [
    f"PYTHONPATH=src {PY} bench.py",
    f"PYTHONPATH=$PWD/src {PY} bench.py",
    f'export PYTHONPATH="src"; {PY} bench.py',
    f"export PYTHONPATH=src && {PY} bench.py",
    f"env PYTHONPATH=src {PY} bench.py",
    f"cd . && PYTHONPATH='src' {PY} bench.py",
])
def test_command_that_sets_pythonpath_keeps_the_injector(tmp_path, command):
    assert _injected(_run(_repo(tmp_path), command))


def test_without_the_rewrite_the_injector_is_dropped(tmp_path):
    """The failure of issue 15: the plain wrap of before lost the trace for `PYTHONPATH=... cmd`."""
    repo, out = _repo(tmp_path), tmp_path / "trace"
    out.mkdir()
    old_wrap = (f"export KOPT_CUPTI_OUT={out} PYTHONPATH={INJECT_DIR}; PYTHONPATH=src {PY} bench.py")
    subprocess.run(["bash", "-c", old_wrap], cwd=repo, check=True, timeout=60,
                   env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    assert not list(out.glob("cupti-*.json"))


def test_empty_pythonpath_assignment_gets_the_injector_alone():
    assert keep_injector("PYTHONPATH= python b.py") == f"PYTHONPATH={INJECT_DIR} python b.py"
    assert keep_injector("echo hi") == "echo hi"
    assert keep_injector("MYPYTHONPATH=x python b.py") == "MYPYTHONPATH=x python b.py"


def test_script_that_replaces_pythonpath_is_named_with_what_to_write(tmp_path):
    repo = _repo(tmp_path)
    (repo / "run.sh").write_text(f"#!/bin/bash\nexport PYTHONPATH=src  # our sources\n{PY} bench.py\n")
    problems = pythonpath_problems("bash run.sh", repo)
    assert len(problems) == 1 and problems[0].startswith("run.sh:2:")
    assert 'PYTHONPATH=src"${PYTHONPATH:+:$PYTHONPATH}"' in problems[0]
    assert not _injected(_run(repo, "bash run.sh"))  # what the problem means
    # written as the message says, the injector survives
    (repo / "run.sh").write_text(f'#!/bin/bash\nexport PYTHONPATH=src"${{PYTHONPATH:+:$PYTHONPATH}}"\n{PY} bench.py\n')
    assert pythonpath_problems("bash run.sh", repo) == []
    (repo / "trace").rename(repo / "trace-before")
    assert _injected(_run(repo, "bash run.sh"))


def test_pythonpath_problems_ignores_non_scripts_and_missing_files(tmp_path):
    repo = _repo(tmp_path)
    assert pythonpath_problems(f"{PY} bench.py --out results.csv", repo) == []
    assert pythonpath_problems("bash 'unterminated", repo) == []
