"""Typed ledger events (kopt_mcp.events): the write check refuses what a buggy writer would slip in,
the one reader reads every recorded ledger version, and performance.md renders byte-identically.

The recorded ledgers under tests/fixtures/ledgers/ are real session files: a CPU demo of the
workspace-layout version (before the hash chain: no `id`/`prev`, no performance.md rows), a chaos
run of the hash-chained version (kills and recoveries), and a session with a CUPTI trace. Their
`.performance.md` files are what the renderer before typed events produced from them.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from kopt_mcp import events as ev
from kopt_mcp.errors import LedgerEventError
from kopt_mcp.events import EVENTS, Attempt, Baseline, Commit, Other, Trace, as_events, check_record, parse_event
from kopt_mcp.ledger import Store, new_record, render_performance, verify_ledger

LEDGERS = Path(__file__).parent / "fixtures" / "ledgers"
RECORDED = sorted(LEDGERS.glob("*.jsonl"))
SRC = Path(ev.__file__).parents[1]  # kopt_mcp/: events is a package


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# --- writing: the cheats a buggy writer would slip in ------------------------------------------


def test_every_event_kind_the_code_writes_has_a_model():
    written = set()
    for f in SRC.rglob("*.py"):
        written |= set(re.findall(r'(?:\brecord|\.log|\bnew_record)\(\s*"([A-Za-z_]+)"', f.read_text(encoding="utf-8")))
    assert {"attempt", "commit", "baseline", "trace", "snapshot"} <= written  # the scan sees the writers
    assert written - set(EVENTS) == set(), "declare these kinds in kopt_mcp/events/"


@pytest.mark.parametrize("kind, fields, says", [
    ("atempt", {"attempt": 1, "verdict": "tie"}, "unknown ledger event 'atempt'"),
    ("attempt", {"attempt": "1", "verdict": "tie"}, "attempt: Input should be a valid integer"),
    ("attempt", {"attempt": 1, "verdict": "improvd"}, "verdict: Input should be"),
    ("attempt", {"attempt": 1, "verdict": "tie", "hypotesis": "x"}, "hypotesis: Extra inputs are not permitted"),
    ("attempt", {"verdict": "tie"}, "lacks required field(s) attempt"),
    ("commit", {"attempt": 1, "commit": "abc", "gpu_us": "12.5"}, "gpu_us: Input should be a valid number"),
    ("commit", {"attempt": 1, "commit": "abc", "rows": [{"date": "d"}]}, "rows.0.commit: Field required"),
    ("trace", {"kernels": [{"calls": 3}]}, "kernels.0.name: Field required"),
    ("revert", {"archived": object()}, "is not JSON"),
])
def test_new_record_refuses_a_wrong_record_naming_the_field(kind, fields, says):
    with pytest.raises(LedgerEventError) as e:
        new_record(kind, **fields)
    assert says in str(e.value) and isinstance(e.value, ValueError)


def test_store_log_checks_typed_kinds_and_takes_free_form_diagnostics(tmp_path):
    s = Store(tmp_path)
    with pytest.raises(LedgerEventError, match="Extra inputs"):
        s.log("trace", kernels=[], run_dri="x")  # a typed kind is checked as strictly as new_record
    assert not s.ledger_path.exists()
    s.log("probe_note", path=tmp_path / "x", n=3)  # not a registered kind: free-form, read as Other
    (note,) = s.events()
    assert isinstance(note, Other) and note.event == "probe_note" and note.misfit is None
    assert (note.model_extra["path"], note.model_extra["n"]) == (str(tmp_path / "x"), 3)
    with pytest.raises(LedgerEventError, match="unknown ledger event"):
        new_record("probe_note", n=3)  # new_record (state transitions) never takes free-form kinds


def test_the_record_written_is_the_fields_given_json_ready_without_defaults(tmp_path):
    rec = new_record("revert", reason="r", archived=tmp_path / "0001-reverted.patch", changed=["k.py"], attempt=1)
    assert rec["archived"] == str(tmp_path / "0001-reverted.patch")
    assert set(rec) == {"at", "event", "id", "reason", "archived", "changed", "attempt"}  # no defaults added


def test_issue_13_fields_slot_device_and_the_conflict_verdict():
    rec = new_record("attempt", attempt=4, verdict="conflict", reason="BEST moved", slot="agent-b",
                     device="nvidia:0:GPU-6f1c")
    a = parse_event(rec)
    assert isinstance(a, Attempt) and (a.slot, a.device, a.verdict) == ("agent-b", "nvidia:0:GPU-6f1c", "conflict")
    for kind, fields in (("commit", {"attempt": 1, "commit": "abc"}), ("revert", {}), ("trace", {}),
                         ("run_benchmark", {}), ("snapshot", {"attempt": 1, "tree": "t"}),
                         ("stopped", {"reason": "5 consecutive measured regressions"}), ("recovered", {"action": "a"})):
        extra = {"device": "cpu:0"} if kind not in ("stopped", "recovered") else {}
        assert parse_event(new_record(kind, slot="a", **extra, **fields)).slot == "a"
    with pytest.raises(LedgerEventError, match="device"):
        new_record("attempt", attempt=4, verdict="tie", device={"vendor": "nvidia"})  # an id, not a dump
    # the baseline has recorded a DeviceInfo dump since the start; an id string is accepted too
    dump = {"vendor": "nvidia", "index": 0, "name": "NVIDIA H100", "env": {"CUDA_VISIBLE_DEVICES": "0"}, "note": ""}
    for device in (dump, "nvidia:0:GPU-6f1c"):
        assert parse_event(new_record("baseline", best_commit="a", metrics={"n=1": 1.0}, device=device))


# --- reading: every version, never raising ----------------------------------------------------------


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_recorded_ledgers_read_as_typed_events(path):
    raw = _records(path)
    typed = as_events(raw)
    assert len(typed) == len(raw) and not [e for e in typed if isinstance(e, Other)]
    assert [e.event for e in typed] == [r["event"] for r in raw]
    for r in raw:  # what the code of that day wrote passes today's write check
        check_record({k: v for k, v in r.items() if k != "prev"})


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_performance_md_renders_byte_identical_from_recorded_ledgers(path):
    expected = path.with_suffix(".performance.md").read_text(encoding="utf-8")
    assert render_performance(_records(path), "us_per_call") == expected
    assert render_performance(as_events(_records(path)), "us_per_call") == expected  # typed input too


def test_the_chaos_ledger_still_verifies_and_reads_through_the_store(tmp_path):
    shutil.copy(LEDGERS / "2026-11-23-chaos-c3.jsonl", tmp_path / "ledger.jsonl")
    s = Store(tmp_path)
    assert s.verify() == [] and verify_ledger(s.ledger_path) == []
    commits = [e for e in s.events() if isinstance(e, Commit)]
    assert commits and all(len(c.commit) == 40 and c.rows for c in commits)
    assert s.last(Attempt) == [e for e in s.events() if isinstance(e, Attempt)][-1]


def test_old_records_lack_fields_that_read_as_defaults():
    old = [r for r in _records(LEDGERS / "2026-11-23-demo-cpu-workspace-layout.jsonl")]
    assert all("id" not in r for r in old)  # written before the hash chain
    typed = as_events(old)
    assert all(e.id is None and e.prev is None for e in typed)
    base = next(e for e in typed if isinstance(e, Baseline))
    assert base.rows == [] and base.device.name and base.slot is None and base.metrics


def test_the_trace_keeps_vendor_metrics_of_its_kernel_rows():
    trace = next(e for e in as_events(_records(LEDGERS / "2026-11-24-cupti-trace.jsonl")) if isinstance(e, Trace))
    assert trace.kernels and trace.kernels[0].name and trace.kernels[0].avg_us > 0
    assert trace.bottleneck is None or trace.bottleneck.kind


def test_unknown_fields_are_ignored_and_a_misfit_reads_as_other_saying_why():
    later = parse_event({"event": "attempt", "attempt": 3, "verdict": "tie", "written_by_a_later_version": [1]})
    assert isinstance(later, Attempt) and later.attempt == 3
    bad = parse_event({"event": "attempt", "attempt": 3, "verdict": "tie", "classes": [{"mean_pct": 1.0}]})
    assert isinstance(bad, Other) and bad.event == "attempt" and "classes.0.key" in bad.misfit
    assert bad.model_extra["attempt"] == 3  # nothing of the record is lost
    for junk in (None, 3, "x", [], {}, {"event": 7}, {"event": "attempt", "attempt": None}, {"event": "x", "misfit": 3},
                 {"event": "attempt", "attempt": 1, "verdict": "tie", "gpu": 5, 7: "int key"}):
        e = parse_event(junk)
        assert e is None or isinstance(e, Other)


def test_the_discriminated_union_agrees_with_parse_event():
    adapter = TypeAdapter(ev.Event)
    for r in _records(LEDGERS / "2026-11-23-chaos-c3.jsonl")[:12]:
        assert adapter.validate_python(r, context={"read": True}) == parse_event(r)
    assert isinstance(adapter.validate_python({"event": "free_form", "x": 1}), Other)
