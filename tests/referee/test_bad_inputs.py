"""Bad inputs: binary and huge benchmark output, a detached HEAD in the user's repository, and
property tests over metric parsing and the verdict rule."""

from __future__ import annotations

import csv
import math
import subprocess
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kopt_mcp.bench.runner import LOG_KEEP_BYTES, TAIL_BYTES, run_command
from kopt_mcp.config import BenchmarkSection
from kopt_mcp.readers.metrics import class_key, read_metrics
from kopt_mcp.rules.policy import Policy
from kopt_mcp.rules.script import GLOBAL, Round, decide
from kopt_mcp.testing.toy import set_kernel

# -- benchmark output -------------------------------------------------------------------------


def test_non_utf8_output_is_logged_as_is_and_the_tail_decodes(tmp_path):
    log = tmp_path / "log"
    cmd = "printf 'ok \\xff\\xfe\\xc3\\x28 bytes\\n'; printf '\\x80\\x81' >&2; echo END"
    r = run_command(cmd, tmp_path, {}, 30, log)
    assert r.exit_code == 0
    assert b"\xff\xfe\xc3\x28" in log.read_bytes()  # kept byte for byte
    assert "END" in r.log_tail and "\ufffd" in r.log_tail  # decoded with replacement, never raises


def test_50_mb_of_output_leaves_a_bounded_log_with_head_marker_and_tail(tmp_path):
    log = tmp_path / "log"
    cmd = ("printf 'FIRST-LINE\\n'; head -c 50000000 /dev/zero | tr '\\0' 'x'; "
           "printf '\\n\\xff\\xfe binary\\n'; echo LAST-LINE")
    r = run_command(cmd, tmp_path, {}, 60, log)
    assert r.exit_code == 0
    data = log.read_bytes()
    assert len(data) <= 2 * LOG_KEEP_BYTES + 200
    assert data.startswith(b"FIRST-LINE\n") and data.rstrip().endswith(b"LAST-LINE")
    assert b"\xff\xfe binary" in data
    marker = data[LOG_KEEP_BYTES:LOG_KEEP_BYTES + 200]
    assert b"[kopt-mcp: " in marker and b"bytes of output omitted" in marker
    assert len(r.log_tail) <= TAIL_BYTES and r.log_tail.rstrip().endswith("LAST-LINE")


def test_output_under_the_bound_is_untouched(tmp_path):
    log = tmp_path / "log"
    r = run_command("head -c 2000000 /dev/zero | tr '\\0' 'y'", tmp_path, {}, 30, log)
    assert r.exit_code == 0 and log.stat().st_size == 2_000_000


# -- the user's repository on a detached HEAD ---------------------------------------------------


def test_detached_head_in_the_users_repository_at_serve_start(toy_repo, make_referee):
    subprocess.run(["git", "checkout", "-q", "--detach"], cwd=toy_repo, check=True)
    start = subprocess.run(["git", "rev-parse", "HEAD"], cwd=toy_repo, capture_output=True, text=True).stdout
    r = make_referee(toy_repo)
    assert r.run_benchmark().baseline_recorded
    set_kernel(r.where.workspace_path, {"1": 80.0, "2": 160.0})
    assert r.save_and_test("global", "faster").verdict == "improved"
    assert r.commit_improvement("faster").committed
    branch = subprocess.run(["git", "branch", "--show-current"], cwd=r.where.workspace_path, capture_output=True, text=True)
    assert branch.stdout.strip() == "kernel-opt/t"
    user = subprocess.run(["git", "rev-parse", "HEAD"], cwd=toy_repo, capture_output=True, text=True).stdout
    assert user == start  # the user's checkout is left where it was, still detached


# -- properties of metric parsing ----------------------------------------------------------------

BENCH = BenchmarkSection(command="x", csv="*.csv", metric="us", correctness_columns=["err"],
                         config_columns=["n", "dtype"])
CLASS = st.tuples(st.integers(1, 10**6), st.sampled_from(["fp16", "bf16", "fp32", "fp8", "int8"]))
METRIC = st.floats(min_value=1e-6, max_value=1e9, allow_nan=False, allow_infinity=False)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _write(path: Path, rows: list[tuple[tuple[int, str], float]]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["n", "dtype", "us", "err"])
        for (n, d), v in rows:
            w.writerow([n, d, repr(v), 0])
    return path


@FAST
@given(st.dictionaries(CLASS, METRIC, min_size=1, max_size=8))
def test_any_classes_with_positive_finite_metrics_round_trip(tmp_path, classes):
    t = read_metrics([_write(tmp_path / "m.csv", list(classes.items()))], BENCH)
    got = t.values()
    assert got == {class_key(["n", "dtype"], [n, d]): v for (n, d), v in classes.items()}
    assert all(f"n={n},dtype={d}" in got for n, d in classes)
    assert t.correct


@FAST
@given(st.lists(st.tuples(CLASS, METRIC), min_size=1, max_size=20).flatmap(
    lambda rows: st.tuples(st.just(rows), st.permutations(rows))))
def test_permuting_csv_rows_changes_no_class_value(tmp_path, rows_and_perm):
    rows, perm = rows_and_perm
    a = read_metrics([_write(tmp_path / "a.csv", rows)], BENCH).values()
    b = read_metrics([_write(tmp_path / "b.csv", perm)], BENCH).values()
    assert a == b


# -- properties of the verdict rule --------------------------------------------------------------

KEYS = st.lists(st.sampled_from(["n=1", "n=2", "n=3", "n=4"]), min_size=1, max_size=4, unique=True)


@st.composite
def _setting(draw):
    keys = draw(KEYS)
    target = draw(st.sampled_from([GLOBAL, *keys]))
    noise = draw(st.floats(0.1, 10.0))
    confirmations = draw(st.integers(1, 3))
    higher = draw(st.booleans())
    jitter = draw(st.sampled_from([0.0, 1e-4, 1e-3, 1e-2, 0.1]))
    leases = draw(st.integers(0, 4))
    hist = [[{k: 100.0 * f for k in keys} for f in (1.0, 1 + jitter, 1 - jitter)] for _ in range(leases)]
    return keys, target, Policy(noise_pct=noise, confirmations=confirmations), higher, hist


@settings(max_examples=300, deadline=None)
@given(_setting(), st.data())
def test_identical_best_and_candidate_never_improve(setting, data):
    keys, target, policy, higher, hist = setting
    n_rounds = data.draw(st.integers(1, 3))
    rounds = []
    for _ in range(n_rounds):
        v = {k: data.draw(METRIC) for k in keys}
        rounds.append(Round(best=v, candidate=dict(v)))
    assert decide(rounds, target, higher, policy, hist).outcome != "improved"


@settings(max_examples=400, deadline=None)
@given(_setting(), st.data())
def test_swapping_best_and_candidate_never_improves_again(setting, data):
    keys, target, policy, higher, hist = setting
    n_rounds = data.draw(st.integers(1, 3))
    factor = st.floats(0.5, 1.5) | st.floats(0.97, 1.03)
    rounds = []
    for _ in range(n_rounds):
        best = {k: data.draw(st.floats(1.0, 1e6)) for k in keys}
        rounds.append(Round(best=best, candidate={k: v * data.draw(factor) for k, v in best.items()}))
    d = decide(rounds, target, higher, policy, hist)
    swapped = [Round(best=r.candidate, candidate=r.best) for r in rounds]
    s = decide(swapped, target, higher, policy, hist)
    if d.outcome == "improved":
        assert s.outcome in ("regressed", "tie"), (d.reason, s.reason)
    assert not (d.outcome == "improved" and s.outcome == "improved")
    assert all(math.isfinite(x) for x in s.target_deltas_pct)


# -- a conflicting merge left in the workspace -----------------------------------------------------


def test_revert_after_a_conflicting_merge_archives_the_conflict_and_cleans_the_workspace(ref):
    """The agent merged a side branch into the workspace and left it conflicted (unmerged index,
    MERGE_HEAD, conflict markers in kernel.py): revert_to_best archives what was there and leaves
    a clean tree at BEST_COMMIT, no merge in progress."""
    ws = ref.where.workspace_path
    git = ["git", "-c", "user.name=agent", "-c", "user.email=agent@localhost"]
    best = ref.books.state.best.commit
    subprocess.run([*git, "checkout", "-q", "-b", "side"], cwd=ws, check=True)
    set_kernel(ws, {"1": 90.0, "2": 180.0})
    subprocess.run([*git, "commit", "-qam", "side"], cwd=ws, check=True)
    subprocess.run([*git, "checkout", "-q", "kernel-opt/t"], cwd=ws, check=True)
    set_kernel(ws, {"1": 70.0, "2": 140.0})
    subprocess.run([*git, "commit", "-qam", "mine"], cwd=ws, check=True)
    merge = subprocess.run([*git, "merge", "side"], cwd=ws, capture_output=True, text=True)
    assert merge.returncode != 0 and "CONFLICT" in merge.stdout
    conflicted = (ws / "kernel.py").read_text()
    assert "<<<<<<<" in conflicted

    r = ref.revert_to_best("drop the conflicted merge")
    assert r.archived_patch is not None and "kernel.py" in r.changed_files
    archived = Path(r.archived_patch).read_text()
    assert "<<<<<<<" in archived and "70.0" in archived  # what the workspace held is kept
    status = subprocess.run(["git", "status", "--porcelain"], cwd=ws, capture_output=True, text=True).stdout
    assert status == ""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ws, capture_output=True, text=True).stdout.strip()
    assert head == best and not (Path(ref.where.ws.git_dir) / "MERGE_HEAD").exists()
    assert ref.books.state.phase.value == "ready"
