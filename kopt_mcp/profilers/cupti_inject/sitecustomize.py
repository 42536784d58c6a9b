"""CUPTI kernel trace injected into a Python benchmark process, without editing the benchmark.

The CUPTI profiler backend puts this folder first on PYTHONPATH and sets KOPT_CUPTI_OUT; Python
imports `sitecustomize` at start-up (https://docs.python.org/3/library/site.html), so every Python
process of the benchmark command records CUPTI CONCURRENT_KERNEL activity (each kernel's GPU start
and end, ns) through cupti-python (`from cupti import cupti`; activity_register_callbacks,
activity_enable, activity_flush_all: https://docs.nvidia.com/cupti-python/) and, at exit, writes
one JSON file per process into KOPT_CUPTI_OUT:

    {"pid": int, "argv": [...], "status": "ok" | "error", "error": str | null,
     "kernels": {name: {"calls", "total_ns", "min_ns", "max_ns", "registers_per_thread",
                        "shared_mem_per_block_bytes", "block_size", "grid_size",
                        "durations_ns": [int, ...], "starts_ns": [int, ...]
                        (each launch's GPU time and start, by start; the first MAX_DURATIONS)}},
     "first_start_ns": int | null, "last_end_ns": int | null}

Registers, shared memory, block and grid size are the largest over a name's launches (one name
can be several compiled variants). Only the standard library and cupti are imported here; any
failure is written to that file, never raised into the benchmark. A `sitecustomize` further
along sys.path still runs (it is chained).
"""

import atexit
import importlib
import json
import os
import sys
import threading

_OUT = os.environ.get("KOPT_CUPTI_OUT", "")
MAX_DURATIONS = 20000  # per kernel name: enough for a paired per-launch test, bounded file size
_HERE = os.path.dirname(os.path.abspath(__file__))


def _chain_next_sitecustomize():
    """Import the sitecustomize this one shadows, if any (ours sits first on sys.path)."""
    saved_path, saved_mod = list(sys.path), sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    except Exception as exc:  # the shadowed file's own error: report it like Python would
        print(f"Error in sitecustomize (chained by kopt-mcp's CUPTI trace): {exc!r}", file=sys.stderr)
    finally:
        sys.path[:] = saved_path
        if saved_mod is not None:
            sys.modules["sitecustomize"] = saved_mod


class _Trace:
    def __init__(self):
        self.lock = threading.Lock()
        self.kernels = {}
        self.first = None
        self.last = None
        self.error = None

    def add(self, rec):
        start, end = int(rec.start), int(rec.end)
        dur = end - start
        name = str(rec.name)
        shape = {"registers_per_thread": _int(rec, "registers_per_thread"),
                 "shared_mem_per_block_bytes": (_int(rec, "static_shared_memory") or 0)
                 + (_int(rec, "dynamic_shared_memory") or 0),
                 "block_size": _prod(rec, ("block_x", "block_y", "block_z")),
                 "grid_size": _prod(rec, ("grid_x", "grid_y", "grid_z"))}
        with self.lock:
            k = self.kernels.get(name)
            if k is None:
                k = self.kernels[name] = {"calls": 0, "total_ns": 0, "min_ns": dur, "max_ns": dur, **shape,
                                          "launches": []}
            # one name can be several compiled variants (Triton specializes per constexpr block size):
            # keep the largest, as ncu's parser does (the variant that limits occupancy)
            for field, value in shape.items():
                if value is not None and (k[field] is None or value > k[field]):
                    k[field] = value
            k["calls"] += 1
            if len(k["launches"]) < MAX_DURATIONS:
                k["launches"].append((start, dur))
            k["total_ns"] += dur
            k["min_ns"] = min(k["min_ns"], dur)
            k["max_ns"] = max(k["max_ns"], dur)
            self.first = start if self.first is None else min(self.first, start)
            self.last = end if self.last is None else max(self.last, end)

    def write(self):
        for k in self.kernels.values():  # records arrive per buffer, not necessarily in launch order
            launches = sorted(k.pop("launches", []))
            k["durations_ns"] = [d for _, d in launches]
            k["starts_ns"] = [t for t, _ in launches]
        doc = {"pid": os.getpid(), "argv": list(sys.argv), "status": "error" if self.error else "ok",
               "error": self.error, "kernels": self.kernels, "first_start_ns": self.first,
               "last_end_ns": self.last}
        path = os.path.join(_OUT, f"cupti-{os.getpid()}.json")
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        os.replace(tmp, path)


def _int(rec, attr):
    try:
        return int(getattr(rec, attr))
    except Exception:
        return None


def _prod(rec, attrs):
    vals = [_int(rec, a) for a in attrs]
    if any(v is None for v in vals):
        return None
    return vals[0] * vals[1] * vals[2]


def _start():
    trace = _Trace()
    try:
        from cupti import cupti
    except Exception as exc:
        trace.error = (f"cupti-python is not importable by {sys.executable} ({exc!r}): "
                       "pip install cupti-python in the benchmark's environment")
        atexit.register(trace.write)
        return
    kernel_kind = cupti.ActivityKind.CONCURRENT_KERNEL

    def requested():
        return 8 * 1024 * 1024, 0

    def completed(activities):
        for rec in activities:
            if rec.kind == kernel_kind:
                trace.add(rec)

    def finish():
        try:
            cupti.activity_flush_all(1)
            cupti.activity_disable(kernel_kind)
        except Exception as exc:
            trace.error = f"CUPTI flush at exit failed: {exc!r}"
        trace.write()

    try:
        cupti.activity_register_callbacks(requested, completed)
        cupti.activity_enable(kernel_kind)
    except Exception as exc:
        trace.error = f"CUPTI activity tracing could not start: {exc!r}"
    # registered first, so it runs after the benchmark's own atexit handlers (LIFO order)
    atexit.register(finish)


if _OUT:
    _start()
_chain_next_sitecustomize()
