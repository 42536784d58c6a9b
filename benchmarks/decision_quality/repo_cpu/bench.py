"""Fixed benchmark (CPU, NumPy): median time of y = a*x + b over kernel.WORK elements, 41 repeats,
relative to the same op on a fixed 4 Mi elements timed right after each (cancels CPU-speed drift
and much of a neighbour's load on a shared 2-core VM)."""
import csv
import os
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, os.getcwd())
import kernel  # noqa: E402

n = int(kernel.WORK)
x = (np.arange(n, dtype=np.float32) % 1024)
y = np.empty_like(x)
ref_x = np.arange(2**22, dtype=np.float32)
ref_y = np.empty_like(ref_x)


def timed(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


ratios = []
for i in range(45):
    t = timed(lambda: np.add(np.multiply(x, 2.0, out=y), 1.0, out=y))
    r = timed(lambda: np.add(np.multiply(ref_x, 2.0, out=ref_y), 1.0, out=ref_y))
    if i >= 4:
        ratios.append(t / r * 1000.0)
err = int(np.count_nonzero(y[:4096] != 2.0 * x[:4096] + 1.0))
pathlib.Path("results").mkdir(exist_ok=True)
with open("results/bench.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["shape", "us_per_call", "err_count"])
    w.writerow(["n=1Mi", sorted(ratios)[len(ratios) // 2], err])
