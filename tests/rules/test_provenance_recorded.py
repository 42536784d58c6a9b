"""Compiled-code provenance (rules/provenance.py) on fingerprints read from real CUPTI traces of a
4 x H200 session (tests/fixtures/cupti/h200x4_liger_provenance/SOURCE.md): Liger's identical candidate
compiled and launched exactly as BEST (a GPU-time win of it would need the out-of-process
confirmation); its launch-only change (the same code on 528 programs instead of 132) is a change,
judged as usual. The Triton example's in-kernel rename differed as a whole cubin in that session."""

from __future__ import annotations

from pathlib import Path

from kopt_mcp.profilers.cupti import parse_cupti_dir
from kopt_mcp.rules.provenance import fingerprint, unchanged

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "cupti"
LIGER = "_rms_norm_(forward|backward)_kernel"


def _fp(folder: str, run: str, regex: str):
    return fingerprint(parse_cupti_dir(FIX / folder / run), regex)


def test_liger_identical_candidate_compiled_and_launched_as_best():
    best, cand = _fp("h200x4_liger_provenance", "0001-best-2", LIGER), _fp("h200x4_liger_provenance", "0001-candidate-1", LIGER)
    assert sorted(best.code) == ["_rms_norm_backward_kernel", "_rms_norm_forward_kernel"]
    assert unchanged(best, cand)


def test_liger_launch_only_change_is_a_change_with_the_same_compiled_code():
    best, cand = _fp("h200x4_liger_provenance", "0002-best-2", LIGER), _fp("h200x4_liger_provenance", "0002-candidate-1", LIGER)
    assert best.code == cand.code and not unchanged(best, cand)
    assert sorted(set(best.launches) ^ set(cand.launches)) == [
        "_rms_norm_backward_kernel|(132, 1, 1)|(256, 1, 1)|8192", "_rms_norm_backward_kernel|(528, 1, 1)|(256, 1, 1)|8192"]


def test_the_triton_rename_recorded_as_whole_cubin_hashes_differs_only_in_code():
    best, cand = _fp("h200x4_triton_rename", "0004-best-2", "softmax"), _fp("h200x4_triton_rename", "0004-candidate-1", "softmax")
    assert best.launches == cand.launches and best.code != cand.code
    assert all(not h.startswith(("text:", "cubin:")) for hs in best.code.values() for h in hs)  # recorded before the prefix
