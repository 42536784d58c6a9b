"""Compiled-code provenance hashes the machine code, not the whole cubin
(kopt_mcp/profilers/cupti_inject/kopt_cupti_trace.py `code_sha256`), on cubins Triton 3.6's own ptxas
compiled from the Triton example's kernel (tests/fixtures/cubin/SOURCE.md): a comment inside the kernel
and renamed locals move only line info, so the hash stays; a changed expression changes it."""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

import pytest

from kopt_mcp.profilers.cupti import INJECT_DIR

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "cubin"


def _trace_module():
    spec = importlib.util.spec_from_file_location("kopt_trace_code_hash", Path(INJECT_DIR) / "kopt_cupti_trace.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _cubin(name: str) -> bytes:
    return (FIX / f"{name}.cubin").read_bytes()


def test_a_comment_or_renamed_locals_leave_the_machine_code_hash_unchanged_and_a_real_edit_does_not():
    pytest.importorskip("elftools")
    h = {n: _trace_module().code_sha256(_cubin(n)) for n in ("base", "comment", "renamed", "changed")}
    assert all(v.startswith("text:") for v in h.values())
    assert h["base"] == h["comment"] == h["renamed"]
    assert h["changed"] != h["base"]
    # the whole files differ in all four: hashing them would call the comment a code change
    assert len({hashlib.sha256(_cubin(n)).hexdigest() for n in h}) == 4


def test_without_pyelftools_or_an_elf_file_the_whole_binary_is_hashed_under_another_prefix(monkeypatch):
    mod = _trace_module()
    assert mod.code_sha256(b"not an ELF file") == "cubin:" + hashlib.sha256(b"not an ELF file").hexdigest()
    monkeypatch.setitem(sys.modules, "elftools", None)  # `import elftools...` raises ImportError
    monkeypatch.setitem(sys.modules, "elftools.elf", None)
    monkeypatch.setitem(sys.modules, "elftools.elf.elffile", None)
    assert mod.code_sha256(_cubin("base")) == "cubin:" + hashlib.sha256(_cubin("base")).hexdigest()
