"""Fixed benchmark (GPU, cupy): times kernel.launch with CUDA events around batches of 20
back-to-back calls (median of 15 batches, after warm-up). Each call gets a new constant, and the
result of the last call is checked against threadIdx + WORK * b."""
import csv
import os
import pathlib
import sys

import cupy as cp

sys.path.insert(0, os.getcwd())
import kernel  # noqa: E402

y = cp.zeros(kernel.BLOCKS * kernel.THREADS, dtype=cp.float32)
for i in range(10):
    kernel.launch(y, float(i % 3))
cp.cuda.runtime.deviceSynchronize()
times, call = [], 0
for _ in range(15):
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    for _ in range(20):
        call += 1
        kernel.launch(y, float(call % 3))
    b.record()
    b.synchronize()
    times.append(cp.cuda.get_elapsed_time(a, b) * 1000.0 / 20)
cp.cuda.runtime.deviceSynchronize()
tid = cp.arange(y.size, dtype=cp.float32) % kernel.THREADS
err = int(cp.count_nonzero(y != tid + float(kernel.WORK * (call % 3))).get())
pathlib.Path("results").mkdir(exist_ok=True)
with open("results/bench.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["shape", "us_per_call", "err_count"])
    w.writerow(["spin", sorted(times)[len(times) // 2], err])
