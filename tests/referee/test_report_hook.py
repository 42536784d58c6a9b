"""The HTML report after every operation (kopt_mcp.referee.auto_report): written after the baseline
and a verdict when on (the default), not when $KOPT_HTML_REPORT is "0" (the test suite's setting,
tests/conftest.py); the report resource renders it on demand either way."""

from __future__ import annotations

from kopt_mcp.app.tools.report import current_report
from kopt_mcp.testing.toy import kernel_source
from kopt_mcp.views.report_html import REPORT_NAME


def test_the_report_follows_the_baseline_and_each_verdict_when_on(toy_repo, make_referee, monkeypatch):
    monkeypatch.setenv("KOPT_HTML_REPORT", "1")
    r = make_referee(toy_repo)
    path = r.books.store.root / REPORT_NAME
    r.run_benchmark()
    assert path.exists() and 'id="attempts-table"' in path.read_text()
    before = path.stat().st_mtime_ns
    (r.where.workspace_path / "kernel.py").write_text(kernel_source({"1": 80.0, "2": 160.0}))
    assert r.save_and_test("global", "faster").verdict == "improved"
    assert path.stat().st_mtime_ns > before and 'data-verdict="improved"' in path.read_text()


def test_with_the_report_off_none_is_written_and_the_resource_renders_it(toy_repo, make_referee, monkeypatch):
    monkeypatch.setenv("KOPT_HTML_REPORT", "0")
    r = make_referee(toy_repo)
    r.run_benchmark()
    path = r.books.store.root / REPORT_NAME
    assert not path.exists()
    assert 'id="attempts-table"' in current_report(r) and path.exists()
