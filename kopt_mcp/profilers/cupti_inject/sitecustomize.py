"""CUPTI kernel trace injected into a Python benchmark process, without editing the benchmark.

The CUPTI profiler backend puts this folder first on PYTHONPATH; Python imports `sitecustomize`
at start-up (https://docs.python.org/3/library/site.html), so every Python process of the
benchmark command records CUPTI CONCURRENT_KERNEL activity (each kernel's GPU start and end, ns)
through cupti-python (`from cupti import cupti`; activity_register_callbacks, activity_enable,
activity_flush_all: https://docs.nvidia.com/cupti-python/).

Stream mode (KOPT_CUPTI_SOCK, what `CuptiProfiler.wrap` sets): the launches are sent as CUPTI
delivers them to the collector, kopt_mcp/profilers/cupti_collect.py, the parent of the benchmark
command, over a unix SOCK_SEQPACKET socket (messages: hello, rows, end with the count sent); the
collector, out of the benchmark's reach, writes the file below. File mode (KOPT_CUPTI_OUT): this
process writes it at exit into KOPT_CUPTI_OUT, where code in the benchmark could rewrite it. The
per-process file (kopt_cupti_trace.Trace.doc):

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
group. Format 1 (before "format") had "durations_ns"/"starts_ns" per name and no groups. The
collector adds "transport": "stream", "sent" and "closed".
Registers, shared memory, block and grid size are the largest over a name's launches (one name
can be several compiled variants). Only the standard library and cupti are imported here; any
failure is written to that file, never raised into the benchmark. A `sitecustomize` further
along sys.path still runs (it is chained).
"""

import atexit
import importlib
import importlib.util
import json
import os
import socket
import sys
import threading

_OUT = os.environ.get("KOPT_CUPTI_OUT", "")
_SOCK = os.environ.get("KOPT_CUPTI_SOCK", "")
_HERE = os.path.dirname(os.path.abspath(__file__))
MAX_MESSAGE = 48 * 1024  # bytes per streamed message (a SOCK_SEQPACKET message is delivered whole)


def _chain_next_sitecustomize():
    """Import the sitecustomize this one shadows, if any (ours sits first on sys.path)."""
    saved_path, saved_mod = list(sys.path), sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
        importlib.import_module("sitecustomize")
    except ImportError:
        pass
    except Exception as exc:  # noqa: BLE001 - the shadowed file's own error: report it like Python would
        print(f"Error in sitecustomize (chained by kopt-mcp's CUPTI trace): {exc!r}", file=sys.stderr)
    finally:
        sys.path[:] = saved_path
        if saved_mod is not None:
            sys.modules["sitecustomize"] = saved_mod


def _load_trace_module():
    """kopt_cupti_trace from this folder, whatever sys.path holds."""
    spec = importlib.util.spec_from_file_location("kopt_cupti_trace", os.path.join(_HERE, "kopt_cupti_trace.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _FileSink:
    """File mode: the whole trace written at exit to KOPT_CUPTI_OUT/cupti-<pid>.json."""

    def __init__(self, trace):
        self.trace = trace

    def launches(self, recs):
        for rec in recs:
            self.trace.add(rec)

    def close(self, error):
        self.trace.error = self.trace.error or error
        path = os.path.join(_OUT, f"cupti-{os.getpid()}.json")
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.trace.doc(), f)
        os.replace(tmp, path)


class _StreamSink:
    """Stream mode: each buffer's launches sent, as they complete, to the collector (the parent of
    the benchmark command) over the unix socket KOPT_CUPTI_SOCK; the collector writes the file. A
    trace without its closing message (os._exit, a crash) is not counted there."""

    def __init__(self, trace_mod):
        self.row_of = trace_mod.row_of
        self.lock = threading.Lock()
        self.sent = 0
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock.connect(_SOCK)
        self._send({"t": "hello", "argv": list(sys.argv)})

    def _send(self, msg):
        self.sock.send(json.dumps(msg, separators=(",", ":")).encode())

    def launches(self, recs):
        rows = [self.row_of(r) for r in recs]
        with self.lock:
            batch, size = [], 0
            for row in rows:
                n = len(row[0]) + 160
                if batch and size + n > MAX_MESSAGE:
                    self._send({"t": "rows", "rows": batch})
                    batch, size = [], 0
                batch.append(row)
                size += n
            if batch:
                self._send({"t": "rows", "rows": batch})
            self.sent += len(rows)

    def close(self, error):
        with self.lock:
            self._send({"t": "end", "sent": self.sent, "error": error})
            self.sock.close()


def _start():
    trace_mod = _load_trace_module()
    try:
        sink = _StreamSink(trace_mod) if _SOCK else _FileSink(trace_mod.Trace())
    except OSError as exc:  # no collector listening: nothing can be reported, the collector says so
        print(f"kopt-mcp CUPTI trace: cannot reach the collector at {_SOCK} ({exc!r})", file=sys.stderr)
        return
    state = {"error": None}
    try:
        from cupti import cupti
    except Exception as exc:  # noqa: BLE001 - never raise into the benchmark
        state["error"] = (f"cupti-python is not importable by {sys.executable} ({exc!r}): "
                          "pip install cupti-python in the benchmark's environment")
        atexit.register(lambda: sink.close(state["error"]))
        return
    kernel_kind = cupti.ActivityKind.CONCURRENT_KERNEL

    def requested():
        return 8 * 1024 * 1024, 0

    def completed(activities):
        sink.launches([rec for rec in activities if rec.kind == kernel_kind])

    def finish():
        try:
            cupti.activity_flush_all(1)
            cupti.activity_disable(kernel_kind)
        except Exception as exc:  # noqa: BLE001 - never raise into the benchmark
            state["error"] = f"CUPTI flush at exit failed: {exc!r}"
        sink.close(state["error"])

    try:
        cupti.activity_register_callbacks(requested, completed)
        cupti.activity_enable(kernel_kind)
    except Exception as exc:  # noqa: BLE001 - never raise into the benchmark
        state["error"] = f"CUPTI activity tracing could not start: {exc!r}"
    # registered first, so it runs after the benchmark's own atexit handlers (LIFO order)
    atexit.register(finish)


if _OUT or _SOCK:
    _start()
_chain_next_sitecustomize()
