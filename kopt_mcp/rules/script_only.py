"""Script-only keeps (issue 26): where no profiler measured the candidate, only the script metric
decided its `improved`, and code inside the benchmark process can forge that metric (results
memoized across calls, a results file written by the kernel, a patched timer) in ways no check
outside the process can tell from a real gain. Such a verdict carries the code `script_only`, and
commit_improvement keeps it only where `[gates] allow_script_only_keeps` allows. Unset, that
follows from what was expected: allowed where no GPU profiler was expected (the CPU is the device,
or `[profiler] backend = "none"`: the human chose the script metric), refused where one was (a GPU
with backend "auto", or a named backend) but none ran. Pure."""

from __future__ import annotations

from kopt_mcp.rules.decision import Code, Decision

GPU_VENDORS = ("nvidia", "amd")


def gpu_profiler_expected(vendor: str, backend: str) -> bool:
    """True when a profiler was expected for a device of `vendor` ("nvidia", "amd", "cpu", ...)
    under `[profiler] backend`: a named one ("cupti", "ncu", "rocprofv3"), or "auto" on a GPU."""
    return backend not in ("auto", "none") or (backend == "auto" and vendor.lower() in GPU_VENDORS)


def script_only_keeps_allowed(setting: bool | None, vendor: str, backend: str) -> bool:
    """`[gates] allow_script_only_keeps` (`setting`), or where unset: not `gpu_profiler_expected`."""
    return setting if setting is not None else not gpu_profiler_expected(vendor, backend)


def script_only_commit(setting: bool | None, vendor: str, backend: str) -> Decision | None:
    """The commit gate for a script-only `improved` verdict judged on a device of `vendor`: None
    (it may be committed), or a refusal with the code `script_only` saying what the human can set."""
    if script_only_keeps_allowed(setting, vendor, backend):
        return None
    why = ("[gates] allow_script_only_keeps = false" if setting is not None else
           f"a GPU profiler was expected ([profiler] backend = \"{backend}\" on a {vendor} device) but none "
           "measured the candidate")
    return Decision(outcome="refused", code=Code.SCRIPT_ONLY, reason=(
        f"not committed: only the script metric decided this `improved` and {why}. A script metric can be "
        "forged inside the benchmark process (results cached across calls, a results file the kernel writes, "
        "a patched timer), so a script-only keep needs the human's consent: restore the profiler, or set "
        "[gates] allow_script_only_keeps = true in a new session"))


def script_only_note(allowed: bool) -> str:
    """The clause an `improved` verdict's reason gets when only the script metric decided it."""
    return ("script only (code script_only): no profiler measured the candidate; commit_improvement "
            + ("may keep it ([gates] allow_script_only_keeps)" if allowed else
               "will refuse it ([gates] allow_script_only_keeps is false here)"))
