"""The optimization knowledge base and the skill docs: loading, and retrieval within a character budget.

Tree (`resources/knowledge/`): bottleneck class folder -> technique entry. Each entry is Markdown
with a TOML front matter between `+++` lines (id, title, classes, vendors, backends, keywords,
signals, summary). Skills (`resources/skills/<name>/`): SKILL.md (same front matter style: name,
title, description, vendors) plus reference pages.

Retrieval ranks entries for a bottleneck class (the trace report's `memory-bound`,
`compute-bound`, `latency/occupancy-bound`, and `cpu-bound` for a py-spy profile on a CPU device;
those entries have vendor "cpu"), a vendor, a backend and free text; free text is
scored with BM25 (the bm25s library) over title, summary, keywords, signals and body. Results are
cut to a character budget so an agent's context stays bounded.
"""

from __future__ import annotations

import functools
import re
import tomllib
from pathlib import Path

from pydantic import BaseModel

from kopt_mcp.errors import KnowledgeError
from kopt_mcp.paths import resources_dir

CLASSES = ("memory-bound", "compute-bound", "latency/occupancy-bound", "cpu-bound")
MIN_PART_CHARS = 600  # the least of a technique worth returning cut
_FRONT = re.compile(r"\A\+\+\+\n(.*?)\n\+\+\+\n", re.S)


class Entry(BaseModel):
    """One technique of the knowledge base. `uri` is its MCP resource address."""

    id: str
    title: str
    classes: list[str]
    vendors: list[str]
    backends: list[str]
    keywords: list[str]
    signals: list[str]
    summary: str
    body: str
    uri: str


class Skill(BaseModel):
    """One skill folder: SKILL.md's front matter and text, and its reference page names."""

    name: str
    title: str
    description: str
    vendors: list[str]
    text: str
    pages: list[str]


class Hit(BaseModel):
    """One retrieved technique: why it ranked, and its text (full, or cut to fit the budget)."""

    id: str
    title: str
    classes: list[str]
    score: float
    why: list[str]
    uri: str
    text: str
    truncated: bool


def split_front_matter(text: str, path: Path) -> tuple[dict, str]:
    """(front matter as a dict, body) of a `+++`-fenced TOML front matter file. Raises KnowledgeError."""
    m = _FRONT.match(text)
    if not m:
        raise KnowledgeError(f"{path}: no TOML front matter between +++ lines at the top")
    try:
        return tomllib.loads(m.group(1)), text[m.end():]
    except tomllib.TOMLDecodeError as e:
        raise KnowledgeError(f"{path}: front matter is not valid TOML ({e})") from e


def _model(cls, path: Path, meta: dict, **fields):
    """`cls(**meta, **fields)`, or KnowledgeError naming `path` when the front matter does not fit."""
    try:
        return cls(**meta, **fields)
    except (TypeError, ValueError) as e:
        raise KnowledgeError(f"{path}: front matter fields do not fit ({e})") from e


@functools.cache
def load_entries(root: Path | None = None) -> tuple[Entry, ...]:
    """Every knowledge entry under `root` (default: the bundled resources/knowledge), sorted by id."""
    root = root or resources_dir() / "knowledge"
    out = []
    for path in sorted(root.glob("*/*.md")):
        meta, body = split_front_matter(path.read_text(encoding="utf-8"), path)
        out.append(_model(Entry, path, meta, body=body.strip(), uri=f"kopt://knowledge/{meta.get('id')}"))
    return tuple(sorted(out, key=lambda e: e.id))


@functools.cache
def load_skills(root: Path | None = None) -> tuple[Skill, ...]:
    """Every skill folder under `root` (default: the bundled resources/skills), sorted by name."""
    root = root or resources_dir() / "skills"
    out = []
    for skill_md in sorted(root.glob("*/SKILL.md")):
        text = skill_md.read_text(encoding="utf-8")
        meta, _ = split_front_matter(text, skill_md)
        pages = sorted(p.name for p in skill_md.parent.glob("*.md"))
        out.append(_model(Skill, skill_md, meta, text=text, pages=pages))
    return tuple(out)


def section(body: str, heading: str) -> str:
    """The text under `## heading` in `body` (up to the next `## `), or '' if absent."""
    m = re.search(rf"^## {re.escape(heading)}\s*\n(.*?)(?=^## |\Z)", body, re.S | re.M)
    return m.group(1).strip() if m else ""


def digest(e: Entry) -> str:
    """An entry cut to what an agent acts on: title, summary, signals, How and Example (the full
    page, with When it helps, Pitfalls and Sources, stays at its URI)."""
    parts = [f"# {e.title} ({e.uri})", e.summary, "Signals: " + "; ".join(e.signals) if e.signals else "",
             "## How\n" + section(e.body, "How"), "## Example\n" + section(e.body, "Example")]
    return "\n\n".join(p for p in parts if p.strip())


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9_]+", text.lower())


def _bm25_scores(entries: tuple[Entry, ...], query_tokens: list[str]) -> list[float]:
    docs = tuple(" ".join([e.title, e.summary, *e.keywords, *e.signals, *e.backends, e.body]) for e in entries)
    return [float(x) for x in _bm25(docs).get_scores(query_tokens)]


@functools.cache
def _bm25(docs: tuple[str, ...]):
    import bm25s

    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(docs, show_progress=False), show_progress=False)
    return retriever


def retrieve(bottleneck: str | None = None, query: str = "", vendor: str | None = None,
             backend: str | None = None, max_chars: int = 6000,
             entries: tuple[Entry, ...] | None = None) -> list[Hit]:
    """The most relevant techniques, best first, whose digests (`digest`) together fit `max_chars`.

    With no bottleneck, query or backend there is nothing to rank by: the result is empty.
    Score: +3 when `bottleneck` is the entry's primary class, +1.5 when it is another of its
    classes; +1 for the vendor, +1 for the backend; plus the BM25 score of `query`. Entries that
    do not apply to `vendor` are left out. Every hit carries its title, why it ranked and its
    resource URI; the last one that fits only in part is cut (truncated=True) if at least
    MIN_PART_CHARS remain, and the rest dropped.
    Raises KnowledgeError for an unknown bottleneck class or a budget under 500 characters.
    """
    if bottleneck is not None and bottleneck not in CLASSES:
        raise KnowledgeError(f"unknown bottleneck class {bottleneck!r}; use one of {', '.join(CLASSES)} "
                             "(kernel_trace_analysis reports it)")
    if max_chars < 500:
        raise KnowledgeError("max_chars must be at least 500: one technique's summary needs about that")
    entries = entries if entries is not None else load_entries()
    text_scores = [0.0] * len(entries)
    q = _tokens(query)
    if q and entries:
        text_scores = _bm25_scores(entries, q)
    ranked = []
    for e, ts in zip(entries, text_scores, strict=True):
        if vendor and vendor.lower() not in e.vendors:
            continue
        score, why = ts, [f"text match {ts:.2f}"] if ts > 0 else []
        if bottleneck and e.classes and e.classes[0] == bottleneck:
            score, why = score + 3.0, [*why, f"primary technique for {bottleneck}"]
        elif bottleneck and bottleneck in e.classes:
            score, why = score + 1.5, [*why, f"also applies to {bottleneck}"]
        if vendor:
            score, why = score + 1.0, [*why, f"applies to {vendor.lower()}"]
        if backend and backend.lower() in e.backends:
            score, why = score + 1.0, [*why, f"has a {backend.lower()} example or recipe"]
        if bottleneck or q or backend:  # with nothing to rank by, nothing is returned
            ranked.append((score, e, why))
    ranked.sort(key=lambda t: (-t[0], t[1].id))
    hits, left = [], max_chars
    for score, e, why in ranked:
        full = digest(e)
        if left < MIN_PART_CHARS:  # a sliver of a technique helps nobody
            break
        cut = len(full) > left
        marker = f"\n[... cut; read {e.uri}]"
        text = full[: left - len(marker)].rstrip() + marker if cut else full
        hits.append(Hit(id=e.id, title=e.title, classes=e.classes, score=round(score, 3), why=why, uri=e.uri,
                        text=text, truncated=cut))
        left -= len(text)
    return hits
