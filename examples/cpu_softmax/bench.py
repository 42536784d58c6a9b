"""The fixed benchmark of the softmax example (protected: candidates may not edit it).

For each config class (rows, cols):
  * a fresh random float64 input; each row is shifted by a large offset (-1000..1000),
    so a kernel that skips the max subtraction overflows;
  * kernel.softmax is timed call by call, each call followed by one reference.softmax
    call on a copy of the same input (interleaved, so both see the same machine state);
  * us_per_call = median over pairs of (kernel time / reference time) * REF_US[class].
    Shared CI VMs change speed by 30-50% for seconds at a time (measured: raw min-of-N
    timings of identical code spread that much between runs). Both calls of a pair slow
    down together, so the paired ratio cancels the drift (identical code: a few %).
    REF_US is the reference's time on a quiet calibration run, so us_per_call reads as
    "microseconds at calibration-machine speed", comparable between runs;
  * err_count: elements of the kernel's output (from its LAST timed call, on the same
    array every timed call got) with |out - ref| > 1e-9 + 1e-7*|ref|, NaN counted;
    the oracle runs on a pristine copy, so a kernel that writes into its input fails.
Writes results/bench.csv (rows,cols,us_per_call,err_count) and prints a table.
"""

import csv
import ctypes
import ctypes.util
import gc
import os
import time


def _pin_malloc() -> None:
    """Make the cost of large temporaries deterministic (glibc; a no-op elsewhere).

    glibc moves its mmap threshold after each free, so whether a temporary cost fresh
    (page-faulted) memory depended on what ran before it: we measured 3x swings for the
    same kernel. Pinned at 128 KiB (glibc's initial default), every array >= 128 KiB is
    fresh memory on every call and smaller blocks always reuse warm memory.
    """
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.mallopt(-3, 128 * 1024)  # M_MMAP_THRESHOLD
        libc.mallopt(-1, 64 << 20)  # M_TRIM_THRESHOLD
    except (OSError, AttributeError):
        pass


_pin_malloc()

import kernel
import numpy as np
import reference

CLASSES = [(2048, 16), (256, 128), (16, 2048)]  # tall-skinny, square-ish, short-wide
# reference.softmax time (us) per class on the quiet calibration VM (2-vCPU Xeon, NumPy 2.4)
REF_US = {(2048, 16): 575.0, (256, 128): 390.0, (16, 2048): 360.0}
BUDGET_S = 0.18  # timing budget per class (whole run < 1 s)
MIN_PAIRS, MAX_PAIRS = 5, 2000
RTOL, ATOL = 1e-7, 1e-9


def make_input(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    x = rng.standard_normal((rows, cols)) * 2.0
    x += rng.permutation(np.linspace(-1000.0, 1000.0, rows))[:, None]
    return x


def run_class(rng: np.random.Generator, rows: int, cols: int) -> dict:
    x = make_input(rng, rows, cols)
    pristine = x.copy()
    x_ref = x.copy()
    for _ in range(2):  # warm-up
        kernel.softmax(x)
        reference.softmax(x_ref)
    ratios, k_times, r_times = [], [], []
    clock = time.perf_counter
    start = clock()
    while True:
        t0 = clock()
        out = kernel.softmax(x)
        t1 = clock()
        reference.softmax(x_ref)
        t2 = clock()
        k_times.append(t1 - t0)
        r_times.append(t2 - t1)
        ratios.append((t1 - t0) / (t2 - t1))
        n = len(ratios)
        if n >= MAX_PAIRS or (n >= MIN_PAIRS and t2 - start >= BUDGET_S):
            break
    expected = reference.softmax(pristine)
    out = np.asarray(out)
    if out.shape != expected.shape:
        err = expected.size
    else:
        ok = np.abs(out - expected) <= ATOL + RTOL * np.abs(expected)  # NaN -> False
        err = int(expected.size - np.count_nonzero(ok))
    return {
        "rows": rows,
        "cols": cols,
        "us_per_call": float(np.median(ratios)) * REF_US[(rows, cols)],
        "err_count": err,
        "raw_us": min(k_times) * 1e6,
        "ref_us": min(r_times) * 1e6,
        "pairs": len(ratios),
    }


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(here, "results", "bench.csv")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    if os.path.exists(path):
        os.remove(path)  # never leave a stale file behind if the kernel crashes
    seed = int.from_bytes(os.urandom(4), "little")
    rng = np.random.default_rng(seed)
    gc.disable()
    results = [run_class(rng, rows, cols) for rows, cols in CLASSES]
    gc.enable()
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["rows", "cols", "us_per_call", "err_count"])
        for r in results:
            w.writerow([r["rows"], r["cols"], f"{r['us_per_call']:.2f}", r["err_count"]])
    print(f"seed {seed}")
    print(
        f"{'rows':>6} {'cols':>6} {'us_per_call':>12} {'raw_min_us':>11} {'ref_min_us':>11} {'pairs':>6} {'err_count':>10}"
    )
    for r in results:
        print(
            f"{r['rows']:>6} {r['cols']:>6} {r['us_per_call']:>12.2f} {r['raw_us']:>11.1f}"
            f" {r['ref_us']:>11.1f} {r['pairs']:>6} {r['err_count']:>10}"
        )


if __name__ == "__main__":
    main()
