"""Harness units in an Nsight Compute log: each profiled launch's NVTX push/pop range names the unit
and the invocation it ran in ("kopt/u<unit>/i<invocation>", opened by the injector's NVTX mode:
cupti_inject/sitecustomize.py), so the confirming run measures per config even where every config
launches the target with one grid (a persistent kernel on one program per SM).

ncu (2025.3, `--nvtx`, raw page) writes the ranges in the column "thread Domain:Push/Pop_Range:PL_Type:
PL_Value:CLR_Type:Color:Msg_Type:Msg", e.g. `579  "<default domain>:kopt/u3/i2:none:none:none:none:none:none"`
(recorded: tests/fixtures/ncu/nvtx_units_raw.csv).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from kopt_mcp.evidence.units import HarnessUnit

__all__ = ["NVTX_INCLUDE", "nvtx_units"]

#: ncu's `--nvtx-include` filter that selects the launches inside the ranges the injector opens
#: ("kopt/u<unit>/i<invocation>", cupti_inject/kopt_nvtx.py)
NVTX_INCLUDE = "regex:kopt/"
_MARK = re.compile(r"kopt/u(\d+)/i(\d+)")
_COLUMN = "Push/Pop_Range"


def nvtx_units(rows: Sequence[tuple[str, dict[str, tuple[str, str]]]], time_us: Callable[[int], float | None]
               ) -> list[HarnessUnit] | None:
    """The harness units of ncu's launches: `rows` are (kernel name, {column: (unit, text)}) in ncu's
    row order, `time_us(i)` the GPU time (us) of row i (None: untimed, skipped). Unit k of the injector
    (1-based) becomes HarnessUnit index k-1, so it pairs with unit k-1 of the CUPTI trace;
    `per_invocation[kernel][i]` sums the kernel's launches in invocation i. None where no launch carries
    a mark (ncu ran without `--nvtx`, or the harness has no marked timer). Never raises."""
    units: dict[int, HarnessUnit] = {}
    for i, (name, columns) in enumerate(rows):
        text = next((v for h, (_, v) in columns.items() if _COLUMN in h), "")
        marks = _MARK.findall(text)
        us = time_us(i)
        if not marks or us is None:
            continue
        k, inv = (int(x) for x in marks[-1])  # the innermost of nested marks
        unit = units.setdefault(k, HarnessUnit(index=k - 1, harness="nvtx", source="marked"))
        unit.invocations = max(unit.invocations, inv + 1)
        per = unit.per_invocation.setdefault(name, {})
        per[inv] = per.get(inv, 0.0) + us
        n = unit.launches.setdefault(name, {})
        n[inv] = n.get(inv, 0) + 1
    return [units[k] for k in sorted(units)] or None
