"""The GPUs of the slots benchmarks' machine, as nvidia-smi lists them: shared by many.py and
host_control.py (which many.py runs first with --control), so neither imports the other for it."""

from __future__ import annotations

import subprocess


def gpu_uuids() -> dict[str, int]:
    """uuid -> index of every NVIDIA GPU nvidia-smi lists ({} without nvidia-smi: `--repo cpu`)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    return {u.strip(): int(i) for i, u in (line.split(",") for line in out.splitlines() if line.strip())}
