"""kopt-mcp's exception tree: one root, `KoptError`, and four families by who must act.

Every message says what to do next. The MCP layer turns them into tool errors in one place
(`kopt_mcp.app.tools.errors.to_tool_error`); the CLI prints them to stderr.

    KoptError
      SetupError        a person must fix the repository, the config or the machine
                        (ConfigError, VcsError, ProbeError, StartupError)
      StateError        the call does not fit the session's state; the agent acts
                        (SessionError, RefereeError, Cancelled)
      MeasurementError  a run, a metrics file or a profiler failed (MetricsError, ProfilerError)
      InputError        a tool argument does not fit (VerdictError, KnowledgeError)

The concrete classes live next to the code that raises them and keep their older second base
(ValueError / RuntimeError), so existing `except ValueError` sites still catch them.
"""

from __future__ import annotations


class KoptError(Exception):
    """Root of every error kopt-mcp raises on purpose; the message says what to do next."""


class SetupError(KoptError):
    """The repository, the config or the machine needs a person's fix before the session can go on."""


class StateError(KoptError):
    """The call does not fit the session's current state (phase, pending candidate, stop)."""


class MeasurementError(KoptError):
    """A benchmark run, its metrics file or the profiler failed in a way the caller must look at."""


class InputError(KoptError):
    """A tool argument does not fit (unknown class, unknown bottleneck, out of range)."""


class StartupError(SetupError):
    """The server could not open its session (bad repository, bad config, a second server on the
    same repository). The server still answers the protocol: `status` returns phase `unconfigured`
    with this message and `fix` (what to do so the session opens), every other tool this message."""

    def __init__(self, message: str = "", fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix


# -- the concrete classes, by family (raised where the module named in each docstring works) --


class ProfilerError(MeasurementError, RuntimeError):
    """The profiler's output could not be read; the message names the file and what was missing."""


class VcsError(SetupError, RuntimeError):
    """A git operation was refused or failed; the message says what to do next."""


class ConfigError(SetupError, ValueError):
    """The config could not be used; the message says what is wrong and what to write instead."""


class DeviceLost(MeasurementError, RuntimeError):
    """The lease's device or node went away during a run (a Ray node died, a GPU fell off the bus).
    The referee retries the measuring call once on a new lease, then rules it `failed`."""


class MetricsError(MeasurementError, ValueError):
    """The metrics file is missing, stale or unusable; the message names the cause and the fix."""


class MissingResults(MetricsError):
    """The run wrote no result file where [benchmark] csv says (format stdout: it left no log)."""


class StaleResults(MetricsError):
    """Every result file predates the run: left from an earlier run or shipped in the tree."""


class ReaderError(SetupError, ValueError):
    """The content could not be read in the configured format; the message says what to change."""


class InitError(SetupError, RuntimeError):
    """init could not propose a config; the message says what to pass or fix."""


class PreflightError(SetupError, RuntimeError):
    """A command of the config cannot start on this machine (its program, a file it names, or the
    test runner is missing: kopt_mcp/bench/preflight.py); the message says what to install or fix."""


class RefereeError(StateError, RuntimeError):
    """An operation cannot proceed; the message says what the caller should do next."""


class StateSaveError(RefereeError):
    """state.json could not be written (disk full, read-only): nothing changed in memory."""


class Cancelled(StateError, RuntimeError):
    """The client cancelled the call: the running process tree was killed, the lease released and
    the session left as it was before the call (an archived patch is kept, labelled `cancelled`)."""


class Tampered(KoptError):
    """A run changed a protected file in its checkout, or the workspace outside it: the attempt is
    `rejected` with this message (which names the files)."""


class VerdictError(InputError, ValueError):
    """The target or the rounds do not fit the measured classes."""


class KnowledgeError(InputError, ValueError):
    """A knowledge or skill file that does not parse, or a request that cannot be answered."""


class SessionError(StateError, RuntimeError):
    """A tool was called in a phase that does not allow it; the message says what to call instead."""


class ShipError(MeasurementError, RuntimeError):
    """A snapshot could not be shipped or rebuilt on the node; the message says which and why."""


class SnapshotMissing(ShipError):
    """The node does not hold the snapshot (not shipped, or its damaged store was dropped): ship it again."""


class LedgerEventError(KoptError, ValueError):
    """A ledger record does not fit its event model (unknown kind, wrong field type, unknown or
    missing field): a bug in the code that writes it. The message names the kind and the field."""


class ProbeError(SetupError, RuntimeError):
    """A probe could not read the GPUs; the message names the source and what was missing."""


class TokenError(SetupError):
    """A token or host setting the server must not start with (the CLI exits 2 with this text)."""
