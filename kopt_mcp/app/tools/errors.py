"""The one place where exceptions become MCP tool errors (`isError: true` with a text that says what
to do next). Used by `tools._adapter.call` and by every registered tool (see `_adapter.tool`).

- KoptError (and ValueError): its own message, which already names the next step.
- git.GitCommandError: "git failed: <first stderr line>" + what to check (a stale index.lock, ...).
- OSError: what failed on which path + what to check (disk full, read-only, permissions).
- anything else: "internal error" + call `status`; the traceback goes to the server's log only.

Every text is bounded (MAX_CHARS), so an argument echoed inside a message cannot flood the client.
"""

from __future__ import annotations

import errno
import logging
import re
from pathlib import Path

import git
from mcp.server.mcpserver.exceptions import ToolError

from kopt_mcp.errors import KoptError

MAX_CHARS = 2000
log = logging.getLogger("kopt_mcp.app.tools")


def bounded(text: str, limit: int = MAX_CHARS) -> str:
    """`text` cut to `limit` characters, with a marker saying how much was left out."""
    if len(text) <= limit:
        return text
    return text[: limit - 60] + f" ... [{len(text) - limit + 60} characters left out]"


def _first_line(text: str) -> str:
    for line in (text or "").splitlines():
        line = line.strip().removeprefix("stderr:").strip().strip("'").strip()
        if line:
            return line
    return ""


def git_message(e: git.GitCommandError, repo: Path | None) -> str:
    """Text for a failed git command: its first stderr line and what to check."""
    cmd = e.command if isinstance(e.command, str) else " ".join(str(c) for c in (e.command or [])[:3])
    first = _first_line(str(e.stderr)) or f"exit status {e.status}"
    named = re.search(r"'([^']+\.lock)'", str(e.stderr))
    lock = named.group(1) if named else f"{repo}/.git/index.lock" if repo else "the repository's .git/index.lock"
    hint = (f"check that no other git process holds {lock} (or another *.lock under .git); if none runs, "
            "delete the lock file and call again")
    if "index.lock" not in first and "lock" not in first.lower():
        hint = (f"fix the repository state git complains about (try `git -C {repo or '<repo>'} status`), or "
                "call status to see where the session stands; " + hint)
    return f"git failed: {first} (in `{cmd}`); {hint}"


def os_message(e: OSError) -> str:
    """Text for a failed file or process operation: what failed, on which path, what to check."""
    path = " -> ".join(str(p) for p in (e.filename, e.filename2) if p) or "(no path)"
    why = e.strerror or str(e) or type(e).__name__
    advice = {
        errno.ENOSPC: "the disk is full: free space on that filesystem, then call again",
        errno.EDQUOT: "the disk quota is exceeded: free space, then call again",
        errno.EROFS: "the filesystem is read-only: serve from a writable checkout",
        errno.EACCES: "permission denied: make the path writable for the user running kopt-mcp",
        errno.EPERM: "operation not permitted: check the path's owner and permissions",
        errno.ENOENT: "a file or folder is missing: call status (the session may need revert_to_best)",
        errno.EMFILE: "too many open files: raise `ulimit -n` for the server, then restart it",
    }.get(e.errno or -1, "check the path, free disk space and permissions, then call status")
    return f"{type(e).__name__} on {path}: {why}; {advice}"


def error_text(e: BaseException, repo: Path | None = None, tool: str = "") -> str:
    """What the client reads for `e` (bounded); unexpected errors are logged here with their traceback."""
    if isinstance(e, (KoptError, ValueError, ToolError)):
        text = str(e)
    elif isinstance(e, git.GitCommandError):
        text = git_message(e, repo)
    elif isinstance(e, OSError):
        text = os_message(e)
    else:
        log.error("%s raised an unexpected error", tool or "kopt-mcp", exc_info=e)
        first = _first_line(str(e))
        text = (f"internal error in {tool or 'kopt-mcp'} ({type(e).__name__}{': ' + first if first else ''}); "
                "call status to see where the session stands, and report this with the server's log")
    return bounded(text)


def to_tool_error(e: BaseException, repo: Path | None = None, tool: str = "") -> ToolError:
    """The ToolError the client sees for `e` (raise it `from e`)."""
    return ToolError(error_text(e, repo, tool))
