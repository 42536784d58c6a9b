"""The referee's machines are injected (referee.services.Services): every run goes through the
injected runner, the profiler comes from the injected factory, the gate waits on the injected clock."""

from __future__ import annotations

from kopt_mcp.profilers.none import NoProfiler
from kopt_mcp.testing.toy import RecordingRunner, fake_services, set_kernel


def test_every_run_of_an_attempt_goes_through_the_injected_runner(toy_repo, make_referee):
    runner = RecordingRunner()
    r = make_referee(toy_repo, services=fake_services(run=runner))
    r.run_benchmark()
    baseline_runs = len(runner.calls)
    assert baseline_runs == r.what.cfg.gates.baseline_runs and all(c[0] == "python bench.py" for c in runner.calls)
    set_kernel(r.where.workspace_path, {"1": 50.0, "2": 100.0})
    v = r.save_and_test(target="global", hypothesis="half the time")
    assert v.verdict == "improved"
    # candidate and BEST ran in disposable checkouts, never in the workspace the agent edits
    runs = runner.calls[baseline_runs:]
    assert len(runs) == len(v.run_dirs) >= 2
    assert all(r.where.workspace_path not in (c[1], *c[1].parents) for c in runs)


def test_the_profiler_comes_from_the_injected_factory(toy_repo, make_referee):
    asked = []

    def factory(backend: str, vendor: str, detail: bool):
        asked.append((backend, vendor, detail))
        return NoProfiler()

    r = make_referee(toy_repo, services=fake_services(profiler=factory))
    r.run_benchmark()
    assert asked and asked[0] == ("none", "cpu", False)
    assert r.kernel_trace_analysis().available is False
    assert asked[-1] == ("none", "cpu", True)
