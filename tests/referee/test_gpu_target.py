"""What the baseline says about the kernels that judge (kopt_mcp/referee/gpu_target.py), on the real
H200 trace of Liger-Kernel's FusedLinearCrossEntropy benchmark (tests/fixtures/cupti/h200_liger_flce):
with `[profiler] kernel` empty, torch's add (27.0% of the trace) judges, and the repository's own two
Triton kernels are named with their shares and the regex that would judge them. The repository here
is a stand-in that defines the two kernels by name (the functions' bodies are not Liger's)."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from kopt_mcp.profilers import CuptiProfiler
from kopt_mcp.profilers.cupti import parse_cupti_dir
from kopt_mcp.referee.gpu_target import gpu_target, hottest_note, own_of

FIXTURE = Path(__file__).parents[1] / "fixtures" / "cupti" / "h200_liger_flce"
OWN = '''import triton


@triton.jit
def liger_cross_entropy_kernel(X_ptr, n_cols):
    pass


@triton.jit
def element_mul_kernel(X_ptr, grad_output_ptr, n_cols):
    pass
'''


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    d = tmp_path_factory.mktemp("flce")
    (d / "cupti-651.json").write_bytes(gzip.decompress((FIXTURE / "cupti-651.json.gz").read_bytes()))
    return parse_cupti_dir(d)


def _repo(tmp_path: Path, source: str | None) -> Path:
    (tmp_path / "src" / "ops").mkdir(parents=True)
    if source is not None:
        (tmp_path / "src" / "ops" / "cross_entropy.py").write_text(source)
    return tmp_path


def test_the_hottest_kernel_judges_and_the_repositorys_own_are_named(trace, tmp_path):
    hottest = trace.kernels[0].name
    assert "CUDAFunctor_add" in hottest and trace.kernels[0].share_pct == pytest.approx(26.98, abs=0.01)
    target = gpu_target("", [hottest], trace, _repo(tmp_path, OWN))
    assert (target.by, target.kernels) == ("hottest", [hottest])
    assert [(o.name, o.share_pct) for o in target.own] == [("element_mul_kernel", 0.89),
                                                          ("liger_cross_entropy_kernel", 0.81)]
    assert target.own_regex == "^element_mul_kernel$|^liger_cross_entropy_kernel$"
    note = hottest_note(target, trace)
    assert "(27.0% of its GPU time)" in note and repr(target.own_regex) in note


def test_a_repository_that_defines_none_of_the_trace_gets_none(trace, tmp_path):
    target = gpu_target("", [trace.kernels[0].name], trace, _repo(tmp_path, None))
    assert (target.own, target.own_regex) == ([], None)
    assert "kernel_trace_analysis" in hottest_note(target, trace)
    assert own_of(None, tmp_path) == ([], None)  # no trace: nothing to name


def test_a_set_regex_names_its_kernels_and_nothing_else(trace, tmp_path):
    target = gpu_target("^element_mul_kernel$", ["element_mul_kernel"], trace, _repo(tmp_path, OWN))
    assert (target.by, target.own, target.own_regex) == ("regex", [], None)
    assert hottest_note(target, trace) == "" and gpu_target("", [], trace, tmp_path) is None


class _ReplayFlce(CuptiProfiler):
    """CUPTI in file mode (no collector): runs the benchmark as it is, then leaves the recorded trace
    where the injector would have written it."""

    def __init__(self, trace_file: Path):
        super().__init__()
        self.stream, self.trace_file = False, trace_file

    def wrap(self, command: str, out_dir: Path) -> str:
        return f"{command} && mkdir -p {out_dir} && cp {self.trace_file} {out_dir}/"


def test_kernel_trace_analysis_lists_the_own_kernels_below_its_top_rows(ref, monkeypatch, tmp_path):
    """kernel_trace_analysis of the workspace: Liger's two kernels are 20th and 21st of the trace, below
    the ten rows returned, and still listed, with the regex; the workspace's sources are the ones read."""
    (tmp_path / "cupti-651.json").write_bytes(gzip.decompress((FIXTURE / "cupti-651.json.gz").read_bytes()))
    monkeypatch.setattr(ref, "profiler", lambda detail=False: _ReplayFlce(tmp_path / "cupti-651.json"))
    (ref.where.workspace_path / "liger_ops.py").write_text(OWN)
    result = ref.kernel_trace_analysis(top=10)
    assert len(result.kernels) == 10 and not {"element_mul_kernel", "liger_cross_entropy_kernel"} & {
        k.name for k in result.kernels}
    assert [(o.name, o.share_pct) for o in result.own_kernels] == [("element_mul_kernel", 0.89),
                                                                   ("liger_cross_entropy_kernel", 0.81)]
    assert result.own_regex == "^element_mul_kernel$|^liger_cross_entropy_kernel$"
