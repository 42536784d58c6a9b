"""bench/modules.py: the module names come from the benchmark's interpreter, not the server's."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from kopt_mcp.bench.modules import interpreter, module_names


def test_the_interpreter_is_the_one_the_command_runs(tmp_path):
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}"}
    assert interpreter("python bench.py", env, tmp_path) == "python"
    assert interpreter("CUDA_VISIBLE_DEVICES=0 uv run python3.12 -m bench", env, tmp_path) == "python3.12"
    assert interpreter(".venv/bin/python bench.py", env, tmp_path) == str(tmp_path / ".venv/bin/python")
    tool = tmp_path / "mytool"  # an entry point: its #! line names the Python
    tool.write_text("#!/opt/py/bin/python3.11\nimport sys\n")
    tool.chmod(0o755)
    assert interpreter("mytool --fast", env, tmp_path) == "/opt/py/bin/python3.11"
    (tmp_path / "run.sh").write_text("#!/usr/bin/env bash\n")
    assert interpreter("bash run.sh", env, tmp_path) == "python3"


def test_a_venv_without_packages_answers_its_own_names(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    names = module_names(f"{venv}/bin/python bench.py", {}, tmp_path)
    assert str(venv) in names.python
    assert "csv" in names.stdlib and "json" in names.stdlib
    assert "psutil" not in names.installed  # installed for the server, not in that venv
    assert "psutil" in module_names(f"{sys.executable} bench.py", {}, tmp_path).installed


def test_an_interpreter_that_cannot_answer_falls_back_to_the_servers_own(tmp_path):
    names = module_names(f"{tmp_path}/no/such/python bench.py", {}, Path(tmp_path))
    assert "this server's own Python" in names.python and "csv" in names.stdlib
