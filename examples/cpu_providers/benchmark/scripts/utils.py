"""The harness the benchmark scripts share (protected with them).

Each provider's call is measured in Python bytecode instructions executed (`sys.settrace` with
opcode events), after one warm-up call: an instruction count, as cachegrind-style CI benchmarks use,
not a time. It is the same on every run of the same code and inputs, so this CPU example gives
exact verdicts on a busy machine; the work NumPy does in C is not counted.

Rows are APPENDED to the tracked, cumulative data/all_benchmark_data.csv (one row per kernel,
provider, metric and x value, with a timestamp). A row whose key is already there is kept unless
--overwrite is given, as Liger-Kernel's harness does.
"""

import argparse
import csv
import datetime
import os
import sys

DATA = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data", "all_benchmark_data.csv")
FIELDS = ["kernel_name", "kernel_provider", "metric_name", "metric_unit", "x_name", "x_label", "x_value",
          "y_value_50", "extra_benchmark_config_str", "timestamp", "package_version"]
KEY = ["kernel_name", "kernel_provider", "metric_name", "x_name", "x_value", "extra_benchmark_config_str"]


def instructions(fn) -> int:
    """Bytecode instructions one call of `fn()` executes (after a warm-up call)."""
    fn()
    count = 0

    def trace(frame, event, arg):
        nonlocal count
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        if event == "opcode":
            count += 1
        return trace

    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(None)
    return count


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--overwrite", action="store_true", help="replace rows that already exist for a key")
    return ap.parse_args()


def write_rows(new: list[dict], overwrite: bool) -> None:
    """Append `new` to DATA; an existing key keeps its row unless `overwrite`."""
    now = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    rows = []
    if os.path.exists(DATA):
        with open(DATA, newline="") as f:
            rows = list(csv.DictReader(f))
    index = {tuple(str(r[k]) for k in KEY): i for i, r in enumerate(rows)}
    for r in new:
        r = {**r, "timestamp": now, "package_version": "0.1.0"}
        k = tuple(str(r[c]) for c in KEY)
        if k not in index:
            index[k] = len(rows)
            rows.append(r)
        elif overwrite:
            rows[index[k]] = r
    with open(DATA, "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=FIELDS)
        wr.writeheader()
        wr.writerows(rows)
