"""CUPTI kernel trace injected into a Python benchmark process, without editing the benchmark.

The CUPTI profiler backend puts this folder first on PYTHONPATH and sets KOPT_CUPTI_OUT; Python
imports `sitecustomize` at start-up (https://docs.python.org/3/library/site.html), so every Python
process of the benchmark command records CUPTI CONCURRENT_KERNEL activity (each kernel's GPU start
and end, ns) through cupti-python (`from cupti import cupti`; activity_register_callbacks,
activity_enable, activity_flush_all: https://docs.nvidia.com/cupti-python/) and, at exit, writes
one JSON file per process into KOPT_CUPTI_OUT:

    {"format": 2, "pid": int, "argv": [...], "status": "ok" | "error", "error": str | null,
     "records": int (kernel activity records received),
     "kernels": {name: {"calls", "total_ns", "min_ns", "max_ns", "registers_per_thread",
                        "shared_mem_per_block_bytes", "block_size", "grid_size",
                        "groups": [{"grid": [x, y, z], "block": [x, y, z], "registers_per_thread",
                                    "shared_mem_bytes", "calls", "total_ns",
                                    "durations_ns": [int, ...], "starts_ns": [int, ...]}]}},
     "first_start_ns": int | null, "last_end_ns": int | null}

A group is one launch shape (grid and block dimensions) of one kernel name; its durations_ns and
starts_ns are each launch's GPU time and start, by start, the first MAX_DURATIONS launches of the
group. Format 1 (before "format") had "durations_ns"/"starts_ns" per name and no groups.
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
        self.records = 0

    def add(self, rec):
        start, end = int(rec.start), int(rec.end)
        dur = end - start
        name = str(rec.name)
        grid = _dims(rec, ("grid_x", "grid_y", "grid_z"))
        block = _dims(rec, ("block_x", "block_y", "block_z"))
        shape = {"registers_per_thread": _int(rec, "registers_per_thread"),
                 "shared_mem_per_block_bytes": (_int(rec, "static_shared_memory") or 0)
                 + (_int(rec, "dynamic_shared_memory") or 0),
                 "block_size": None if block is None else block[0] * block[1] * block[2],
                 "grid_size": None if grid is None else grid[0] * grid[1] * grid[2]}
        with self.lock:
            self.records += 1
            k = self.kernels.get(name)
            if k is None:
                k = self.kernels[name] = {"calls": 0, "total_ns": 0, "min_ns": dur, "max_ns": dur, **shape,
                                          "groups": {}}
            g = k["groups"].get((grid, block))
            if g is None:
                g = k["groups"][(grid, block)] = {
                    "grid": grid, "block": block, "registers_per_thread": shape["registers_per_thread"],
                    "shared_mem_bytes": shape["shared_mem_per_block_bytes"], "calls": 0, "total_ns": 0,
                    "launches": []}
            g["calls"] += 1
            g["total_ns"] += dur
            if len(g["launches"]) < MAX_DURATIONS:
                g["launches"].append((start, dur))
            for field, gfield in (("registers_per_thread", "registers_per_thread"),
                                  ("shared_mem_per_block_bytes", "shared_mem_bytes")):
                if shape[field] is not None and (g[gfield] is None or shape[field] > g[gfield]):
                    g[gfield] = shape[field]
            # one name can be several compiled variants (Triton specializes per constexpr block size):
            # keep the largest, as ncu's parser does (the variant that limits occupancy)
            for field, value in shape.items():
                if value is not None and (k[field] is None or value > k[field]):
                    k[field] = value
            k["calls"] += 1
            k["total_ns"] += dur
            k["min_ns"] = min(k["min_ns"], dur)
            k["max_ns"] = max(k["max_ns"], dur)
            self.first = start if self.first is None else min(self.first, start)
            self.last = end if self.last is None else max(self.last, end)

    def write(self):
        kernels = {}
        for name, k in self.kernels.items():
            groups = []
            for g in k["groups"].values():  # records arrive per buffer, not necessarily in launch order
                launches = sorted(g["launches"])
                groups.append({**{f: v for f, v in g.items() if f != "launches"},
                               "durations_ns": [d for _, d in launches], "starts_ns": [t for t, _ in launches]})
            groups.sort(key=lambda g: g["starts_ns"][0] if g["starts_ns"] else 0)
            kernels[name] = {**{f: v for f, v in k.items() if f != "groups"}, "groups": groups}
        doc = {"format": 2, "pid": os.getpid(), "argv": list(sys.argv), "status": "error" if self.error else "ok",
               "error": self.error, "records": self.records, "kernels": kernels, "first_start_ns": self.first,
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


def _dims(rec, attrs):
    vals = tuple(_int(rec, a) for a in attrs)
    return None if any(v is None for v in vals) else vals


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
