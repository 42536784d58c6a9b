"""Devices for sharded runs. On a CPU machine there is one: the CPU (rank 0)."""

import os


def device_count() -> int:
    """How many devices this process may use: TINYNORM_DEVICES (a number), else 1."""
    return int(os.environ.get("TINYNORM_DEVICES", "1"))


def bind(rank: int) -> int:
    """Bind this process to device `rank`. Raises RuntimeError for a rank this machine does not have."""
    if not 0 <= rank < device_count():
        raise RuntimeError(f"invalid device ordinal {rank}: this machine has {device_count()} device(s)")
    return rank
