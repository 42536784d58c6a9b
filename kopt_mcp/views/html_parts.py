"""Small HTML pieces the report's sections share: the page's CSS, verdict colors, escaping and number
cells, inline PNGs, markdown and diffs (pure: text in, HTML text out).

Every string that comes from the ledger, a patch or performance.md is written through `esc`
(html.escape, quotes too) or `markdown` (raw HTML off). Numbers: `fmt` 4 significant digits, `pct` a
change in % with + = better (colored), `ratio` a factor written `1.234x`.
"""

from __future__ import annotations

import base64
import html
import math

from kopt_mcp.events import DeviceRecord

VERDICT_COLORS = {"improved": "#2ca02c", "tie": "#1f77b4", "regressed": "#d62728", "divergent": "#ff7f0e",
                  "incorrect": "#8c564b", "failed": "#7f7f7f", "rejected": "#9467bd", "abandoned": "#555555",
                  "interrupted": "#bcbd22", "cancelled": "#bbbbbb", "conflict": "#e377c2", "reverted": "#6c757d"}
#: the badge of an improved attempt whose commit was refused (never drawn as a keep)
REFUSED_COLOR = "#a0522d"

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;color:#1d1d1f;background:#f6f7f9}
main{max-width:1280px;margin:0 auto;padding:18px 24px 48px}
h1{font-size:22px;margin:6px 0 2px}h2{font-size:17px;margin:26px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
.sub{color:#555}.cards{display:flex;flex-wrap:wrap;gap:10px;margin:12px 0}
.card{background:#fff;border:1px solid #e1e3e8;border-radius:8px;padding:8px 14px;min-width:110px}
.card b{display:block;font-size:20px}.card span{color:#666;font-size:12px}
table{border-collapse:collapse;background:#fff;width:100%;font-size:13px}
th,td{border:1px solid #e1e3e8;padding:4px 7px;text-align:left;vertical-align:top}
th{background:#eef0f4;font-weight:600}td.t{white-space:nowrap;font-size:12px}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.badge{display:inline-block;color:#fff;border-radius:10px;padding:0 8px;font-size:12px;font-weight:600}
.better{color:#1a7f37}.worse{color:#c62828}.muted{color:#777}.screen{color:#777;font-size:12px}
figure{background:#fff;border:1px solid #e1e3e8;border-radius:8px;margin:10px 0;padding:8px;text-align:center}
figure img{max-width:100%;height:auto}figcaption{color:#555;font-size:12px}
details>summary{cursor:pointer;color:#0b57d0}pre{background:#0f1115;color:#e6e6e6;padding:8px;overflow:auto;
max-height:480px;font:12px/1.35 ui-monospace,SFMono-Regular,Menlo,monospace;white-space:pre}
pre .add{color:#7ee787}pre .del{color:#ff7b72}pre .hunk{color:#79c0ff}
.md table{width:auto}.md code{font-size:12px}.stop{background:#fff4e5;border:1px solid #f0c36d;border-radius:8px;padding:4px 14px}
"""


def esc(x) -> str:
    """`x` as text, HTML-escaped (quotes too); None as ''."""
    return html.escape("" if x is None else str(x), quote=True)


def num(x) -> float | None:
    """`x` as a finite float, or None (bools, strings and NaN are no numbers here)."""
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def fmt(x, unit: str = "") -> str:
    """A number with 4 significant digits and `unit`, or '-'."""
    v = num(x)
    return "-" if v is None else f"{v:.4g}{unit}"


def pct(x) -> str:
    """A change in % (+ = better) as a colored cell body."""
    v = num(x)
    if v is None:
        return '<span class="muted">-</span>'
    return f'<span class="{"better" if v > 0 else "worse" if v < 0 else ""}">{v:+.2f}%</span>'


def ratio(x) -> str:
    """A factor (BEST / candidate: above 1 = faster) as '1.234x', colored like `pct`."""
    v = num(x)
    if v is None:
        return '<span class="muted">-</span>'
    return f'<span class="{"better" if v > 1 else "worse" if v < 1 else ""}">{v:.3f}x</span>'


def utc(at) -> str:
    """An ISO time from the ledger as 'YYYY-MM-DD HH:MM:SS' (UTC); other text as it is."""
    return str(at or "").replace("T", " ").replace("+00:00", "")


def device(dev: DeviceRecord | str | None) -> tuple[str, str]:
    """(name, vendor) of a baseline's device: a DeviceInfo dump, or an id such as "nvidia:0:GPU-..."."""
    if isinstance(dev, DeviceRecord):
        return dev.name or "?", dev.vendor or "?"
    return (dev, dev.split(":", 1)[0]) if dev else ("?", "?")


def badge(verdict: str, text: str | None = None, color: str | None = None) -> str:
    """A verdict's colored badge (`text` instead of the verdict's name where given)."""
    bg = color or VERDICT_COLORS.get(verdict, "#444")
    return f'<span class="badge" style="background:{bg}">{esc(verdict if text is None else text)}</span>'


def img(png: bytes, alt: str, ident: str) -> str:
    """An <img> holding `png` inline (a data: URI)."""
    data = base64.b64encode(png).decode("ascii")
    return f'<img id="{ident}" alt="{esc(alt)}" src="data:image/png;base64,{data}">'


def figure(ident: str, png: bytes, caption: str) -> str:
    """A captioned inline chart."""
    return f"<figure>{img(png, caption, ident)}<figcaption>{esc(caption)}</figcaption></figure>"


def split_performance(text: str | None) -> tuple[str, str]:
    """(performance.md without the Stop Summary, the Stop Summary block or '')."""
    if not text:
        return "", ""
    i = text.find("## Stop Summary")
    return (text, "") if i < 0 else (text[:i], text[i:])


def markdown(text: str) -> str:
    """Markdown -> HTML with raw HTML disabled (it is escaped), tables on; markdown-it blocks
    javascript:/data: links."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False}).enable("table").render(text)


def diff_html(patch: str) -> str:
    """A unified diff, escaped, its added / removed / hunk lines in spans for color."""
    out = []
    for line in patch.splitlines():
        cls = ("hunk" if line.startswith("@@") else "add" if line.startswith("+") and not line.startswith("+++")
               else "del" if line.startswith("-") and not line.startswith("---") else "")
        out.append(f'<span class="{cls}">{esc(line)}</span>' if cls else esc(line))
    return "\n".join(out)
