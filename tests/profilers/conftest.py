"""Shared helpers for the profiler tests: copies of the recorded ncu outputs in tmp dirs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ncu"
RAW = FIXTURES / "h200_raw_page_torch_matmul_softmax.csv"
DETAILS = FIXTURES / "xplacer_cfd_097K_ncu_csv_details_head90.log"


@pytest.fixture
def ncu_dir(tmp_path: Path):
    """Make `tmp_path/<name>/ncu.csv` from a recorded fixture, optionally edited by `edit`
    (a function text -> text), and return the directory."""

    def make(fixture: Path, edit=None, name: str = "run") -> Path:
        out = tmp_path / name
        out.mkdir()
        if edit is None:
            shutil.copy(fixture, out / "ncu.csv")
        else:
            (out / "ncu.csv").write_text(edit(fixture.read_text()))
        return out

    return make
