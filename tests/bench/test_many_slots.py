"""The multi-GPU slots benchmark (benchmarks/slots_gpu/many.py, issue 28): its plan, its decision-
quality targets and its fairness table fail where they must, on planted records."""

from __future__ import annotations

from benchmarks.slots_gpu.many import EFFECTS, fairness, plan, quality


def _rec(effect: str, verdict: str, gpu: int = 0, slot: str = "s", start: float = 0.0, end: float = 1.0) -> dict:
    return {"effect": effect, "verdict": verdict, "gpu": gpu, "slot": slot, "start": start, "end": end}


def test_slots_play_every_effect_rotated_so_different_effects_run_at_once():
    plans = [plan(k, 6) for k in range(3)]
    for p in plans:
        assert sorted(p) == sorted(list(EFFECTS) * 2)
    assert len({p[0] for p in plans}) == 3


def test_quality_targets():
    good = [_rec("identical", "tie", 0), _rec("identical", "tie", 1), _rec("-2%", "improved", 0),
            _rec("-2%", "improved", 1), _rec("+5%", "regressed", 0), _rec("+5%", "regressed", 1)]
    q = quality(good)
    assert all(v["met"] for v in q.values())
    assert q["-2%"]["per_gpu"] == {"0": 1, "1": 1}
    assert not quality(good + [_rec("identical", "improved")])["identical"]["met"]
    assert not quality(good + [_rec("+5%", "tie")] * 3)["+5%"]["met"]  # 2 of 5 regressed
    assert not quality(good + [_rec("-2%", "tie")])["-2%"]["met"]  # 2 of 3 kept
    assert not quality([])["-2%"]["met"]  # no trial meets no target


def test_fairness_names_a_starved_slot_and_sums_its_waits():
    phase = {"slots": ["a", "b"], "records": [_rec("identical", "tie", slot="a", start=5.0, end=9.0)]}
    spans = [{"slot": "a", "waited_s": 1.5}, {"slot": "b", "waited_s": 40.0}, {"slot": "b", "waited_s": 2.0}]
    f = fairness(phase, spans, per_slot=1)
    assert f["starved"] == ["b"] and not f["all_finished"]
    assert f["slots"]["b"]["wait_s"] == 42.0 and f["slots"]["a"]["done_at_s"] == 4.0
