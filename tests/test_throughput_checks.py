"""The throughput benchmark's double-booking check (benchmarks/throughput/run.py) catches what it
must: two slots' runs overlapping on one device; runs on distinct devices, or one after the other,
are not flagged."""

from __future__ import annotations

from benchmarks.throughput.run import double_bookings


def _run(slot: str, device: str, start: float, end: float) -> dict:
    return {"slot": slot, "device": device, "start": start, "end": end, "run_dir": f"/x/{slot}/{start}"}


def test_two_slots_on_one_device_at_once_are_a_double_booking():
    bad = double_bookings([_run("s1", "0", 0.0, 2.0), _run("s2", "0", 1.5, 3.5), _run("s3", "1", 0.0, 9.0)])
    assert len(bad) == 1 and "device 0" in bad[0] and "s1" in bad[0] and "s2" in bad[0]


def test_distinct_devices_and_back_to_back_runs_are_fine():
    runs = [_run("s1", "0", 0.0, 2.0), _run("s2", "0", 2.0, 4.0), _run("s2", "1", 0.0, 4.0), _run("s1", "1", 4.5, 6.0)]
    assert double_bookings(runs) == []
