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
harness's measurement units are marked too (kopt_units.py; format 3 adds "units", "code" and "notes":
kopt_cupti_trace.py), with the runtime/driver API and external correlation records they need. The
per-process file (kopt_cupti_trace.Trace.doc; its format 2 part):

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
#: the process that set the trace up. A child made by os.fork (a multiprocessing or compile-worker pool
#: with the fork start method) inherits the tracer, its socket and its unsent records, but not CUPTI's
#: threads: it sends nothing, flushes nothing and writes nothing, so it can neither close the parent's
#: trace, count the parent's records twice, nor wait at exit on a CUPTI flush that cannot complete
_OWNER_PID = os.getpid()
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
        if os.getpid() != _OWNER_PID:
            return
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
        if os.getpid() != _OWNER_PID:  # a forked child: the socket is its parent's
            return
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
    """Compiled-code provenance: the hash of each loaded module's cubin (CUPTI MODULE activity;
    kopt_cupti_trace.code_sha256: its machine code), and for each kernel name launched, the hashes of
    the modules whose cubin holds that name."""

    def __init__(self, sink, hasher):
        #: hasher(cubin bytes) -> str: kopt_cupti_trace.code_sha256
        self.sink, self.hasher, self.modules, self.named = sink, hasher, [], set()
        self.seen, self.empty, self.errors = 0, 0, []

    def module(self, rec):
        import ctypes

        self.seen += 1
        size, ptr = int(getattr(rec, "cubin_size", 0) or 0), int(getattr(rec, "cubin", 0) or 0)
        if ptr and 0 < size:
            data = ctypes.string_at(ptr, size)
            self.modules.append((self.hasher(data), data if size <= MAX_CUBIN else None))
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


class _Tracer:
    """The trace of this process: CUPTI's activity buffers dispatched to the sink (kernel launches,
    with the host start of the API call that launched each; external correlation ids; module records
    for provenance), the harness units installed, and the flush at exit."""

    def __init__(self, cupti, sink, hasher):
        self.cupti, self.sink, self.error, self.hasher = cupti, sink, None, hasher
        kinds = cupti.ActivityKind
        self.kernel_kind = kinds.CONCURRENT_KERNEL
        self.ext_kind = getattr(kinds, "EXTERNAL_CORRELATION", None)
        self.module_kind = getattr(kinds, "MODULE", None)
        self.api_kinds = {int(getattr(kinds, n)) for n in ("RUNTIME", "DRIVER") if hasattr(kinds, n)}
        self.custom0 = getattr(getattr(cupti, "ExternalCorrelationKind", None), "CUSTOM0", None)
        self.code = _Code(sink, hasher) if os.environ.get("KOPT_CUPTI_CODE", "1") != "0" else None
        self.api = {}  # correlation id -> host start (ns) of the API call, until its kernel record comes
        self.waiting = []  # kernel records whose API record has not come yet (one buffer later at most)
        self.enabled, self.enabled_api = [], set()

    def requested(self):
        return 8 * 1024 * 1024, 0

    def completed(self, activities, final=False):
        """One buffer of activity records (CUPTI's callback; `final`: the last, at exit)."""
        late, launches, pairs = list(self.waiting), [], []  # `late` waited one buffer already: no more
        self.waiting.clear()
        for rec in activities:
            kind = rec.kind
            if kind == self.kernel_kind:
                launches.append(rec)
            elif int(kind) in self.api_kinds:
                self.api[int(rec.correlation_id)] = int(getattr(rec, "start", 0) or 0)
            elif kind == self.ext_kind:
                if int(rec.external_kind) == int(self.custom0):
                    pairs.append([int(rec.correlation_id), int(rec.external_id)])
            elif kind == self.module_kind and self.code is not None:
                self._guarded(self.code.module, rec)
        if pairs:
            self.sink.ext(pairs)
        if len(self.api) > 400000:  # API calls that launch nothing: keep the latest
            for key in list(self.api)[:200000]:
                del self.api[key]
        self._launches(late, launches, final)

    def _launches(self, late, launches, final):
        """Send the launches whose API record came (with its host start), and those that waited a
        buffer already; keep the others one buffer more."""
        late_ids, hosts, ready = {id(r) for r in late}, {}, []
        for rec in late + launches:
            corr = getattr(rec, "correlation_id", None)
            if corr is not None and int(corr) in self.api:
                hosts[int(corr)] = self.api.pop(int(corr))
                ready.append(rec)
            elif final or corr is None or id(rec) in late_ids or not self.enabled_api:
                ready.append(rec)
            else:
                self.waiting.append(rec)
        if ready:
            self.sink.launches(ready, hosts)
            if self.code is not None:
                self._guarded(self.code.kernels, {str(r.name) for r in ready})

    def _guarded(self, fn, arg):
        try:
            fn(arg)
        except Exception as exc:  # noqa: BLE001 - provenance is optional, never raise into the benchmark
            self.code.errors.append(repr(exc)[:120])

    def enable(self, kind):
        self.cupti.activity_enable(kind)
        self.enabled.append(kind)
        if int(kind) in self.api_kinds:
            self.enabled_api.add(int(kind))

    def start(self):
        """Register the buffers and enable the kernel trace, then the harness units and provenance."""
        try:
            self.cupti.activity_register_callbacks(self.requested, self.completed)
            self.enable(self.kernel_kind)
        except Exception as exc:  # noqa: BLE001 - never raise into the benchmark
            self.error = f"CUPTI activity tracing could not start: {exc!r}"
            return
        if os.environ.get("KOPT_CUPTI_UNITS", "1") != "0" and self.ext_kind is not None and self.custom0 is not None:
            self._install_units()
        if self.code is not None and self.module_kind is not None:
            try:
                self.enable(self.module_kind)
            except Exception:  # noqa: BLE001 - provenance is optional
                pass

    def _install_units(self):
        """Harness units (kopt_units.py): external correlation records tie the launches of each
        invocation of the timed function to it; they come with the API records they correlate."""
        cupti, sink, custom0 = self.cupti, self.sink, self.custom0
        try:
            for k in (self.ext_kind, cupti.ActivityKind.RUNTIME, cupti.ActivityKind.DRIVER):
                self.enable(k)
            units_mod = _load("kopt_units")
            units_mod.install(units_mod.Units(
                lambda ext: cupti.activity_push_external_correlation_id(custom0, ext),
                lambda: cupti.activity_pop_external_correlation_id(custom0), sink.unit,
                getattr(cupti, "get_timestamp", None),
                (lambda name, sha: sink.code(name, [sha])) if self.code is not None else None, self.hasher,
                l2=_load("kopt_l2").guard(cupti, os.environ)))  # persisting L2 off (KOPT_CUPTI_L2=0: not)
        except Exception as exc:  # noqa: BLE001 - the trace goes on without units
            sink.note(f"harness units unavailable: {exc!r}")
            print(f"kopt-mcp CUPTI trace: harness units unavailable ({exc!r})", file=sys.stderr)

    def finish(self):
        """At exit: flush every buffer, send what waited, close the trace (not in a forked child)."""
        if os.getpid() != _OWNER_PID:
            return
        try:
            self.cupti.activity_flush_all(1)
            for k in self.enabled:
                self.cupti.activity_disable(k)
        except Exception as exc:  # noqa: BLE001 - never raise into the benchmark
            self.error = self.error or f"CUPTI flush at exit failed: {exc!r}"
        if self.waiting:
            self.completed([], final=True)
        if self.code is not None and self.code.summary():
            self.sink.note(self.code.summary())
        self.sink.close(self.error)


def _start():
    trace_mod = _load("kopt_cupti_trace")
    try:
        sink = _StreamSink(trace_mod) if _SOCK else _FileSink(trace_mod)
    except OSError as exc:  # no collector listening: nothing can be reported, the collector says so
        print(f"kopt-mcp CUPTI trace: cannot reach the collector at {_SOCK} ({exc!r})", file=sys.stderr)
        return
    try:
        from cupti import cupti
    except Exception as exc:  # noqa: BLE001 - never raise into the benchmark
        error = (f"cupti-python is not importable by {sys.executable} ({exc!r}): "
                 "pip install cupti-python in the benchmark's environment")
        atexit.register(lambda: sink.close(error))
        return
    tracer = _Tracer(cupti, sink, trace_mod.code_sha256)
    tracer.start()
    # registered first, so it runs after the benchmark's own atexit handlers (LIFO order)
    atexit.register(tracer.finish)


#: helper processes that launch nothing a harness times, and that fork a pool right after start-up:
#: torch inductor's compile-worker sidecar (subprocess.Popen of torch/_inductor/compile_worker/__main__.py,
#: which then forks its compile pool). CUPTI started there leaves its threads and its hooks in the CUDA
#: driver behind in every forked worker, the state in which a fork child can block for ever; so it is
#: not traced (KOPT_CUPTI_TRACE_HELPERS=1: traced anyway, to compare). Only the entry point of the torch
#: this interpreter imports counts: a look-alike script elsewhere (a way to hide launches) is traced
HELPER_ENTRY = ("_inductor", "compile_worker", "__main__.py")


def _is_helper():
    """True where this process runs the installed torch's HELPER_ENTRY (its command line as the
    interpreter got it)."""
    if os.environ.get("KOPT_CUPTI_TRACE_HELPERS") == "1":
        return False
    argv = getattr(sys, "orig_argv", None) or sys.argv
    if not any("/".join(HELPER_ENTRY) in a.replace(os.sep, "/") for a in argv):
        return False  # the common case: no package lookup at start-up
    try:
        spec = importlib.util.find_spec("torch")
        roots = list(spec.submodule_search_locations or []) if spec is not None else []
    except Exception:  # noqa: BLE001 - a broken torch install: trace the process
        return False
    entries = {os.path.realpath(os.path.join(root, *HELPER_ENTRY)) for root in roots}
    return any(os.path.realpath(a) in entries for a in argv)


_NVTX = os.environ.get("KOPT_NVTX_UNITS", "")
if (_OUT or _SOCK) and not _is_helper():
    _start()
elif _NVTX and not _is_helper():  # ncu's confirming run: NVTX ranges only, no CUPTI (kopt_nvtx.py)
    try:
        _load("kopt_nvtx").start(_NVTX, _load("kopt_units"))
    except Exception as exc:  # noqa: BLE001 - never raise into the benchmark: ncu then profiles nothing
        print(f"kopt-mcp NVTX units unavailable ({exc!r})", file=sys.stderr)
_chain_next_sitecustomize()
