"""Fixed benchmark (GPU, Triton): times kernel.launch with triton.testing.do_bench, a time-driven
harness (it picks its own repetition count from a first estimate, so the launch count differs from
run to run) that clears the L2 cache before every call. Each call gets a new constant; the result of
the last call is checked against (i % THREADS) + WORK * b."""
import csv
import os
import pathlib
import sys

import torch
import triton

sys.path.insert(0, os.getcwd())
import kernel

y = torch.zeros(kernel.BLOCKS * kernel.THREADS, dtype=torch.float32, device="cuda")
call = 0


def step() -> None:
    global call
    call += 1
    kernel.launch(y, float(call % 3))


us = triton.testing.do_bench(step, warmup=25, rep=100, return_mode="median") * 1000.0
torch.cuda.synchronize()
tid = torch.arange(y.numel(), device="cuda", dtype=torch.float32) % kernel.THREADS
err = int(torch.count_nonzero(y != tid + float(kernel.WORK * (call % 3))).item())
pathlib.Path("results").mkdir(exist_ok=True)
with open("results/bench.csv", "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["shape", "us_per_call", "err_count"])
    w.writerow(["spin", us, err])
