"""The kernels a repository's sources define and which of a trace's kernels they are
(kopt_mcp/bench/kernel_sources.py): what `kopt-mcp init` proposes as the target, the repository's own
kernels of one trace, not the hottest kernel of the harness.

On an H100 (2026-11-24) init proposed triton.testing.do_bench's L2-clearing fill for
ai-compiler-study/triton-kernels (benchmarks/results/2026-11-24-h100-real-repos.md, seventh
session). The kernel names below are the ones recorded there and in the real-repository runs."""

from __future__ import annotations

from pathlib import Path

from kopt_mcp.bench.kernel_sources import choose_targets, cuda_kernels, defined_kernels, own_kernels, python_kernels
from kopt_mcp.evidence.names import function_name
from kopt_mcp.profilers.cupti import parse_cupti_dir

#: recorded on the H100 on 2026-11-24: the hottest kernel of triton-kernels' do_bench benchmark
FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<int>, std::array<char*, 1ul> >"
        "(int, at::native::FillFunctor<int>, std::array<char*, 1ul>)")
#: triton-kernels' own kernels as CUPTI named them (2026-11-24-h100-real-repos-triton-kernels*.json)
TK = ["_rms_norm_bwd", "_rms_norm_fwd"]
DOBENCH = Path(__file__).parents[1] / "fixtures" / "cupti" / "h100_dobench" / "run0"

TRITON_SOURCE = '''
import triton
import triton.language as tl


@triton.jit
def _rms_norm_fwd(X, Y, W, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    pass


@triton.autotune(configs=[triton.Config({"BLOCK": 128})], key=["N"])
@triton.jit(do_not_specialize=["N"])
def _rms_norm_bwd(DY, DX, N, BLOCK: tl.constexpr):
    pass


def rms_norm(x, w):  # the host wrapper: not a kernel
    return _rms_norm_fwd[(1,)](x, x, w, 0, 1, 1e-6, BLOCK_SIZE=128)
'''

CUDA_SOURCE = '''
template <int N>
__global__ void __launch_bounds__(256) scale_kernel(float* x, float s) { }
extern "C" __global__ void add_kernel(const float* a, float* b) { }
__device__ float helper(float v) { return v; }
'''


def test_python_kernels_are_the_jit_decorated_functions():
    assert python_kernels(TRITON_SOURCE) == {"_rms_norm_fwd", "_rms_norm_bwd"}
    assert python_kernels("def broken(:\n") == set()


def test_cuda_kernels_are_the_global_functions():
    assert cuda_kernels(CUDA_SOURCE) == {"scale_kernel", "add_kernel"}


def test_defined_kernels_reads_the_repository_and_skips_vendored_folders(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "norm.py").write_text(TRITON_SOURCE)
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "scale.cu").write_text(CUDA_SOURCE)
    (tmp_path / "third_party" / "cutlass").mkdir(parents=True)
    (tmp_path / "third_party" / "cutlass" / "gemm.cu").write_text("__global__ void vendored_gemm(float* c) {}")
    assert defined_kernels(tmp_path) == {"_rms_norm_fwd", "_rms_norm_bwd", "scale_kernel", "add_kernel"}


def test_function_name_of_a_demangled_name_and_a_triton_name():
    assert function_name(FILL) == "vectorized_elementwise_kernel"
    assert function_name("_rms_norm_fwd") == "_rms_norm_fwd"


def test_the_repositorys_kernels_win_over_the_harness_fill():
    names, why = choose_targets([FILL, *TK], set(TK))
    assert names == TK
    assert "the hottest, at::native::vectorized_elementwise_kernel, is not defined here" in why


def test_the_kernel_flag_narrows_the_repositorys_kernels():
    assert choose_targets([FILL, *TK], set(TK), topic="fwd")[0] == ["_rms_norm_fwd"]
    assert choose_targets([FILL, *TK], set(TK), topic="attention")[0] == TK  # no match: all of them


def test_without_a_defined_kernel_the_hottest_that_is_not_a_fill_and_a_warning():
    names, why = choose_targets([FILL, *TK], set())
    assert names == ["_rms_norm_bwd"] and "the hottest is at::native::vectorized_elementwise_kernel" in why
    assert "check it is yours" in why
    assert choose_targets([FILL], set())[0] == [FILL]  # nothing else: the hottest, still with the warning
    assert choose_targets([], {"x"}) == ([], "the trace has no kernels")


def test_own_kernels_keeps_the_traces_order_and_kernels_only():
    """On the recorded do_bench trace (hottest first: a cuBLAS gemm): a repository defining the RNG
    kernel's function and a kernel the trace lacks gets the RNG kernel alone, as the trace names it."""
    trace = parse_cupti_dir(DOBENCH)
    rng = [k.name for k in trace.kernels if "distribution_elementwise_grid_stride_kernel" in k.name]
    own = own_kernels(trace.kernels, {"distribution_elementwise_grid_stride_kernel", "never_launched_kernel"})
    assert [k.name for k in own] == rng and len(rng) == 1
    assert own_kernels(trace.kernels, set()) == []
