"""Every measuring call's job lease is written to the slot's ledger when it ends (`job_lease`:
device, wait, held span; issue 28): the per-GPU double-booking check and the per-slot waits of
benchmarks/slots_gpu/many.py read these records. Real git, the toy benchmark on the CPU device."""

from __future__ import annotations

from benchmarks.slots_gpu.many import lease_spans
from benchmarks.throughput.run import double_bookings
from kopt_mcp.testing.toy import set_kernel
from tests.conftest import BASE_TIMES


def test_each_measuring_call_logs_one_job_lease_with_its_span(toy_repo, make_referee):
    main = make_referee(toy_repo, tag="many")
    main.run_benchmark()
    b = make_referee(toy_repo, tag="many", slot="b")
    set_kernel(b.where.workspace_path, {k: v * 3 for k, v in BASE_TIMES.items()})
    assert b.save_and_test("global", "3x slower").verdict == "regressed"
    set_kernel(main.where.workspace_path, {k: v * 3 for k, v in BASE_TIMES.items()})
    assert main.save_and_test("global", "3x slower").verdict == "regressed"

    spans = lease_spans(toy_repo)
    assert [s["slot"] for s in spans] == ["main", "main", "b"]  # baseline + attempt of main, attempt of b
    assert len({s["device"] for s in spans}) == 1  # the one CPU device
    for s in spans:
        assert 0.0 < s["start"] <= s["end"] and s["waited_s"] >= 0.0
    ordered = sorted(spans, key=lambda s: s["start"])
    assert all(a["end"] <= b_["start"] for a, b_ in zip(ordered, ordered[1:]))  # one call after another
    assert double_bookings(spans) == []


def test_overlapping_leases_of_two_slots_on_one_gpu_are_flagged():
    spans = [{"slot": "a", "device": "GPU-0", "start": 10.0, "end": 20.0},
             {"slot": "b", "device": "GPU-0", "start": 19.5, "end": 30.0},
             {"slot": "c", "device": "GPU-1", "start": 10.0, "end": 30.0}]
    assert len(double_bookings(spans)) == 1
