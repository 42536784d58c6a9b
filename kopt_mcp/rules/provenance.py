"""Compiled-code provenance (pure): did the candidate's target kernels run as BEST's did?

The CUPTI trace records, per kernel name, the SHA-256 of every loaded module (cubin) that defines
it (KernelTrace.code), and each launch's configuration (grid, block, shared memory: the launch
groups). When the target kernels compiled byte-identically and launched with the same
configurations, a GPU-time "win" in them did not come from the kernel: it is not `improved`
unless the out-of-process confirmation measures it too (a change of arguments or data layout
can still be real). A launch-only change (a new grid, more programs per SM) is judged as usual.
Sources of the idea: KernelAgent's PTX fingerprint; KernelForge's "a win that does not change the
ISA is noise".
"""

from __future__ import annotations

import re

from pydantic import BaseModel

from kopt_mcp.evidence.trace import KernelTrace


class Fingerprint(BaseModel):
    """What the target kernels ran as in one run: kernel name -> sorted module hashes, and the set of
    launch configurations (kernel, grid, block, shared memory bytes) as sorted strings."""

    code: dict[str, list[str]]
    launches: list[str]


def fingerprint(trace: KernelTrace, kernel_regex: str) -> Fingerprint | None:
    """The target kernels' fingerprint in `trace`, or None where the trace recorded no code for
    them (an older injector, provenance off, a backend without module records). Never raises for
    data; re.error for a bad regex."""
    target = re.compile(kernel_regex)
    code = {k: sorted(v) for k, v in (trace.code or {}).items() if target.search(k)}
    if not code:
        return None
    launches = sorted({f"{g.kernel}|{g.grid}|{g.block}|{g.shared_mem_bytes}" for g in trace.groups or []
                       if target.search(g.kernel)})
    return Fingerprint(code=code, launches=launches)


def unchanged(best: Fingerprint | None, candidate: Fingerprint | None) -> bool:
    """True only when both are known and equal: same compiled modules, same launch configurations."""
    return best is not None and candidate is not None and best == candidate


__all__ = ["Fingerprint", "fingerprint", "unchanged"]
