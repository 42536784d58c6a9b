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


def _load(name):
    """Module `name` from this folder (kopt_cupti_trace, kopt_units), whatever sys.path holds."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(_HERE, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class _FileSink:
    """File mode: the whole trace written at exit to KOPT_CUPTI_OUT/cupti-<pid>.json."""

    def __init__(self, trace_mod):
        self.trace_mod, self.trace = trace_mod, trace_mod.Trace()

    def launches(self, recs, hosts=None):
        for rec in recs:
            row = self.trace_mod.row_of(rec)
            self.trace.add_row(row + [hosts.get(row[7]) if hosts else None])

    def ext(self, pairs):
        self.trace.add_ext(pairs)

    def unit(self, msg):
        self.trace.add_unit(msg)

    def code(self, name, shas):
        self.trace.add_code(name, shas)

    def note(self, text):
        self.trace.add_note(text)

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

    def launches(self, recs, hosts=None):
        rows = [self.row_of(r) for r in recs]
        if hosts:
            rows = [row + [hosts.get(row[7])] for row in rows]
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

    def ext(self, pairs):
        with self.lock:
            for i in range(0, len(pairs), 2000):
                self._send({"t": "ext", "pairs": pairs[i:i + 2000]})

    def unit(self, msg):
        windows = msg.get("windows") or []
        with self.lock:  # a message is delivered whole and must stay small: the windows go in chunks
            for i in range(0, len(windows), 1000):
                self._send({"t": "windows", "k": msg["k"], "w": windows[i:i + 1000]})
            self._send({"t": "unit", **{k: v for k, v in msg.items() if k != "windows"}})

    def code(self, name, shas):
        with self.lock:
            self._send({"t": "code", "name": name, "shas": list(shas)})

    def note(self, text):
        with self.lock:
            self._send({"t": "note", "text": str(text)[:300]})

    def close(self, error):
        with self.lock:
            self._send({"t": "end", "sent": self.sent, "error": error})
            self.sock.close()


#: cubins up to this size are kept to find the kernel names they define (compiled-code provenance)
MAX_CUBIN = 16 * 1024 * 1024


class _Code:
    """Compiled-code provenance: the SHA-256 of each loaded module's cubin (CUPTI MODULE activity),
    and for each kernel name launched, the hashes of the modules whose cubin holds that name."""

    def __init__(self, sink):
        self.sink, self.modules, self.named = sink, [], set()
        self.seen, self.empty, self.errors = 0, 0, []

    def module(self, rec):
        import ctypes
        import hashlib

        self.seen += 1
        size, ptr = int(getattr(rec, "cubin_size", 0) or 0), int(getattr(rec, "cubin", 0) or 0)
        if ptr and 0 < size:
            data = ctypes.string_at(ptr, size)
            self.modules.append((hashlib.sha256(data).hexdigest(), data if size <= MAX_CUBIN else None))
        else:
            self.empty += 1

    def summary(self):
        """A note when provenance found nothing to say (so a missing fingerprint can be explained)."""
        if self.named:
            return None
        return (f"compiled-code provenance: {self.seen} module record(s), {self.empty} without a cubin, "
                f"{len(self.modules)} hashed, no launched kernel's name found in them"
                + (f"; errors: {'; '.join(self.errors[:3])}" if self.errors else ""))

    def kernels(self, names):
        for name in names:
            if name in self.named:
                continue
            key = name.encode() + b"\0"
            shas = [sha for sha, data in self.modules if data is not None and key in data]
            if shas:
                self.named.add(name)
                self.sink.code(name, shas)


def _start():
    trace_mod = _load("kopt_cupti_trace")
    try:
        sink = _StreamSink(trace_mod) if _SOCK else _FileSink(trace_mod)
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
    kinds = cupti.ActivityKind
    kernel_kind = kinds.CONCURRENT_KERNEL
    ext_kind = getattr(kinds, "EXTERNAL_CORRELATION", None)
    module_kind = getattr(kinds, "MODULE", None)
    custom0 = getattr(getattr(cupti, "ExternalCorrelationKind", None), "CUSTOM0", None)
    code = _Code(sink) if os.environ.get("KOPT_CUPTI_CODE", "1") != "0" else None

    def requested():
        return 8 * 1024 * 1024, 0

    api_kinds = {int(getattr(kinds, n)) for n in ("RUNTIME", "DRIVER") if hasattr(kinds, n)}
    api = {}  # correlation id -> host start (ns) of the API call, until its kernel record comes
    waiting = []  # kernel records whose API record has not come yet (one buffer later at most)

    def completed(activities, final=False):
        late, launches, pairs = list(waiting), [], []  # `late` waited one buffer already: no more
        late_ids = {id(r) for r in late}
        waiting.clear()
        for rec in activities:
            kind = rec.kind
            if kind == kernel_kind:
                launches.append(rec)
            elif int(kind) in api_kinds:
                api[int(rec.correlation_id)] = int(getattr(rec, "start", 0) or 0)
            elif kind == ext_kind:
                if int(rec.external_kind) == int(custom0):
                    pairs.append([int(rec.correlation_id), int(rec.external_id)])
            elif kind == module_kind and code is not None:
                try:
                    code.module(rec)
                except Exception as exc:  # noqa: BLE001 - provenance is optional
                    code.errors.append(repr(exc)[:120])
        if pairs:
            sink.ext(pairs)
        if len(api) > 400000:  # API calls that launch nothing: keep the latest
            for key in list(api)[:200000]:
                del api[key]
        hosts, ready = {}, []
        for rec in late + launches:
            corr = getattr(rec, "correlation_id", None)
            if corr is not None and int(corr) in api:
                corr = int(corr)
                hosts[corr] = api.pop(corr)
                ready.append(rec)
            elif final or corr is None or id(rec) in late_ids or not enabled_api:
                ready.append(rec)
            else:
                waiting.append(rec)
        if ready:
            sink.launches(ready, hosts)
            if code is not None:
                try:
                    code.kernels({str(r.name) for r in ready})
                except Exception as exc:  # noqa: BLE001
                    code.errors.append(repr(exc)[:120])

    enabled = []
    enabled_api = set()

    def finish():
        try:
            cupti.activity_flush_all(1)
            for k in enabled:
                cupti.activity_disable(k)
        except Exception as exc:  # noqa: BLE001 - never raise into the benchmark
            state["error"] = f"CUPTI flush at exit failed: {exc!r}"
        if waiting:
            completed([], final=True)
        if code is not None and code.summary():
            sink.note(code.summary())
        sink.close(state["error"])

    try:
        cupti.activity_register_callbacks(requested, completed)
        cupti.activity_enable(kernel_kind)
        enabled.append(kernel_kind)
    except Exception as exc:  # noqa: BLE001 - never raise into the benchmark
        state["error"] = f"CUPTI activity tracing could not start: {exc!r}"
    else:
        # harness units (kopt_units.py): external correlation records tie the launches of each
        # invocation of the timed function to it; they come with the API records they correlate
        if os.environ.get("KOPT_CUPTI_UNITS", "1") != "0" and ext_kind is not None and custom0 is not None:
            try:
                for k in (ext_kind, kinds.RUNTIME, kinds.DRIVER):
                    cupti.activity_enable(k)
                    enabled.append(k)
                    if int(k) in api_kinds:
                        enabled_api.add(int(k))
                units_mod = _load("kopt_units")
                units_mod.install(units_mod.Units(
                    lambda ext: cupti.activity_push_external_correlation_id(custom0, ext),
                    lambda: cupti.activity_pop_external_correlation_id(custom0), sink.unit,
                    getattr(cupti, "get_timestamp", None),
                    (lambda name, sha: sink.code(name, [sha])) if code is not None else None))
            except Exception as exc:  # noqa: BLE001 - the trace goes on without units
                sink.note(f"harness units unavailable: {exc!r}")
                print(f"kopt-mcp CUPTI trace: harness units unavailable ({exc!r})", file=sys.stderr)
        if code is not None and module_kind is not None:
            try:
                cupti.activity_enable(module_kind)
                enabled.append(module_kind)
            except Exception:  # noqa: BLE001 - provenance is optional
                pass
    # registered first, so it runs after the benchmark's own atexit handlers (LIFO order)
    atexit.register(finish)


if _OUT or _SOCK:
    _start()
_chain_next_sitecustomize()
