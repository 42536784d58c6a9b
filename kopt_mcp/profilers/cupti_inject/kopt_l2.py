"""Persisting L2 off inside the benchmark's process, and the calls that turn it on reported by name
(issue 38 item 2; standard library only, loaded by sitecustomize.py next to the CUPTI trace).

The cheat: a kernel marks its inputs persisting (an access policy window, hitProp = persisting, on its
stream or launch) inside an L2 set-aside (the persisting-L2 limit), so do_bench's L2 flush, a write
of junk that only uses the normal part of L2, no longer evicts them; llm.c reported 3530 GB/s on an
L40S (864 GB/s peak) this way. NVIDIA's own benchmark harness answers it the same way (nvbench issue
458, PR 459 `--disable-persistent-l2-cache`): the set-aside back to 0 and persisting lines reset
outside the measured interval.

`PersistingL2` does that through the CUDA driver (libcuda.so.1 by ctypes, the context current on the
calling thread, so it is the benchmark's own context and no context is created here):

- `unit_start()`, as a harness unit begins (outside the timed calls): the limit read, set to 0
  (cuCtxSetLimit(CU_LIMIT_PERSISTING_L2_CACHE_SIZE, 0)) and persisting lines reset
  (cuCtxResetPersistingL2Cache);
- `invocation()`, before each invocation of the timed function: the limit read (a host-only call);
  where the benchmark raised it, it is counted, set back to 0 and the lines reset.

`api_counter(cupti)` subscribes a CUPTI runtime/driver API callback for the functions that set an
access policy window or the limit (WATCHED, versioned names as CUPTI spells them, e.g.
cudaStreamSetAttribute_v11000) and counts the benchmark's calls by name; the injector's own calls
are left out. `unit_doc()` is what a unit reports ("l2" in its message: kopt_units.py). Any failure
leaves the benchmark as it was and is reported in `errors`; without libcuda or CUPTI (a CPU
machine) nothing happens.
"""

import ctypes
import threading

#: CUlimit / cudaLimit value of the persisting-L2 set-aside (cuda.h CU_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06)
LIMIT_PERSISTING_L2 = 0x06
#: runtime and driver functions that set an access policy window or the persisting-L2 limit (base names)
WATCHED = ("cudaStreamSetAttribute", "cuStreamSetAttribute", "cudaDeviceSetLimit", "cuCtxSetLimit",
           "cudaGraphKernelNodeSetAttribute", "cuGraphKernelNodeSetAttribute", "cudaCtxResetPersistingL2Cache",
           "cuCtxResetPersistingL2Cache")


def base_name(name):
    """"cudaStreamSetAttribute_v11000" / "cuStreamSetAttribute_ptsz" -> "cudaStreamSetAttribute"."""
    name = str(name)
    for cut in ("_v", "_ptsz", "_ptds"):
        at = name.find(cut)
        if at > 0:
            name = name[:at]
    return name


class PersistingL2:
    """The persisting-L2 guard of one process (module docstring). `lib`: a ctypes library with the
    driver's cuCtxGetCurrent / cuCtxGetLimit / cuCtxSetLimit / cuCtxResetPersistingL2Cache (None:
    libcuda.so.1, loaded on first use)."""

    def __init__(self, lib=None):
        self.lib, self.loaded = lib, lib is not None
        self.lock = threading.Lock()
        self.ours = threading.local()  # set while this guard calls the driver: its own calls are not counted
        self.limit_found = 0  # the largest limit found at a unit's start (bytes): the default or the benchmark's
        self.raised = 0  # times the benchmark raised the limit during a unit
        self.resets = 0
        self.api = {}  # watched function base name -> the benchmark's calls
        self.errors = []

    def _driver(self):
        if not self.loaded:
            self.loaded = True
            try:
                self.lib = ctypes.CDLL("libcuda.so.1")
            except OSError as exc:
                self._error(f"libcuda.so.1: {exc!r}")
        return self.lib

    def _error(self, text):
        if len(self.errors) < 5:
            self.errors.append(str(text)[:200])

    def _limit(self, lib):
        """The current context's persisting-L2 limit (bytes), None without a current context."""
        ctx = ctypes.c_void_p()
        if lib.cuCtxGetCurrent(ctypes.byref(ctx)) != 0 or not ctx.value:
            return None
        value = ctypes.c_size_t()
        rc = lib.cuCtxGetLimit(ctypes.byref(value), LIMIT_PERSISTING_L2)
        if rc != 0:
            self._error(f"cuCtxGetLimit returned {rc}")
            return None
        return int(value.value)

    def _off(self, lib):
        rc = lib.cuCtxSetLimit(LIMIT_PERSISTING_L2, ctypes.c_size_t(0))
        rc2 = lib.cuCtxResetPersistingL2Cache()
        self.resets += 1
        if rc or rc2:
            self._error(f"cuCtxSetLimit / cuCtxResetPersistingL2Cache returned {rc} / {rc2}")

    def _guarded(self, start):
        lib = self._driver()
        if lib is None:
            return
        self.ours.on = True
        try:
            with self.lock:
                found = self._limit(lib)
                if found is None:
                    return
                if start:
                    self.limit_found = max(self.limit_found, found)
                    self._off(lib)
                elif found > 0:
                    self.raised += 1
                    self._off(lib)
        except Exception as exc:  # noqa: BLE001 - never raise into the benchmark
            self._error(repr(exc))
        finally:
            self.ours.on = False

    def unit_start(self):
        """A harness unit begins: persisting L2 off (limit 0, lines reset)."""
        self._guarded(True)

    def invocation(self):
        """Before one invocation: where the benchmark raised the limit, count it and turn it off again."""
        self._guarded(False)

    def count(self, name):
        """One call of a watched function (its CUPTI name) by the benchmark (not by this guard)."""
        if getattr(self.ours, "on", False):
            return
        key = base_name(name)
        with self.lock:
            self.api[key] = self.api.get(key, 0) + 1

    def unit_doc(self):
        """{"limit_found": bytes, "raised": n, "resets": n, "api": {name: calls}, "errors": [...]}: the process so far."""
        with self.lock:
            return {"limit_found": self.limit_found, "raised": self.raised, "resets": self.resets,
                    "api": dict(self.api), "errors": list(self.errors)}


def api_counter(cupti, guard):
    """Subscribe a CUPTI API callback counting the benchmark's calls of WATCHED functions into
    `guard` (runtime and driver domains; cbids found by cupti.get_callback_name). Returns the watched
    (domain, cbid) count, 0 where nothing could be subscribed. Raises nothing."""
    try:
        domains = [cupti.CallbackDomain.RUNTIME_API, cupti.CallbackDomain.DRIVER_API]
        names = {}
        for domain in domains:
            for cbid in range(1, 1200):
                try:
                    name = cupti.get_callback_name(domain, cbid)
                except Exception:  # noqa: BLE001 - an id without a function
                    continue
                if name and base_name(name) in WATCHED:
                    names[(int(domain), cbid)] = str(name)
        if not names:
            guard._error("persisting-L2 API watch: no watched function found by cupti.get_callback_name")
            return 0
        enter = getattr(getattr(cupti, "ApiCallbackSite", None), "API_ENTER", 0)

        def callback(userdata, domain, cbid, cbdata):
            try:
                if int(getattr(cbdata, "callback_site", enter)) == int(enter):
                    guard.count(names.get((int(domain), int(cbid)), "unknown"))
            except Exception:  # noqa: BLE001 - never raise into the benchmark
                pass

        subscriber = cupti.subscribe(callback, None)
        for domain, cbid in names:
            cupti.enable_callback(1, subscriber, domain, cbid)
        guard.subscriber = subscriber  # kept alive with the callback
        guard.callback = callback
        return len(names)
    except Exception as exc:  # noqa: BLE001 - another subscriber (a profiler), an older cupti-python
        guard._error(f"persisting-L2 API watch unavailable: {exc!r}")
        return 0


def guard(cupti, environ):
    """The process's guard with its API watch (`api_counter`), or None with KOPT_CUPTI_L2=0 in `environ`
    or where it cannot start. Raises nothing."""
    if environ.get("KOPT_CUPTI_L2", "1") == "0":
        return None
    try:
        g = PersistingL2()
        api_counter(cupti, g)
        return g
    except Exception:  # noqa: BLE001 - never raise into the benchmark
        return None
