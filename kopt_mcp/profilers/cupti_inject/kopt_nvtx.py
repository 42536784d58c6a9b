"""NVTX mode of the injector (standard library only; loaded by sitecustomize.py when KOPT_NVTX_UNITS is set
and no CUPTI trace is asked for): the harness units of kopt_units.py, marked as NVTX push/pop ranges for
Nsight Compute's confirming run (kopt_mcp/profilers/confirm.py ConfirmNcu by unit). No CUPTI, nothing
written: the timing stays ncu's; the ranges only say which unit and invocation each launch belonged to.
"""

import sys


def start(setting, units_mod):
    """`setting`: "first,count" (KOPT_NVTX_UNITS): invocations first..first+count-1 of each harness unit
    run inside the NVTX range "kopt/u<unit>/i<invocation>" (torch.cuda.nvtx: the harness has imported torch
    by the time it times anything). `units_mod`: kopt_units.py. Raises ValueError for a bad setting."""
    first, count = (int(x) for x in setting.split(","))
    low = (1 << units_mod.INV_BITS) - 1

    def push(ext):
        sys.modules["torch"].cuda.nvtx.range_push(f"kopt/u{ext >> units_mod.INV_BITS}/i{ext & low}")

    def pop():
        sys.modules["torch"].cuda.nvtx.range_pop()

    units_mod.install(units_mod.Units(push, pop, lambda msg: None, marked=range(first, first + count)))
