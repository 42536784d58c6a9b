"""kopt-mcp's exception tree: one root, `KoptError`, and four families by who must act.

Every message says what to do next. The MCP layer turns them into tool errors in one place
(`kopt_mcp.tools.errors.to_tool_error`); the CLI prints them to stderr.

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
    same repository). The server still answers the protocol; every tool returns this message."""
