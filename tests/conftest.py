"""Shared fixtures: a toy kernel repository with exact metrics and a Referee on it."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

import mcp.client.stdio  # noqa: F401  -- see below
import pytest

from kopt_mcp.referee import Referee
from kopt_mcp.testing.toy import make_toy_repo

# mcp.client.stdio binds `errlog=sys.stderr` as a default argument when it is first imported. Imported
# here, before any test runs, that is pytest's session-wide stderr (a real file). Imported first inside
# a test that captures with capsys, it would be that test's in-memory stream, and every later stdio
# client in the run fails with "io.UnsupportedOperation: fileno".

# No HTML report after every verdict (kopt_mcp.referee.auto_report): its charts cost a second or more of
# CPU per operation, in every test that drives a session (servers started by a test inherit this). The
# hook never raises, so no test could see it fail; tests/referee/test_report_hook.py checks it is written
# when on, tests/views/ check what it holds.
os.environ.setdefault("KOPT_HTML_REPORT", "0")

FIXTURES = Path(__file__).parent / "fixtures"
BASE_TIMES = {"1": 100.0, "2": 200.0}


@pytest.fixture
def lease_dir(tmp_path, monkeypatch) -> Path:
    d = tmp_path / "leases"
    monkeypatch.setenv("KOPT_LEASE_DIR", str(d))
    return d


@pytest.fixture
def toy_repo(tmp_path) -> Path:
    return make_toy_repo(tmp_path / "repo", BASE_TIMES)


@pytest.fixture
def make_referee(lease_dir):
    made = []

    def make(repo: Path, tag: str = "t", **kw) -> Referee:
        r = Referee(repo, tag=tag, lease_dir=lease_dir, **kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


@pytest.fixture
def ref(toy_repo, make_referee) -> Referee:
    """A Referee whose baseline (n=1: 100 us, n=2: 200 us) is recorded."""
    r = make_referee(toy_repo)
    r.run_benchmark()
    return r


def npm_available() -> bool:
    return shutil.which("npx") is not None


def _gpu_present() -> bool:
    from kopt_mcp.gpus.nvml import NvmlProbe

    return NvmlProbe.available()


# ---- parallel runs (pytest-xdist) ----------------------------------------------------------------
# The README's test command (`python -m pytest -q`, no paths) runs on WORKERS processes where
# pytest-xdist is installed (the `test` extra); with `-n N` given, or paths named, it does as told
# (`-n 0`: one process). A test marked `alone` runs with no other test beside it: it reads other
# processes' CPU load (a second worker is foreign load to it), plants load of its own, or times real
# CPU work. Each test holds a lock over the run's workers, shared, or exclusive when `alone` (a gate
# lock first, so a waiting `alone` test is not starved). Work goes out a file at a time (a module's
# fixtures are built once); the `alone` tests and then test_chaos.py go, first, to one worker as one
# group, while the other worker runs the rest. test_chaos.py (LONG, about a third of the run's CPU
# time) is last in that group and not `alone`: it asserts invariants, not times, so it runs beside
# the rest instead of holding the other worker idle; placed last, no `alone` test waits behind it,
# and every benchmark run its SIGKILLed servers left is ended by its final restart's check.

#: workers for the README's command: one per core, at most 4 (the 2-core CI machine: 2)
WORKERS = max(1, min(4, os.cpu_count() or 1))
#: node id prefixes of the tests that run alone (files, or one test): they measure foreign CPU load
#: (the CPU gate at idle_cpu_pct 50 of the examples, ForeignLoad, CpuLoadProbe) or time real CPU work
ALONE = (
    "tests/commands/test_demo.py::test_cpu_demo_passes",
    "tests/commands/test_demo_agents.py",
    "tests/commands/test_init_example.py",
    "tests/commands/test_init_budget.py",  # asserts init ends within its budget + 8 s of wall time
    "tests/referee/test_crash.py::test_a_stale_index_lock",  # reads which git processes run
    "tests/test_decision_quality.py",
    "tests/test_real_repos.py",
    "tests/test_appended_harness.py",
    "tests/referee/test_load_rounds.py",
    "tests/referee/test_commit_load.py",
    "tests/gpus/test_load.py",
    "tests/gpus/test_gate.py",
    "tests/gpus/test_cpu_attribution.py",
    "tests/app/test_stdio_and_inspector.py",
    "tests/rules/test_verdict_replay.py",
    "tests/bench/cluster/test_ray_executor.py",
    "tests/bench/test_liger_dq.py",
    # times a Python loop by the wall clock against a 10% noise threshold: a neighbour's load spread its
    # rounds +60..+76% on a planted +80% (a full run beside a helper's tests, 2026-12-02)
    "tests/adversarial/test_script_only.py",
)
#: the group that runs first, on one worker: the `alone` tests and the longest test
FIRST_GROUP = "alone"
LONG = ("tests/test_chaos.py",)


#: pytest-xdist's worker variables, taken out of this worker's environment (`pytest_configure`)
_XDIST: dict[str, str] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """On an xdist worker, keep xdist's environment variables here and take them out of os.environ: the
    processes a test starts inherit the environment, and pytest-benchmark turns itself off wherever it
    sees PYTEST_XDIST_WORKER (a benchmark harness run by a test then timed nothing)."""
    if hasattr(config, "workerinput"):
        for key in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
            if key in os.environ:
                _XDIST[key] = os.environ.pop(key)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Skip `gpu`-marked tests where no NVIDIA GPU answers NVML. Mark `alone` the tests of ALONE; on an
    xdist worker, group the tests for --dist loadgroup (a file each; the `alone` ones and LONG in
    FIRST_GROUP, which comes first). tryfirst: before xdist reads the groups."""
    gpu_items = [i for i in items if "gpu" in i.keywords]
    if gpu_items and not _gpu_present():
        skip = pytest.mark.skip(reason="needs an NVIDIA GPU (run scripts/gpu_suite.sh on one)")
        for item in gpu_items:
            item.add_marker(skip)
    for item in items:
        if item.nodeid.startswith(ALONE):
            item.add_marker(pytest.mark.alone)
    if not _XDIST.get("PYTEST_XDIST_WORKER"):
        return
    for item in items:
        first = item.get_closest_marker("alone") is not None or item.nodeid.startswith(LONG)
        item.add_marker(pytest.mark.xdist_group(FIRST_GROUP if first else item.nodeid.split("::")[0]))
    items.sort(key=lambda i: (next(m.args[0] for m in i.iter_markers("xdist_group")) != FIRST_GROUP,
                              i.nodeid.startswith(LONG)))


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """The README's command (no paths, no -n) on WORKERS processes where pytest-xdist is installed."""
    opt = config.option
    if (getattr(opt, "numprocesses", 0) is None and config.args_source == pytest.Config.ArgsSource.TESTPATHS
            and not os.environ.get("PYTEST_XDIST_WORKER") and WORKERS > 1 and not opt.collectonly):
        opt.numprocesses = WORKERS
        if opt.dist == "no":
            opt.dist = "loadgroup"


class _RunAlone:
    """A shared/exclusive lock over the workers of one run (flock on two files in the temp folder)."""

    def __init__(self, run_id: str) -> None:
        base = Path(tempfile.gettempdir()) / f"kopt-pytest-{run_id}"
        self.gate = open(f"{base}.gate", "a+")  # noqa: SIM115 -- held for the worker's life
        self.lock = open(f"{base}.lock", "a+")  # noqa: SIM115

    @contextmanager
    def held(self, alone: bool):
        fcntl.flock(self.gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(self.lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(self.gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(self.lock, fcntl.LOCK_UN)


_run_alone: _RunAlone | None = None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under pytest-xdist: each test holds the run's lock, shared, or exclusive when marked `alone`."""
    global _run_alone
    run_id = _XDIST.get("PYTEST_XDIST_TESTRUNUID")
    if not run_id:
        return (yield)
    if _run_alone is None:
        _run_alone = _RunAlone(run_id)
    with _run_alone.held(item.get_closest_marker("alone") is not None):
        return (yield)
