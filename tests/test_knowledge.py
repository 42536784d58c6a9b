"""Skill docs and the knowledge base: every file is well formed and sourced, and retrieval returns
bounded, relevant techniques for each bottleneck class."""

from __future__ import annotations

import re

import pytest

from kopt_mcp.errors import KnowledgeError
from kopt_mcp.knowledge import CLASSES, load_entries, load_skills, retrieve, split_front_matter
from kopt_mcp.paths import resources_dir

SKILLS = ("flydsl", "tilelang", "ck", "asm", "triton", "cuda")
SKILL_HEADINGS = ["When to pick it", "What it wins on which hardware", "Rewrite recipe", "Correctness traps",
                  "Reference pages", "Sources and checked versions"]
ROOT = resources_dir()
LINK = re.compile(r"\]\(([^)#\s]+\.md)\)")


def test_every_required_skill_exists_with_its_front_matter():
    skills = {s.name: s for s in load_skills()}
    assert set(SKILLS) <= set(skills)
    for s in skills.values():
        assert s.title and len(s.description) > 40 and set(s.vendors) <= {"nvidia", "amd"} and s.vendors
        assert len(s.pages) >= 2, f"{s.name}: SKILL.md and at least one reference page"


@pytest.mark.parametrize("name", SKILLS)
def test_skill_has_the_sections_in_order_and_a_dated_sources_table(name):
    text = (ROOT / "skills" / name / "SKILL.md").read_text()
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert [h for h in headings if h in SKILL_HEADINGS] == SKILL_HEADINGS
    sources = text.split("## Sources and checked versions", 1)[1]
    rows = [r for r in sources.splitlines() if r.startswith("|") and not re.match(r"\|\s*-", r)][1:]
    assert len(rows) >= 3 and all("checked 2026-" in r for r in rows), rows[:3]


@pytest.mark.parametrize("page", sorted((ROOT / "skills").glob("*/*.md")), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_skill_pages_link_only_to_pages_that_exist_and_name_their_sources(page):
    text = page.read_text()
    for target in LINK.findall(text):
        if "://" not in target:
            assert (page.parent / target).resolve().exists(), f"{page}: broken link {target}"
    if page.name != "SKILL.md":
        assert text.startswith("# ") and "\n## Sources" in text


def test_knowledge_entries_are_well_formed_and_sit_under_their_primary_class():
    entries = load_entries()
    assert len(entries) >= 12 and len({e.id for e in entries}) == len(entries)
    for path in (ROOT / "knowledge").glob("*/*.md"):
        meta, body = split_front_matter(path.read_text(), path)
        assert meta["id"] == path.stem
        assert meta["classes"][0].replace("/", "-") == path.parent.name
        assert set(meta["classes"]) <= set(CLASSES) and len(meta["summary"]) <= 200
        for heading in ("When it helps", "How", "Example", "Pitfalls", "Sources"):
            assert f"## {heading}" in body, f"{path}: no ## {heading}"
    covered = {c for e in entries for c in e.classes}
    assert covered == set(CLASSES)


def test_the_issue_techniques_are_all_in_the_tree():
    ids = " ".join(e.id for e in load_entries())
    for needle in ("tma", "pid-swizzle", "persistent", "pipelining", "bank-conflicts", "vectorized", "split-k",
                   "register-pressure", "mfma", "wgmma"):
        assert needle in ids, needle


@pytest.mark.parametrize("cls", CLASSES)
@pytest.mark.parametrize("budget", [1500, 6000, 12000])
def test_retrieval_per_class_is_bounded_and_leads_with_the_class_own_techniques(cls, budget):
    hits = retrieve(cls, max_chars=budget)
    assert hits and sum(len(h.text) for h in hits) <= budget
    assert hits[0].classes[0] == cls
    assert all(cls in h.classes for h in hits[:2])
    assert all(not h.truncated for h in hits[:-1])


def test_vendor_filter_drops_techniques_of_the_other_vendor():
    amd = {h.id for h in retrieve("compute-bound", vendor="amd", max_chars=20000)}
    nv = {h.id for h in retrieve("compute-bound", vendor="nvidia", max_chars=20000)}
    assert any("mfma" in i for i in amd) and not any("wgmma" in i for i in amd)
    assert any("wgmma" in i for i in nv) and not any("mfma" in i for i in nv)


CPU_TECHNIQUES = {"numpy-vectorization", "numpy-temporaries-in-place", "cpu-threads", "cpu-cache-blocking"}


def test_a_cpu_session_gets_the_four_cpu_techniques_within_the_default_budget_and_no_gpu_one():
    hits = retrieve("cpu-bound", vendor="cpu")  # the knowledge tool's defaults on a CPU device
    assert {h.id for h in hits} == CPU_TECHNIQUES and not any(h.truncated for h in hits)
    entries = {e.id: e for e in load_entries()}
    assert all(entries[i].vendors == ["cpu"] and "## Sources" in entries[i].body for i in CPU_TECHNIQUES)
    gpu = {h.id for h in retrieve("memory-bound", vendor="nvidia", max_chars=60000)}
    assert not gpu & CPU_TECHNIQUES
    assert retrieve(None, "python loop per row", vendor="cpu", max_chars=3000)[0].id == "numpy-vectorization"


def test_free_text_finds_the_matching_technique_without_a_class():
    assert retrieve(None, "register spills scratch", max_chars=3000)[0].id == "register-pressure"
    assert retrieve(None, "shared memory bank conflicts padding", max_chars=3000)[0].id == "smem-bank-conflicts"


def test_bad_class_and_tiny_budget_are_refused_with_what_to_use():
    with pytest.raises(KnowledgeError, match="memory-bound"):
        retrieve("slow")
    with pytest.raises(KnowledgeError, match="500"):
        retrieve("memory-bound", max_chars=100)
