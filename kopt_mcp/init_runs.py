"""What `kopt-mcp init` measured, kept for the baseline (issue 35 item 4: the first verdict soon).

Init runs the benchmark (twice) and the correctness command once on the unmodified tree; the
baseline then ran the same benchmark `[gates] baseline_runs` times and the tests again on the same
tree (Liger RMSNorm on an H200: 239 s of init, 161 s more of baseline). Now init writes an
`InitRecord` into `<git-common-dir>/kopt/init/runs.json` (atomic; kopt's process writes it after
the runs ended, out of every tree a benchmark runs in): each run's result files as kopt read them
(content before and after the run), its log and wall time (s), the correctness command's outcome,
and the identity of what ran: the working tree as a git tree object (tracked and untracked files,
ignored ones left out, the config file left out: `worktree_identity`), the command, the sha256 of
the kopt.toml text init proposed, the interpreter the command resolves to (path, version) and the
host.

The baseline adopts those runs as its first rounds only where `why_not` finds nothing: the same tree,
command, config hash, interpreter and host, and a record younger than MAX_AGE_S. The results are
re-read from the record's copies with the session's own reader (referee/baseline_adopt.py); nothing a
benchmark process wrote decides it. Anything else is measured as before, with the reason.
"""

from __future__ import annotations

import hashlib
import socket
import time
from pathlib import Path

import git
from pydantic import BaseModel, ConfigDict, ValidationError

from kopt_mcp.ledger import atomic_write
from kopt_mcp.paths import kopt_dir
from kopt_mcp.vcs import snapshot, temp_index

#: how old (s) init's runs may be for the baseline to adopt them: the machine, its load and its
#: installed packages drift; a later session measures afresh
MAX_AGE_S = 6 * 3600.0
#: a record whose copies (result files and logs) pass this many bytes is not written
MAX_BYTES = 16 << 20
RECORD_VERSION = 1


class InitRun(BaseModel):
    """One benchmark run of init: repo path -> (content before this run or None, after), the run's
    log (bytes), its wall time (s) and start (epoch s); `profiler`: the profiler it ran under ('': a
    plain run; init runs its last run under CUPTI, whose runs are script-metric runs) and `trace` the
    profiler's output files of that run (file name -> content; empty where its trace was not read or
    the record would pass MAX_BYTES with it): the baseline parses them as one of its profiled runs."""

    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")

    files: dict[str, tuple[bytes | None, bytes]]
    log: bytes = b""
    seconds: float
    started_at: float = 0.0
    profiler: str = ""
    trace: dict[str, bytes] = {}


class InitTests(BaseModel):
    """The correctness command init proposed, and whether init's run of it on this tree passed
    (exit 0, nothing dropped); `seconds`: that run's wall time; `summary`: pytest's last line."""

    command: str
    passed: bool
    seconds: float = 0.0
    summary: str = ""
    runs: int = 0  # how many times init ran it (narrowing the selection)
    #: '' where init ran `command` as written; else how one wider run stood for it (correctness.Checked.within)
    within: str = ""


class InitRecord(BaseModel):
    """What init ran and on what (module docstring). `tree`: `worktree_identity` before the runs;
    `config_path`: the repo-relative config file left out of it; `interpreter`: (sys.executable,
    version) or None where it did not start; `written_at`: epoch s."""

    model_config = ConfigDict(ser_json_bytes="base64", val_json_bytes="base64")

    version: int = RECORD_VERSION
    written_at: float
    tree: str
    config_path: str = "kopt.toml"
    command: str
    config_sha256: str
    interpreter: tuple[str, str] | None
    host: str
    #: the names of the GPUs init's probe saw (its runs used the default one); [] on a host without
    gpus: list[str] = []
    #: their UUIDs, in the same order ([] in records written before them): which machine ran init, beyond
    #: its host name (a container rescheduled onto another node, or a folder copied to another machine,
    #: keeps the name)
    gpu_uuids: list[str] = []
    runs: list[InitRun]
    tests: InitTests | None = None


def where(repo: Path | git.Repo) -> Path:
    """The record's file: `<git-common-dir>/kopt/init/runs.json`. Raises git errors outside a checkout."""
    return kopt_dir(repo) / "init" / "runs.json"


def config_sha256(text: str) -> str:
    """sha256 (hex) of a kopt.toml text as written (UTF-8): what config.load_config hashes."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def host() -> str:
    """This machine's host name."""
    return socket.gethostname()


def tree_without(repo: git.Repo, tree: str, paths: list[str]) -> str:
    """Tree object `tree` with `paths` (repo-relative) left out, as a tree id (a temporary index,
    vcs.temp_index; the real one untouched). Raises git.GitCommandError for an unknown tree."""
    with temp_index() as env:
        repo.git.read_tree(tree, env=env)
        if paths:
            repo.git.rm("--cached", "-q", "--ignore-unmatch", "--", *paths, env=env)
        return repo.git.write_tree(env=env).strip()


def worktree_identity(repo: Path, config_path: str = "kopt.toml") -> str | None:
    """The working tree of `repo` as a git tree id: tracked and untracked files, ignored ones left
    out (vcs.snapshot), the config file `config_path` left out (init writes it; its content is
    compared by hash). None outside a git checkout or where git fails."""
    try:
        r = git.Repo(repo, search_parent_directories=True)
        return tree_without(r, snapshot(r).tree, [config_path])
    except (git.InvalidGitRepositoryError, git.NoSuchPathError, git.GitCommandError, ValueError):
        return None


def save(repo: Path, record: InitRecord) -> Path | None:
    """Write `record` atomically to `where(repo)`; the path, or None where it is over MAX_BYTES or
    cannot be written (a proposal never fails for it). Traces go first where the record would pass
    MAX_BYTES with them: the runs stand without them."""
    size = sum(len(a) + len(b or b"") for r in record.runs for b, a in r.files.values()) + sum(
        len(r.log) for r in record.runs)
    if size + sum(len(c) for r in record.runs for c in r.trace.values()) > MAX_BYTES:
        record = record.model_copy(update={"runs": [r.model_copy(update={"trace": {}}) for r in record.runs]})
    try:
        dest = where(repo)
        if size > MAX_BYTES:
            dest.unlink(missing_ok=True)  # an older record must not stand for this init
            return None
        atomic_write(dest, record.model_dump_json() + "\n")
        return dest
    except (OSError, git.InvalidGitRepositoryError, git.NoSuchPathError):
        return None


def load(repo: Path | git.Repo) -> tuple[InitRecord | None, str]:
    """The record and '', or None and why there is none (no init ran here, unreadable, another version)."""
    try:
        p = where(repo)
        raw = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, "no runs of `kopt-mcp init` recorded for this repository"
    except (OSError, git.InvalidGitRepositoryError, git.NoSuchPathError) as e:
        return None, f"init's record could not be read ({e})"
    try:
        rec = InitRecord.model_validate_json(raw)
    except (ValidationError, ValueError):
        return None, f"init's record {p} is not readable by this kopt-mcp version"
    return rec, ""


def why_not(rec: InitRecord, *, tree: str | None, command: str, config_sha: str,
            interpreter: tuple[str, str] | None, here: str, device: str | None = None, now: float | None = None,
            max_age_s: float = MAX_AGE_S, device_uuid: str | None = None) -> tuple[str, str]:
    """Why init's runs in `rec` cannot stand for the baseline's first rounds: (code, text), or
    ('', '') where they can: the same tree (`worktree_identity` of BEST), command, config hash,
    interpreter (path, version) and host (`here`); on a GPU (`device`: the leased GPU's name, None
    for the CPU) every GPU init saw of that name (its runs used the default one), and the leased
    GPU (`device_uuid`, its UUID; None: not known) one of them where the record has their UUIDs; at
    most `max_age_s` seconds old (`now`: epoch s). Codes: version, no_runs, tree_changed,
    command_changed, config_changed, interpreter_changed, other_host, other_device, other_machine,
    too_old. Pure."""
    age = (time.time() if now is None else now) - rec.written_at
    checks = [
        (rec.version == RECORD_VERSION, "version", "init's record is of another kopt-mcp version"),
        (bool(rec.runs), "no_runs", "init ran no benchmark run"),
        (tree is not None and rec.tree == tree, "tree_changed", "the tree changed since init ran (BEST_COMMIT's "
         "files, the config file left out, differ from the tree init measured)"),
        (rec.command == command, "command_changed", "[benchmark] command differs from the one init ran"),
        (rec.config_sha256 == config_sha, "config_changed", "the config changed since init proposed it (its sha256 "
         "differs)"),
        (interpreter is not None and rec.interpreter == interpreter, "interpreter_changed",
         f"the interpreter differs from init's ({_interp(rec.interpreter)} then, {_interp(interpreter)} now)"),
        (rec.host == here, "other_host", f"init ran on another host ({rec.host})"),
        (device is None or (bool(rec.gpus) and set(rec.gpus) == {device}), "other_device",
         f"the leased GPU ({device}) may not be the one init's runs used (init saw {', '.join(rec.gpus) or 'none'})"),
        (device_uuid is None or not rec.gpu_uuids or device_uuid in rec.gpu_uuids, "other_machine",
         f"the leased GPU ({device_uuid}) is none of the GPUs init saw: its runs were measured on another machine "
         f"of the same host name"),
        (0 <= age <= max_age_s, "too_old", f"init's runs are {age / 3600:.1f} h old (adopted up to "
         f"{max_age_s / 3600:g} h)"),
    ]
    return next(((code, why) for ok, code, why in checks if not ok), ("", ""))


def _interp(found: tuple[str, str] | None) -> str:
    return f"{found[0]} {found[1]}" if found else "none"
