"""Harness units, marked inside the benchmark process (standard library only; loaded by
sitecustomize.py next to the CUPTI trace).

A unit is one call of the harness's own timer: `triton.testing.do_bench` / `do_bench_cudagraph`,
a `torch.utils.benchmark.Timer` measurement (`timeit`, `blocked_autorange`, `adaptive_autorange`),
a pytest-benchmark case (`benchmark(fn)`, `benchmark.pedantic(fn)`). Units are numbered in the
order the harness runs them, so unit k of BEST and unit k of a candidate are the same config.
Inside a unit every invocation of the timed function (do_bench's `fn`, pytest-benchmark's target;
a Timer's statement block `_timeit(number)`, weighted by `number`; do_bench_cudagraph's graph
replay) pushes a CUPTI external correlation id `unit << INV_BITS | invocation` (kind CUSTOM0) for the
duration of the call: CUPTI then ties every CUDA API call made inside it, and so the kernels it
launched, to that invocation. Its host-time window is recorded too: a launch made from another
thread while the invocation ran (torch's autograd engine runs `backward()` on a device thread of its
own) belongs to it by the time its API call started. Launches outside an invocation (do_bench's L2
flush, input generation before the timed call) are not part of the unit's figure.

The same marks serve Nsight Compute's confirming run (sitecustomize.py's NVTX mode, no CUPTI): there
`push` opens the NVTX range "kopt/u<unit>/i<invocation>" for a few invocations per unit (`marked`), and
ncu profiles only the launches inside them, naming the range of each.

The harness modules are patched as they are imported (a meta path finder wraps their loader), so
`from triton.testing import do_bench` in a benchmark gets the marked function. Any failure here
leaves the harness as it was: the keep metric then falls back to segmenting the launch stream.
"""

import importlib.abc
import importlib.machinery
import sys
import threading

INV_BITS = 24


#: invocation windows kept per unit (host-time attribution of launches from other threads)
MAX_WINDOWS = 20000


class Units:
    """Numbers units and invocations; `push`/`pop` are cupti's external correlation calls, `clock`
    CUPTI's timestamp (ns, the activity records' clock), `send` reports a finished unit
    ({"k", "harness", "label", "invocations", "weights", "windows": [[i, start ns, end ns], ...]})."""

    def __init__(self, push, pop, send, clock=None, code=None, hasher=None, marked=None, l2=None):
        self.push, self.pop, self.send, self.clock = push, pop, send, clock
        #: kopt_l2.PersistingL2 (persisting L2 off around units and invocations; its report goes into
        #: each unit's message as "l2"), or None
        self.l2 = l2
        #: the invocation numbers pushed (a range; None: every one below 1 << INV_BITS): ncu's
        #: confirming run marks a few per unit, so it profiles a bounded number of launches
        self.marked = marked
        #: code(name, hash): a compiled kernel's provenance (Triton's CompiledKernel), or None;
        #: hasher(binary) -> hash (kopt_cupti_trace.code_sha256), as for CUPTI's module records
        self.code, self.hasher, self.reported = code, hasher, set()
        self.lock = threading.Lock()
        self.next_unit = 1
        self.local = threading.local()

    def begin(self, harness, label):
        with self.lock:
            k, self.next_unit = self.next_unit, self.next_unit + 1
        return _Unit(self, k, harness, label)

    def current(self):
        return getattr(self.local, "unit", None)


class _Unit:
    def __init__(self, units, k, harness, label):
        self.units, self.k, self.harness, self.label = units, k, harness, label
        self.invocations, self.weights, self.outer, self.windows = 0, {}, None, []

    def __enter__(self):
        self.outer = self.units.current()
        self.units.local.unit = self
        if self.units.l2 is not None:
            self.units.l2.unit_start()
        return self

    def __exit__(self, *exc):
        self.units.local.unit = self.outer
        try:
            msg = {"k": self.k, "harness": self.harness, "label": self.label,
                   "invocations": self.invocations, "weights": self.weights, "windows": self.windows}
            if self.units.l2 is not None:
                msg["l2"] = self.units.l2.unit_doc()
            self.units.send(msg)
        except Exception:  # noqa: BLE001 - never raise into the benchmark
            pass
        return False

    def call(self, fn, args, kwargs, weight=1):
        """Run one invocation of the timed function under its external correlation id."""
        i = self.invocations
        self.invocations += 1
        if weight != 1:
            self.weights[str(i)] = int(weight)
        pushed, clock = False, self.units.clock
        if self.units.l2 is not None:
            self.units.l2.invocation()  # before the push: its driver calls belong to no invocation
        t0 = clock() if clock is not None and len(self.windows) < MAX_WINDOWS else None
        if i < (1 << INV_BITS) and (self.units.marked is None or i in self.units.marked):
            try:
                self.units.push((self.k << INV_BITS) | i)
                pushed = True
            except Exception:  # noqa: BLE001
                pass
        try:
            return fn(*args, **kwargs)
        finally:
            if pushed:
                try:
                    self.units.pop()
                except Exception:  # noqa: BLE001
                    pass
            if t0 is not None:
                self.windows.append([i, t0, clock()])

    def wrap(self, fn):
        def invocation(*args, **kwargs):
            return self.call(fn, args, kwargs)
        return invocation


def _label(fn):
    return getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or type(fn).__name__


def _patch_triton(mod, units):
    orig = getattr(mod, "do_bench", None)
    if orig is not None and not getattr(orig, "_kopt_unit", False):
        def do_bench(fn, *args, **kwargs):
            with units.begin("do_bench", _label(fn)) as u:
                return orig(u.wrap(fn), *args, **kwargs)
        do_bench._kopt_unit = True
        do_bench.__wrapped__ = orig
        mod.do_bench = do_bench
    orig_graph = getattr(mod, "do_bench_cudagraph", None)
    if orig_graph is not None and not getattr(orig_graph, "_kopt_unit", False):
        def do_bench_cudagraph(fn, *args, **kwargs):
            _patch_graph_replay(units)  # torch is imported by now
            with units.begin("do_bench_cudagraph", _label(fn)):
                return orig_graph(fn, *args, **kwargs)
        do_bench_cudagraph._kopt_unit = True
        do_bench_cudagraph.__wrapped__ = orig_graph
        mod.do_bench_cudagraph = do_bench_cudagraph


def _invocation(units, orig, harness=None, weight_of=None):
    """A method that is one invocation of the unit in progress (of `harness`, if named), weighted by
    `weight_of(args)`; outside such a unit, the method as it was."""
    def method(self, *args, **kwargs):
        u = units.current()
        if u is None or (harness is not None and u.harness != harness):
            return orig(self, *args, **kwargs)
        return u.call(orig, (self, *args), kwargs, weight=weight_of(args) if weight_of else 1)
    return method


def _patch_graph_replay(units):
    """Inside a do_bench_cudagraph unit, each CUDA graph replay is one invocation."""
    torch = sys.modules.get("torch")
    graph = getattr(getattr(torch, "cuda", None), "CUDAGraph", None)
    orig = getattr(graph, "replay", None)
    if orig is None or getattr(orig, "_kopt_unit", False):
        return

    replay = _invocation(units, orig, harness="do_bench_cudagraph")
    replay._kopt_unit = True
    graph.replay = replay


def _patch_timer(mod, units):
    timer = getattr(mod, "Timer", None)
    if timer is None or getattr(timer, "_kopt_unit", False):
        return
    for meth in ("timeit", "blocked_autorange", "adaptive_autorange"):
        orig = getattr(timer, meth, None)
        if orig is None:
            continue

        def measure(self, *args, _orig=orig, _meth=meth, **kwargs):
            if units.current() is not None:  # blocked_autorange inside adaptive_autorange: one unit
                return _orig(self, *args, **kwargs)
            label = getattr(self, "_task_spec", None)
            label = getattr(label, "stmt", None) or _meth
            with units.begin("torch.utils.benchmark", str(label)[:200]):
                return _orig(self, *args, **kwargs)
        setattr(timer, meth, measure)
    orig_block = getattr(timer, "_timeit", None)
    if orig_block is not None:  # one timed block of `number` statements: weight number
        timer._timeit = _invocation(units, orig_block, weight_of=lambda args: max(1, int(args[0])))
    timer._kopt_unit = True


def _patch_pytest_benchmark(mod, units):
    fixture = getattr(mod, "BenchmarkFixture", None)
    if fixture is None or getattr(fixture, "_kopt_unit", False):
        return
    orig_call, orig_pedantic = fixture.__call__, getattr(fixture, "pedantic", None)

    def __call__(self, function_to_benchmark, *args, **kwargs):
        with units.begin("pytest-benchmark", str(getattr(self, "name", "")) or _label(function_to_benchmark)) as u:
            return orig_call(self, u.wrap(function_to_benchmark), *args, **kwargs)
    fixture.__call__ = __call__
    if orig_pedantic is not None:
        def pedantic(self, target, *args, **kwargs):
            with units.begin("pytest-benchmark", str(getattr(self, "name", "")) or _label(target)) as u:
                return orig_pedantic(self, u.wrap(target), *args, **kwargs)
        fixture.pedantic = pedantic
    fixture._kopt_unit = True


def _patch_triton_compiler(mod, units):
    """Compiled-code provenance for Triton kernels: each CompiledKernel, as it is built (compiled or
    loaded from the cache), reports its kernel name and the hash of its binary (the cubin's machine
    code: `Units.hasher`)."""
    kernel_cls = getattr(mod, "CompiledKernel", None)
    if (kernel_cls is None or units.code is None or units.hasher is None
            or getattr(kernel_cls, "_kopt_unit", False)):
        return
    orig = kernel_cls.__init__

    def __init__(self, *args, **kwargs):
        orig(self, *args, **kwargs)
        try:
            binary = getattr(self, "kernel", None)
            if isinstance(binary, str):
                binary = binary.encode()
            key = (str(self.name), units.hasher(binary)) if binary else None
            if key and key not in units.reported:
                units.reported.add(key)
                units.code(*key)
        except Exception:  # noqa: BLE001 - provenance is optional, never raise into the benchmark
            pass
    kernel_cls.__init__ = __init__
    kernel_cls._kopt_unit = True


def _patch_pytest_rewrite(mod, units):
    """pytest loads its plugins (pytest-benchmark among them) through its own assertion-rewriting
    import hook, placed before this module's finder: patch a harness module after that hook ran it."""
    hook = getattr(mod, "AssertionRewritingHook", None)
    orig = getattr(hook, "exec_module", None)
    if orig is None or getattr(orig, "_kopt_unit", False):
        return

    def exec_module(self, module):
        orig(self, module)
        patch = _PATCHES.get(getattr(module, "__name__", ""))
        if patch is not None:
            try:
                patch(module, units)
            except Exception:  # noqa: BLE001 - never raise into the benchmark
                pass
    exec_module._kopt_unit = True
    hook.exec_module = exec_module


_PATCHES = {"triton.testing": _patch_triton, "torch.utils.benchmark.utils.timer": _patch_timer,
            "pytest_benchmark.fixture": _patch_pytest_benchmark, "triton.compiler.compiler": _patch_triton_compiler,
            "_pytest.assertion.rewrite": _patch_pytest_rewrite}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner, patch, units):
        self.inner, self.patch, self.units = inner, patch, units

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module):
        self.inner.exec_module(module)
        try:
            self.patch(module, self.units)
        except Exception:  # noqa: BLE001 - never raise into the benchmark
            pass


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, units):
        self.units = units

    def find_spec(self, name, path=None, target=None):
        patch = _PATCHES.get(name)
        if patch is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, patch, self.units)
                return spec
        return None


def install(units):
    """Patch the harness modules already imported, and each one as it is imported later."""
    for name, patch in _PATCHES.items():
        mod = sys.modules.get(name)
        if mod is not None:
            try:
                patch(mod, units)
            except Exception:  # noqa: BLE001
                pass
    sys.meta_path.insert(0, _Finder(units))
