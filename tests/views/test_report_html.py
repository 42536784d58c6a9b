"""The session report page: rendered from a real session's ledger and archived patches (toy repository,
real referee), every candidate-written string escaped, self-contained, written by `kopt-mcp report`,
served at GET /report behind the bearer token, and read back from a real headless Chromium."""

from __future__ import annotations

import base64
import functools
import http.server
import io
import json
import re
import shutil
import subprocess
import threading
from html.parser import HTMLParser
from pathlib import Path

import anyio
import httpx2
import matplotlib.image
import pytest

from kopt_mcp.app import cli
from kopt_mcp.commands.report import find_sessions
from kopt_mcp.testing.toy import make_toy_repo, set_kernel
from kopt_mcp.views.report_html import gpu_series, render_report, write_report, write_session_report

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'
TOKEN = "report-token-0123456789abcdefghij"


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """A real session: baseline, improved + commit, regressed (hostile hypothesis), incorrect, rejected
    (a protected file whose diff carries HTML), stopped. Returns (referee, its ledger events)."""
    from kopt_mcp.referee import Referee

    tmp = tmp_path_factory.mktemp("report")
    repo = make_toy_repo(tmp / "repo", {"1": 100.0, "2": 200.0})
    ref = Referee(repo, tag="r", lease_dir=tmp / "leases")
    try:
        ref.run_benchmark()
        ws = ref.where.workspace_path
        set_kernel(ws, {"1": 50.0, "2": 100.0})  # planted 2x win
        assert ref.save_and_test("global", "halve the work").verdict == "improved"
        assert ref.commit_improvement("halve the work").committed
        set_kernel(ws, {"1": 100.0, "2": 200.0})  # planted 2x loss
        assert ref.save_and_test("global", HOSTILE).verdict == "regressed"
        set_kernel(ws, {"1": 40.0, "2": 80.0}, {"2": 3})
        assert ref.save_and_test("n=2", "skip the tail").verdict == "incorrect"
        ref.revert_to_best("give up")
        (ws / "bench.py").write_text((ws / "bench.py").read_text() + f"\n# {HOSTILE}\n")
        assert ref.save_and_test("global", "edit the harness").verdict == "rejected"
        ref.stop("planted stop: the test ends the session")
        yield ref, ref.books.store.ledger()
    finally:
        ref.close()


def _expected_rows(events) -> list[tuple[int, str]]:
    """(number, verdict) of the attempts table, newest first: attempts, and reverts that archived a diff."""
    rows = [(e["attempt"], e["verdict"]) if e["event"] == "attempt" else (int(Path(e["archived"]).name[:4]), "reverted")
            for e in events if e["event"] == "attempt" or (e["event"] == "revert" and e.get("archived"))]
    return rows[::-1]


def _page(ref, events) -> str:
    from kopt_mcp.views.report_html import read_patches

    perf = (ref.where.workspace_path / "performance.md").read_text(encoding="utf-8")
    return render_report(events, read_patches(ref.books.store, events), metric="us_per_call", noise_pct=1.0,
                         performance_md=perf, generated_at="2026-11-23T00:00:00+00:00")


class Dom(HTMLParser):
    """Tags with their attributes, and the text of each <tr> of the attempts table, from an HTML page."""

    def __init__(self, html: str):
        super().__init__()
        self.tags: list[tuple[str, dict]] = []
        self.rows: list[list[str]] = []
        self._table = self._row = None
        self._depth = 0
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag == "table":
            self._depth += 1
            if a.get("id") == "attempts-table":
                self._table = self._depth
        if self._table and tag == "tr" and "attempt" in (a.get("class") or "").split():
            self._row = [a.get("data-attempt"), a.get("data-verdict"), ""]
            self.rows.append(self._row)
        if tag == "tr" and a.get("class") == "diff-row":
            self._row = None

    def handle_endtag(self, tag):
        if tag == "table":
            self._table = None if self._table == self._depth else self._table
            self._depth -= 1

    def handle_data(self, data):
        if self._row is not None:
            self._row[2] += data


def test_every_attempt_is_a_row_with_verdict_reason_deltas_and_diff(session):
    ref, events = session
    page = _page(ref, events)
    dom = Dom(page)
    attempts = [e for e in events if e["event"] == "attempt"]
    assert [(int(n), v) for n, v, _ in dom.rows] == _expected_rows(events)
    assert ("reverted" in {v for _, v, _ in dom.rows}) and "give up" in page
    by_n = {int(n): text for n, _, text in dom.rows}
    first = next(e for e in attempts if e["verdict"] == "improved")
    assert first["reason"] in by_n[first["attempt"]]  # ledger reason, verbatim (escaped, then parsed back)
    for c in first["classes"]:
        assert f"{c['key']}: {c['mean_pct']:+.2f}%" in by_n[first["attempt"]]
    # each attempt's archived diff, in a collapsible block
    assert page.count("<details><summary>diff of attempt") == len(dom.rows)
    assert "n=1" in page and "Stop Summary" in page and "planted stop: the test ends the session" in page
    # kept commit and BEST table
    commit = next(e for e in events if e["event"] == "commit")
    assert commit["commit"][:12] in page and 'id="best-table"' in page


def test_candidate_strings_are_escaped_and_the_page_loads_nothing(session):
    ref, events = session
    page = _page(ref, events)
    assert HOSTILE not in page and "<script" not in page.lower() and "<img src=x" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page  # hypothesis and the harness diff
    dom = Dom(page)
    for tag, attrs in dom.tags:
        for name in ("src", "href"):
            assert not attrs.get(name) or attrs[name].startswith(("data:image/png;base64,", "#")), (tag, attrs)
        assert tag not in {"script", "link", "iframe", "object", "embed"}
    assert "default-src 'none'" in page  # the page's own CSP forbids scripts and fetches


def test_charts_are_inline_pngs(session):
    ref, events = session
    imgs = {a["id"]: a["src"] for t, a in Dom(_page(ref, events)).tags if t == "img"}
    assert {"chart-progress", "chart-last-verdict"} <= set(imgs)
    for src in imgs.values():
        png = matplotlib.image.imread(io.BytesIO(base64.b64decode(src.split(",", 1)[1])), format="png")
        assert png.shape[0] > 100 and png.shape[1] > 300


def test_gpu_time_series_from_the_ledger_fields():
    events = [{"event": "baseline", "gpu_us": 10.0},
              {"event": "attempt", "attempt": 1, "verdict": "improved", "gpu": {"gpu_candidate_us": 8.0}},
              {"event": "commit", "attempt": 1, "gpu_us": 8.1},
              {"event": "attempt", "attempt": 2, "verdict": "failed", "gpu": None},
              {"event": "attempt", "attempt": 3, "verdict": "tie", "gpu": {"gpu_candidate_us": "bad"}}]
    s = gpu_series(events)
    assert s.best == [(0, 10.0), (1, 8.1)] and s.candidates == [(1, 8.0, "improved")]
    assert 'id="chart-gpu"' in render_report(events, {})
    assert 'id="chart-gpu-note"' in render_report(events[3:], {})


def test_empty_and_malformed_ledgers_render():
    for events in ([], [None, 3, {"event": "attempt", "attempt": "x"}, {"event": "baseline", "metrics": "no"}]):
        page = render_report(events, {})
        assert "no attempt yet" in page and "</html>" in page


def test_write_report_is_atomic_and_never_breaks_a_verdict(session, tmp_path):
    ref, _ = session
    path = write_session_report(ref, strict=True)
    assert path == ref.books.store.root / "report.html" and 'id="attempts-table"' in path.read_text()

    class Broken:
        root = tmp_path

        def ledger(self):
            raise OSError("disk gone")

    assert write_report(Broken()) is None  # the hook logs and carries on
    with pytest.raises(OSError):
        write_report(Broken(), strict=True)
    assert not list(tmp_path.iterdir())


def test_cli_report_finds_the_session_and_writes_the_page(session, tmp_path, capsys):
    ref, events = session
    assert [s[1]["tag"] for s in find_sessions(ref.where.repo_path)] == ["r"]
    out = tmp_path / "r.html"
    assert cli.main(["report", "--repo", str(ref.where.repo_path), "--tag", "r", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == str(out)
    assert [(int(n), v) for n, v, _ in Dom(out.read_text()).rows] == _expected_rows(events)
    assert cli.main(["report", "--repo", str(ref.where.repo_path), "--tag", "nope"]) == 2
    err = capsys.readouterr().err
    assert "no kopt-mcp session with tag 'nope'" in err and "sessions found: r" in err
    assert cli.main(["report", "--repo", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_http_report_needs_the_token(session):
    from kopt_mcp.app.http import build_http_app
    from kopt_mcp.app.server import build_server

    ref, _ = session
    app = build_http_app(build_server(ref), "127.0.0.1", TOKEN)

    async def get(headers):
        transport = httpx2.ASGITransport(app=app)
        async with httpx2.AsyncClient(transport=transport, base_url="http://127.0.0.1:8765") as c:
            return await c.get("/report", headers=headers)

    assert anyio.run(get, {}).status_code == 401
    assert anyio.run(get, {"authorization": "Bearer wrong-token-0123456789"}).status_code == 401
    ok = anyio.run(get, {"authorization": f"Bearer {TOKEN}"})
    assert ok.status_code == 200 and ok.headers["content-type"].startswith("text/html")
    assert 'id="attempts-table"' in ok.text and ok.headers["cache-control"] == "no-store"


# ---- a real browser ------------------------------------------------------------------------------------------

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
CHECK_PAGE = """<!DOCTYPE html><html><body><iframe id="f" src="report.html" width="1300" height="900"></iframe>
<pre id="out">pending</pre><script>
document.getElementById("f").addEventListener("load", () => {
  const d = document.getElementById("f").contentDocument, img = d.getElementById("chart-progress");
  const rows = [...d.querySelectorAll("#attempts-table tr.attempt")].map(r => [r.dataset.attempt,
    r.cells[2].innerText.trim(), r.cells[5].innerText.trim()]);
  document.getElementById("out").textContent = JSON.stringify({complete: img.complete, width: img.naturalWidth,
    height: img.naturalHeight, rows: rows, scripts: d.scripts.length});
});
</script></body></html>"""


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no access log on the test's stderr
        pass


def _chromium(args: list[str], profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                           "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                           f"--user-data-dir={profile}", *args], capture_output=True, text=True, timeout=180)


@pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (Debian: apt-get install chromium)")
def test_headless_chromium_renders_the_attempts_table_and_the_chart(session, tmp_path):
    ref, events = session
    site = tmp_path / "site"
    site.mkdir()
    (site / "report.html").write_text(_page(ref, events), encoding="utf-8")
    (site / "check.html").write_text(CHECK_PAGE, encoding="utf-8")
    handler = functools.partial(_QuietHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{httpd.server_address[1]}"
    try:
        # the browser's own view of the page: the check page reads the report's DOM (same origin)
        r = _chromium(["--virtual-time-budget=20000", "--dump-dom", f"{base}/check.html"], tmp_path / "p1")
        found = re.search(r'<pre id="out">(.*?)</pre>', r.stdout, re.S)
        assert found and found.group(1) != "pending", r.stderr[-2000:]
        seen = json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<")
                          .replace("&gt;", ">"))
        assert [(int(n), v) for n, v, _ in seen["rows"]] == _expected_rows(events)
        incorrect = next(e for e in events if e.get("verdict") == "incorrect")
        assert [r[2] for r in seen["rows"] if int(r[0]) == incorrect["attempt"]] == [incorrect["reason"].strip()]
        assert seen["complete"] and seen["width"] >= 800 and seen["height"] >= 300  # the chart decoded
        assert seen["scripts"] == 0  # the hostile hypothesis stayed text
        # and a screenshot of the page as a person sees it
        shot = tmp_path / "report.png"
        _chromium(["--window-size=1300,1800", f"--screenshot={shot}", f"{base}/report.html"], tmp_path / "p2")
        img = matplotlib.image.imread(shot)
        assert img.shape[:2] == (1800, 1300) and img[..., :3].std() > 0.05  # not a blank page
    finally:
        httpd.shutdown()
