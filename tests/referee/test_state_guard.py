"""referee/state_guard.py: what changed in the state folder during a run is found and put back."""

from __future__ import annotations

from pathlib import Path

from kopt_mcp.referee.state_guard import restore, seal
from kopt_mcp.testing.toy import kernel_source


def test_every_kind_of_change_is_found_and_put_back(ref):
    (ref.where.workspace_path / "kernel.py").write_text(kernel_source({"1": 150.0, "2": 300.0}))
    v = ref.save_and_test("global", "slower")
    patch = Path(v.patch_path)
    store, ws, prefix = ref.books.store, ref.where.ws, ref.where.ref_prefix
    files = {p: p.read_bytes() for p in (patch, store.state_path, store.ledger_path)}
    ref_name = ref.where.attempt_ref(1)
    frozen = ws.git.rev_parse(ref_name)
    before = seal(store, ws, prefix)
    patch.write_text("forged\n")
    store.state_path.write_text("{}")
    store.ledger_path.unlink()
    (store.attempts / "0009-improved.patch").write_text("a patch no attempt made\n")
    ws.git.update_ref("-d", ref_name)
    changes, lost = restore(store, ws, prefix, before)
    assert {(c.kind, c.path) for c in changes} == {
        ("rewrote", f"attempts/{patch.name}"), ("rewrote", "state.json"), ("deleted", "ledger.jsonl"),
        ("added", "attempts/0009-improved.patch"), ("deleted", ref_name)}
    assert lost == []
    assert {p: p.read_bytes() for p in files} == files
    assert not (store.attempts / "0009-improved.patch").exists()
    assert ws.git.rev_parse(ref_name) == frozen
    assert restore(store, ws, prefix, before) == ([], [])  # nothing left to put back
