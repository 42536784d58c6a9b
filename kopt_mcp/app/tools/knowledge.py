"""The knowledge tool and the skill / knowledge-base resources (read-only; no device, no state)."""

from __future__ import annotations

from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.tools import Tool
from pydantic import Field

from kopt_mcp.app.tools._adapter import READ_ONLY, referee, tool
from kopt_mcp.events import Trace
from kopt_mcp.knowledge import CLASSES, load_skills, retrieve
from kopt_mcp.paths import resources_dir
from kopt_mcp.results import KnowledgeResult

Bottleneck = Literal[CLASSES]  # type: ignore[valid-type]  # the knowledge base's classes, one source
Backend = Literal["triton", "cuda", "cutlass", "hip", "ck", "flydsl", "tilelang", "asm", "numpy"]


def register(tools: list[Tool]) -> None:
    @tool(tools, "Optimization techniques for a bottleneck", **READ_ONLY)
    async def optimization_knowledge(
        ctx: Context,
        bottleneck: Annotated[Bottleneck | None, Field(description="default: the latest trace's class")] = None,
        query: Annotated[str, Field(max_length=500, description='free text, e.g. "register spills"')] = "",
        vendor: Annotated[Literal["nvidia", "amd", "cpu"] | None, Field(description="default: the leased device's")] = None,
        backend: Annotated[Backend | None, Field(description="kernel language to prefer")] = None,
        max_chars: Annotated[int, Field(ge=500, le=16000, description=(
            "total text budget (a result stays well under a client's 25k-token cap; full pages: their URIs)"))] = 6000,
    ) -> KnowledgeResult:
        """Techniques with a short example kernel each that fit a bottleneck (GPU classes, or cpu-bound on
        a CPU device), within a character budget; call after kernel_trace_analysis. Returns hits best
        first (text, resource URI) and the skill docs for the vendor. Advice only: save_and_test judges.
        """
        ref = referee(ctx)
        source = "argument"
        if bottleneck is None:
            trace = ref.books.store.last(Trace)
            kind = trace.bottleneck.kind if trace is not None and trace.bottleneck is not None else None
            bottleneck, source = (kind, "latest kernel_trace_analysis") if kind in CLASSES else (None, "none")
        if vendor is None and ref.jobs.device is not None and ref.jobs.device.vendor in ("nvidia", "amd", "cpu"):
            vendor = ref.jobs.device.vendor
        hits = retrieve(bottleneck, query, vendor, backend, max_chars)  # KnowledgeError -> tool error
        skills = [s.name for s in load_skills() if vendor is None or vendor in s.vendors]
        if backend and backend in skills:
            skills = [backend] + [s for s in skills if s != backend]
        note = ("no bottleneck class given and no trace report with one yet: ranked by the query alone"
                if bottleneck is None else f"bottleneck {bottleneck} (from {source})")
        return KnowledgeResult(bottleneck=bottleneck, bottleneck_source=source, vendor=vendor, hits=hits,
                               total_chars=sum(len(h.text) for h in hits), max_chars=max_chars, skills=skills,
                               note=note)


def register_resources(mcp: MCPServer) -> None:
    """Every skill page (kopt://skills/<name>/<page>.md) and knowledge entry
    (kopt://knowledge/<id>, plus kopt://knowledge/README.md) as a text resource, read on request."""
    root = resources_dir()

    def add(uri: str, path, name: str, description: str) -> None:
        def read() -> str:
            return path.read_text(encoding="utf-8")

        mcp.resource(uri, name=name, mime_type="text/markdown", description=description)(read)

    for page in sorted((root / "skills").glob("*/*.md")):
        skill = page.parent.name
        add(f"kopt://skills/{skill}/{page.name}", page, f"skill {skill}: {page.name}",
            f"Offline skill doc for rewriting kernels in {skill} ({page.name}); sources and checked versions inside.")
    kb = root / "knowledge"
    if (kb / "README.md").exists():
        add("kopt://knowledge/README.md", kb / "README.md", "knowledge base tree",
            "Bottleneck class -> technique tree of the optimization knowledge base.")
    for entry in sorted(kb.glob("*/*.md")):
        add(f"kopt://knowledge/{entry.stem}", entry, f"technique {entry.stem}",
            f"Optimization technique ({entry.parent.name}): when it helps, how, an example kernel, pitfalls, sources.")
