"""The throughput benchmark (benchmarks/throughput/run.py): its double-booking check catches what it
must: two slots' runs overlapping on one device; runs on distinct devices, or one after the other,
are not flagged; `--stagger` gives every slot the same steps, rotated."""

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


def test_staggered_slots_play_the_same_steps_rotated_so_their_commits_fall_apart():
    from benchmarks.throughput.run import script

    lockstep = [script(k, 2) for k in (1, 2, 3)]
    staggered = [script(k, 2, stagger=True) for k in (1, 2, 3)]
    assert lockstep[0] == lockstep[1] == lockstep[2] == staggered[0]
    for s in staggered:
        assert sorted(s) == sorted(lockstep[0])  # the same work per slot, so N slots compare with one
    commit_at = [[i for i, step in enumerate(s) if step[3] == "improved"] for s in staggered]
    assert commit_at == [[2, 5], [1, 4], [0, 3]]
