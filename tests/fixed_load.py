"""A load sampler for tests (the protocol of kopt_mcp.gpus.load: a context manager around one measured
run, `summary() -> RunLoad | None`) that reports one fixed RunLoad for every run, so what a test asserts
does not depend on the machine's own load."""

from __future__ import annotations

from kopt_mcp.evidence.load import RunLoad

#: no foreign load on a 2-core machine
QUIET = RunLoad(device="cpu", duration_s=1.0, samples=2, other_pct=0.0, cores=2)


class FixedLoad:
    """Every run sampled as `load` (module docstring)."""

    def __init__(self, load: RunLoad) -> None:
        self.load = load

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def summary(self) -> RunLoad:
        return self.load
