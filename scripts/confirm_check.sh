#!/usr/bin/env bash
# Device check of the commit-time out-of-process confirmation (kopt_mcp/profilers/confirm.py).
#   scripts/confirm_check.sh      on an NVIDIA GPU machine with torch, triton and ncu (no network):
#                                 a tiny Triton benchmark in six variants (slow BEST, a large and a
#                                 small real win, unchanged, a regression, and the cheat: a benchmark
#                                 that patches its own CUDA-event timer), each confirmed with ncu as
#                                 the benchmark's parent process; prints what confirm_keep decides.
# Writes confirm_check.{md,json,log} and runs/ (ncu CSVs, logs) to $OUT (default
# benchmarks/results/latest). Exit 0 when every expected verdict came out; 1 otherwise.
# Needs kopt-mcp's dependencies (pydantic, ...): where the image lacks them, run
# `scripts/gpu_suite.sh prepare` here first and carry .whl/ (installed into /tmp/site as there).
# About 15 runs of a few seconds each (5 under CUPTI where cupti-python is in .whl, 7 under ncu).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results/latest}
mkdir -p "$OUT"
if [[ -d .whl && ! -f /tmp/site/.kopt-installed ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "confirm_check: wheel install failed" >&2; exit 2; }
  touch /tmp/site/.kopt-installed
fi
# this checkout first: the kopt-mcp wheel in /tmp/site may predate profilers/confirm.py
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
[[ -d /tmp/site ]] && export PYTHONPATH=$PYTHONPATH:/tmp/site PATH=/tmp/site/bin:$PATH
export PYTHONUNBUFFERED=1
command -v ncu >/dev/null || { echo "confirm_check: ncu is not on PATH" >&2; exit 2; }
{ date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; ncu --version | tail -1; } 2>&1 \
  | tee "$OUT/confirm_check_device.txt"
python3 scripts/confirm_check.py "$OUT" 2>&1 | tee "$OUT/confirm_check.log"
exit "${PIPESTATUS[0]}"
