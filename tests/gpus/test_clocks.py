"""The SM clock sampler (kopt_mcp/gpus/clocks.py): busy samples only, a figure only with enough of
them, a failing read ends the sampling and never the run."""

from __future__ import annotations

import time

import pytest

from kopt_mcp.gpus.clocks import MIN_BUSY_SAMPLES, ClockSample, ClockSampler, clock_source, summarise


def _samples(*pairs):
    return [ClockSample(t_s=i * 0.05, sm_mhz=mhz, idle=idle) for i, (mhz, idle) in enumerate(pairs)]


def test_idle_samples_do_not_count():
    # process start-up at the idle clock, then the benchmark at 1980 MHz with one step to 1965
    s = _samples(*[(345.0, True)] * 20, *[(1980.0, False)] * 9, (1965.0, False))
    c = summarise(s)
    assert c is not None
    assert (c.sm_mhz, c.min_mhz, c.max_mhz, c.busy_samples) == (1980.0, 1965.0, 1980.0, 10)
    assert c.steady_pct == pytest.approx(90.0)
    assert c.shown() == "1980 MHz (1965-1980, 90% at 1980)"


def test_too_few_busy_samples_give_no_clock():
    assert summarise(_samples(*[(1980.0, False)] * (MIN_BUSY_SAMPLES - 1), *[(345.0, True)] * 50)) is None
    assert summarise(_samples(*[(1980.0, False)] * MIN_BUSY_SAMPLES)).shown() == "1980 MHz"


class _Steps:
    """A clock source that steps from 1980 to 1965 MHz after `n` reads, then fails after `fail_at`."""

    period_s = 0.002

    def __init__(self, n=8, fail_at=None):
        self.reads, self.n, self.fail_at = 0, n, fail_at

    def read(self):
        self.reads += 1
        if self.fail_at is not None and self.reads > self.fail_at:
            raise RuntimeError("NVML: nvmlDeviceGetClockInfo failed: GPU is lost")
        return (1980.0 if self.reads <= self.n else 1965.0), False


def _wait_for(src, reads):
    end = time.monotonic() + 30.0
    while src.reads < reads and time.monotonic() < end:
        time.sleep(0.01)


def test_the_sampler_reads_while_the_run_goes_on_and_stops_after():
    src = _Steps(n=8)
    with ClockSampler(src) as sampler:
        _wait_for(src, 30)
    after = src.reads
    time.sleep(0.05)
    assert src.reads == after  # the thread ended with the block
    c = sampler.summary()
    assert c is not None and c.sm_mhz == 1965.0 and c.max_mhz == 1980.0 and sampler.error is None


def test_a_failing_read_ends_sampling_not_the_run():
    src = _Steps(n=100, fail_at=6)
    with ClockSampler(src) as sampler:
        _wait_for(src, 7)
    assert "GPU is lost" in sampler.error
    assert len(sampler.samples) == 6 and sampler.summary().sm_mhz == 1980.0


def test_no_clock_source_for_other_vendors_or_an_unknown_device():
    assert clock_source("amd", "GPU-x") is None and clock_source("cpu", "") is None
    # no NVML here, or NVML without this device: no figure, never an error
    assert clock_source("nvidia", "GPU-00000000-0000-0000-0000-000000000000") is None


def test_a_recorded_h100_run_reads_as_1980_mhz():
    # tests/fixtures/nvml/h100_sm_clock_samples.json: torch's import at the idle clock (345-420 MHz,
    # GpuIdle set), then do_bench at 1980 MHz; two samples at 345 MHz without the idle bit (the clock
    # had not risen yet when work arrived) must not move the figure
    import json
    from pathlib import Path

    doc = json.loads((Path(__file__).parents[1] / "fixtures" / "nvml" / "h100_sm_clock_samples.json").read_text())
    samples = [ClockSample(**s) for s in doc["samples"]]
    c = summarise(samples)
    assert sum(s.idle for s in samples) > 40 and c.busy_samples == 68
    assert c.sm_mhz == 1980.0 and c.min_mhz == 345.0 and c.steady_pct == pytest.approx(97.06, abs=0.01)
