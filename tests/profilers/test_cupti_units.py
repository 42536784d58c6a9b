"""The injector's harness units end to end without a GPU: a real benchmark process under
CuptiProfiler.wrap (collector mode) with a stand-in `cupti` module (the calls sitecustomize.py makes,
records delivered through its buffer callback) and a stand-in `triton.testing.do_bench` imported with
`from triton.testing import do_bench`, as real benchmarks do. The launches each timed invocation
makes must come back attributed to their unit and invocation; the L2 flush and input generation
outside the timed call must not; a kernel's module hash must come back as its provenance."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
from pathlib import Path

from kopt_mcp.evidence.segment import trace_units
from kopt_mcp.profilers.cupti import INJECT_DIR, CuptiProfiler, parse_cupti_dir

FAKE_CUPTI = '''
import ctypes, enum, itertools, threading
class ActivityKind(enum.IntEnum):
    CONCURRENT_KERNEL = 10; RUNTIME = 5; DRIVER = 4; EXTERNAL_CORRELATION = 40; MODULE = 36
class ExternalCorrelationKind(enum.IntEnum):
    CUSTOM0 = 5
class Rec:
    def __init__(self, **kw): self.__dict__.update(kw)
_cb = None; _enabled = set(); _tls = threading.local(); _recs = []; _corr = itertools.count(1); _t = [1000]; _keep = []
_host = itertools.count(10**12, 7); _lock = threading.Lock()
def _stack():
    if not hasattr(_tls, "s"): _tls.s = []
    return _tls.s
def get_timestamp(): return next(_host)
def activity_register_callbacks(requested, completed):
    global _cb; _cb = completed
def activity_enable(kind): _enabled.add(int(kind))
def activity_disable(kind): _enabled.discard(int(kind))
def activity_push_external_correlation_id(kind, ext): _stack().append(ext)
def activity_pop_external_correlation_id(kind): return _stack().pop()
def activity_flush_all(flag):
    global _recs
    recs, _recs = _recs, []
    if _cb and recs: _cb(recs)
def load_module(cubin):
    buf = ctypes.create_string_buffer(cubin, len(cubin)); _keep.append(buf)
    _recs.append(Rec(kind=ActivityKind.MODULE, cubin=ctypes.addressof(buf), cubin_size=len(cubin), id=len(_keep)))
def launch(name, ns, grid=(132, 1, 1)):
    with _lock:
        _launch(name, ns, grid)
def _launch(name, ns, grid):
    corr = next(_corr)
    if _stack() and ActivityKind.EXTERNAL_CORRELATION in _enabled:
        _recs.append(Rec(kind=ActivityKind.EXTERNAL_CORRELATION, external_kind=ExternalCorrelationKind.CUSTOM0,
                         correlation_id=corr, external_id=_stack()[-1]))
    if ActivityKind.RUNTIME in _enabled:
        _recs.append(Rec(kind=ActivityKind.RUNTIME, correlation_id=corr, start=get_timestamp(), end=get_timestamp()))
    _recs.append(Rec(kind=ActivityKind.CONCURRENT_KERNEL, name=name, start=_t[0], end=_t[0] + ns,
                     grid_x=grid[0], grid_y=1, grid_z=1, block_x=256, block_y=1, block_z=1,
                     registers_per_thread=32, static_shared_memory=0, dynamic_shared_memory=0, correlation_id=corr))
    _t[0] += ns + 100
    if len(_recs) > 500: activity_flush_all(0)
'''

FAKE_TESTING = '''
def do_bench(fn, warmup=25, rep=100):
    from cupti import cupti
    fn()
    for _ in range(5):
        cupti.launch("at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>>", 900, (65536, 1, 1))
        fn()
    for _ in range(40):
        cupti.launch("at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>>", 900, (65536, 1, 1))
        fn()
    return 1.0
'''

FAKE_COMPILER = '''
class CompiledKernel:
    def __init__(self, name, binary):
        self.name, self.kernel = name, binary
'''

BENCH = '''
from triton.testing import do_bench
from triton.compiler.compiler import CompiledKernel
CompiledKernel("fwd_kernel", b"cubin of fwd_kernel, build 1")  # as Triton builds it at the first launch
from cupti import cupti
cupti.load_module(b"\\x7fELF...cubin of fwd_kernel\\x00fwd_kernel\\x00...")
for rows, us in ((1024, 9), (4096, 33)):
    cupti.launch("distribution_elementwise_grid_stride_kernel<float, 4, normal>", 50)  # input generation
    def step(us=us, rows=rows):
        import threading
        cupti.launch("fwd_kernel", us * 1000, (rows, 1, 1))
        # the backward launches from an engine thread of its own, as torch's autograd does
        worker = threading.Thread(target=cupti.launch, args=("bwd_kernel", 2 * us * 1000))
        worker.start(); worker.join()  # persistent: 132 programs for every config
    do_bench(step)
print("done")
'''


def _tree(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    (site / "cupti").mkdir(parents=True)
    (site / "cupti" / "__init__.py").write_text("")
    (site / "cupti" / "cupti.py").write_text(FAKE_CUPTI)
    (site / "triton").mkdir()
    (site / "triton" / "__init__.py").write_text("")
    (site / "triton" / "testing.py").write_text(FAKE_TESTING)
    (site / "triton" / "compiler").mkdir()
    (site / "triton" / "compiler" / "__init__.py").write_text("")
    (site / "triton" / "compiler" / "compiler.py").write_text(FAKE_COMPILER)
    work = tmp_path / "work"
    work.mkdir()
    (work / "bench.py").write_text(textwrap.dedent(BENCH))
    return work


def _traced(tmp_path: Path, work: Path, args: str, env: str = "", out_name: str = "out", timeout: int = 120):
    """`python ARGS` run in `work` under the CUPTI profiler's wrapper with the stand-in cupti (the site
    folder on PYTHONPATH; `env`: assignments before it): the parsed trace (collector required) and its
    output folder. Asserts the command exited 0."""
    out = tmp_path / out_name
    out.mkdir()
    cmd = CuptiProfiler().wrap(f"{env}PYTHONPATH={tmp_path / 'site'} {sys.executable} {args}", out)
    done = subprocess.run(["bash", "-c", cmd], cwd=work, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return parse_cupti_dir(out, require_collector=True), out


def test_each_timed_invocation_is_attributed_to_its_unit_and_nothing_outside_it(tmp_path):
    trace, _ = _traced(tmp_path, _tree(tmp_path), "bench.py")
    units = trace.units
    assert [u.harness for u in units] == ["do_bench", "do_bench"]
    assert [u.invocations for u in units] == [46, 46]  # the first call, 5 estimates, 40 repetitions
    assert sorted(units[0].per_invocation) == ["bwd_kernel", "fwd_kernel"]  # no flush, no input generation
    assert set(units[1].per_invocation["fwd_kernel"].values()) == {33.0}
    assert set(units[1].per_invocation["bwd_kernel"].values()) == {66.0}
    assert trace_units(trace) is units  # marked units are used as they are
    module_sha = "cubin:" + hashlib.sha256(b"\x7fELF...cubin of fwd_kernel\x00fwd_kernel\x00...").hexdigest()
    triton_sha = "cubin:" + hashlib.sha256(b"cubin of fwd_kernel, build 1").hexdigest()  # no ELF: the whole binary
    assert trace.code == {"fwd_kernel": sorted([module_sha, triton_sha])}  # CUPTI's module record, Triton's kernel


def test_without_markers_the_same_stream_is_segmented_at_the_flush_kernel(tmp_path, monkeypatch):
    trace, _ = _traced(tmp_path, _tree(tmp_path), "bench.py", env="KOPT_CUPTI_UNITS=0 ")
    assert trace.units is None
    units = trace_units(trace)
    assert [u.source for u in units] == ["segmented", "segmented"]
    fwd = [sorted(u.per_invocation["fwd_kernel"].values()) for u in units]
    assert fwd[0][len(fwd[0]) // 2] == 9.0 and fwd[1][len(fwd[1]) // 2] == 33.0


PYTEST_BENCH = '''
from cupti import cupti

def test_rms(benchmark):
    def step():
        cupti.launch("fwd_kernel", 7000, (1024, 1, 1))
    benchmark.pedantic(step, rounds=20, iterations=1)

def test_other(benchmark):
    benchmark(lambda: cupti.launch("fwd_kernel", 9000, (2048, 1, 1)))
'''


def test_pytest_benchmark_cases_are_units_with_their_calls_as_invocations(tmp_path):
    """The real pytest-benchmark plugin, its fixture patched as the injector imports it."""
    work = _tree(tmp_path)
    (work / "test_bench.py").write_text(PYTEST_BENCH)
    units = _traced(tmp_path, work, "-m pytest -q -p no:cacheprovider test_bench.py", timeout=300)[0].units
    assert [u.harness for u in units] == ["pytest-benchmark", "pytest-benchmark"]
    assert units[0].label == "test_rms" and units[0].invocations == 20
    assert set(units[0].per_invocation["fwd_kernel"].values()) == {7.0}
    assert set(units[1].per_invocation["fwd_kernel"].values()) == {9.0} and units[1].invocations >= 3


FORK_BENCH = '''
import os, sys
from cupti import cupti
for _ in range(10):
    cupti.launch("k", 1000)
pid = os.fork()  # a worker pool with the fork start method: the child inherits the tracer and its socket
if pid == 0:
    cupti.launch("child_kernel", 1000)
    sys.exit(0)  # a normal exit: atexit handlers run in the child too
os.waitpid(pid, 0)
for _ in range(10):
    cupti.launch("k", 1000)
'''


def test_a_forked_child_neither_closes_nor_doubles_its_parents_trace(tmp_path):
    """The child of os.fork inherits the tracer, the collector socket and the records not yet sent:
    at its exit it must send nothing (before: it flushed the parent's pending records again and sent
    the closing message on the parent's connection, so the collector counted a mismatch)."""
    work = _tree(tmp_path)
    (work / "fork_bench.py").write_text(FORK_BENCH)
    for mode in ("stream", "file"):
        out = tmp_path / f"out-{mode}"
        out.mkdir()
        prof = CuptiProfiler()
        cmd = prof.wrap(f"PYTHONPATH={tmp_path / 'site'} {sys.executable} fork_bench.py", out)
        if mode == "file":  # the injector's file mode: each process writes cupti-<pid>.json at exit
            cmd = f"KOPT_CUPTI_OUT={out} PYTHONPATH={INJECT_DIR}:{tmp_path / 'site'} {sys.executable} fork_bench.py"
        done = subprocess.run(["bash", "-c", cmd], cwd=work, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        trace = parse_cupti_dir(out, require_collector=mode == "stream")
        calls = {k.name: k.calls for k in trace.kernels}
        assert calls == {"k": 20}, mode  # the parent's 20 launches once each; nothing of the child
        assert len(list(out.glob("cupti-*.json"))) == 1, mode


HELPER_MAIN = '''
import os
from cupti import cupti
cupti.launch("helper_kernel", 1000)  # were it traced, this would come back
pid = os.fork()  # the compile pool
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
'''

HELPER_BENCH = '''
import os, subprocess, sys
from cupti import cupti
for _ in range(10):
    cupti.launch("k", 1000)
subprocess.run([sys.executable, os.environ["HELPER"]], check=True)  # as torch.compile starts its sidecar
for _ in range(10):
    cupti.launch("k", 1000)
'''


def _installed_torch_helper(tmp_path: Path) -> Path:
    """A stand-in torch package where the benchmark's interpreter finds `torch` (the site folder), with
    its compile-worker entry point; returns that __main__.py."""
    (tmp_path / "site" / "torch" / "__init__.py").parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "site" / "torch" / "__init__.py").write_text("")
    helper = tmp_path / "site" / "torch" / "_inductor" / "compile_worker" / "__main__.py"
    helper.parent.mkdir(parents=True)
    helper.write_text(HELPER_MAIN)
    return helper


def test_torch_inductors_compile_worker_sidecar_is_not_traced(tmp_path):
    """torch.compile's compile-worker sidecar (a Popen of torch/_inductor/compile_worker/__main__.py
    that forks its pool) gets no CUPTI: the trace holds only the benchmark's 20 launches, one process.
    With KOPT_CUPTI_TRACE_HELPERS=1 it is traced, which shows the test can see it."""
    work = _tree(tmp_path)
    helper = _installed_torch_helper(tmp_path)
    (work / "helper_bench.py").write_text(HELPER_BENCH)
    for traced in (False, True):
        env = ("KOPT_CUPTI_TRACE_HELPERS=1 " if traced else "") + f"HELPER={helper} "
        trace, out = _traced(tmp_path, work, "helper_bench.py", env=env, out_name=f"out-{traced}")
        calls = {k.name: k.calls for k in trace.kernels}
        assert calls == ({"k": 20, "helper_kernel": 1} if traced else {"k": 20})
        assert len(list(out.glob("cupti-*.json"))) == (2 if traced else 1)


def test_a_look_alike_of_the_sidecar_outside_the_installed_torch_is_traced(tmp_path):
    """The cheat: launch kernels from a script named like torch's compile worker (here in the work
    folder, not in the torch the interpreter imports) so that the trace would not see them. It is
    traced: only the installed torch's own entry point is left out."""
    work = _tree(tmp_path)
    _installed_torch_helper(tmp_path)
    fake = work / "torch" / "_inductor" / "compile_worker" / "__main__.py"
    fake.parent.mkdir(parents=True)
    fake.write_text(HELPER_MAIN)
    (work / "helper_bench.py").write_text(HELPER_BENCH)
    trace, _ = _traced(tmp_path, work, "helper_bench.py", env=f"HELPER={fake} ")
    assert {k.name: k.calls for k in trace.kernels} == {"k": 20, "helper_kernel": 1}
