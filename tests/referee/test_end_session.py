"""end_session (referee/gain.py, the tool and `kopt-mcp end-session`): the agent ends the session on
purpose. The gain is measured paired (the toy plants an exact 2x), the Stop Summary (reason `ended by
the agent`) is committed on the session's branch, the phase is `stopped` and candidate tools refuse
with that reason; a pending candidate or untested edits are refused first, and nothing changes."""

from __future__ import annotations

import json

import pytest

from kopt_mcp.app.cli import main
from kopt_mcp.errors import RefereeError, SessionError
from kopt_mcp.referee.core import STOP_MESSAGE
from kopt_mcp.referee.gain import ENDED
from kopt_mcp.testing.toy import set_kernel

HALF = {"1": 50.0, "2": 100.0}  # 2x faster in both classes


def _kept(r):
    set_kernel(r.where.workspace_path, HALF)
    assert r.save_and_test("global", "halve").verdict == "improved"
    assert r.commit_improvement("halve").committed


def _summary(r) -> str:
    return (r.where.workspace_path / "performance.md").read_text().split("## Stop Summary", 1)[1]


def test_end_session_measures_the_gain_commits_the_summary_and_stops(ref):
    _kept(ref)
    best = ref.books.state.best.commit
    out = ref.end_session("two keeps are enough")
    assert (out.stopped, out.stop_reason, out.best_commit, out.kept) == (
        True, f"{ENDED}: two keeps are enough", best, 1)
    assert out.gain is not None and out.gain_note == ""
    assert (out.gain.head_commit, out.gain.outcome) == (best, "improved")
    assert out.gain.ratio_x == pytest.approx(2.0) and out.gain.target_pct == pytest.approx(50.0)
    head = ref.where.ws.head.commit  # the Stop Summary commit sits on BEST_COMMIT, on the session's branch
    assert out.summary_commit == head.hexsha and head.message.startswith(STOP_MESSAGE)
    assert [p.hexsha for p in head.parents] == [best] and ref.where.ws.head.reference.name == "kernel-opt/t"
    summary = _summary(ref)
    assert f"- reason: {ENDED}: two keeps are enough" in summary
    assert f"- session gain (measured): {out.gain.headline}" in summary and summary in out.summary + "\n"
    assert ref.status().phase == "stopped" and ref.status().stop_reason == out.stop_reason
    with pytest.raises(SessionError, match=ENDED):  # candidate tools refuse with the reason
        ref.save_and_test("global", "more")
    with pytest.raises(SessionError, match="stopped already"):
        ref.end_session()


def test_end_session_without_a_keep_ends_with_the_reason_for_no_gain(ref):
    out = ref.end_session()
    assert out.gain is None and out.gain_note.startswith("none: no keep")
    assert out.stop_reason == ENDED and ref.books.state.phase.value == "stopped"
    assert f"- session gain: {out.gain_note}" in _summary(ref)
    assert not [e for e in ref.books.store.ledger() if e["event"] == "session_gain"]  # nothing measured


@pytest.mark.parametrize("times, errors, phase, says", [
    (HALF, None, "improved", "commit_improvement"),
    ({"1": 100.0, "2": 200.0}, {"1": 3}, "repairing", "fix it and call save_and_test"),
])
def test_a_pending_candidate_is_refused_and_nothing_changes(ref, times, errors, phase, says):
    set_kernel(ref.where.workspace_path, times, errors)
    ref.save_and_test("global", "pending")
    assert ref.books.state.phase.value == phase
    head, attempts = ref.where.ws.head.commit.hexsha, ref.books.state.next_attempt
    with pytest.raises(RefereeError, match=says):
        ref.end_session()
    assert (ref.books.state.phase.value, ref.where.ws.head.commit.hexsha, ref.books.state.next_attempt) == (phase, head, attempts)


def test_untested_edits_are_refused(ref):
    set_kernel(ref.where.workspace_path, HALF)
    with pytest.raises(RefereeError, match="untested edits \\(kernel.py\\).*revert_to_best"):
        ref.end_session()
    assert ref.books.state.phase.value == "ready"


def test_cli_end_session_refuses_while_a_server_holds_the_repository(ref, toy_repo, capsys):
    _kept(ref)
    assert main(["end-session", "--repo", str(toy_repo), "--tag", "t"]) == 2  # `ref` holds the lock
    assert "end_session" in capsys.readouterr().err
    ref.close()
    assert main(["end-session", "--repo", str(toy_repo), "--json", "--why", "done"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["stop_reason"] == f"{ENDED}: done" and out["gain"]["ratio_x"] == pytest.approx(2.0)
    assert main(["end-session", "--repo", str(toy_repo)]) == 2  # stopped already
    assert "stopped already" in capsys.readouterr().err
