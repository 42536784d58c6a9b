#!/usr/bin/env bash
# Records what Nsight Compute says about floating-point work on this GPU (issue 38 item 3), <= 3 min:
# the FLOP counters that exist (query), the roofline sections' own expressions for the peaks, and one raw
# page of workload.py's kernels with those counters, the peaks and the DRAM bytes; then the cost of adding
# them to the confirmation's metrics (ncu's passes and wall, with and without). From the checkout root,
# after `source .devstage/benchmarks/real_repos/device_setup.sh` (torch importable). Output: $OUT/flops/.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${OUT:-/tmp/out}; D=$OUT/flops; mkdir -p "$D/raw"
NCU=$(command -v ncu); SECT=$(dirname "$(readlink -f "$NCU")")/sections
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv; ncu --version | tail -1; echo "sections: $SECT"; } > "$D/raw/device.txt" 2>&1
ncu --query-metrics > "$D/raw/query-metrics.txt" 2>&1
grep -E '^(sm__sass_thread_inst_executed_op_[a-z0-9]+_pred_on|sm__ops_path_tensor_[a-z0-9_]+|sm__inst_executed_pipe_tensor[a-z0-9_]*|sm__cycles_elapsed) ' \
  "$D/raw/query-metrics.txt" | awk '{print $1}' | sort -u > "$D/raw/flop-bases.txt"
cp "$SECT"/*Roofline*.section "$SECT"/SpeedOfLight*.section "$D/raw/" 2>/dev/null
ls "$SECT" > "$D/raw/sections-list.txt" 2>&1
M="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__cycles_elapsed.avg.per_second"
for b in $(grep -E 'sass_thread_inst_executed_op_(f|h|d)(add|mul|fma)_pred_on$' "$D/raw/flop-bases.txt"); do M="$M,$b.sum"; done
for b in $(grep -E '^sm__ops_path_tensor' "$D/raw/flop-bases.txt"); do M="$M,$b.sum"; done
P="sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained,sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained,sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained"
echo "$M" > "$D/raw/metrics-asked.txt"
cd /tmp
( time ncu --clock-control none --metrics "$M,$P" --csv --page raw python3 "$HERE/workload.py" 1 ) > "$D/raw/workload-raw.csv" 2> "$D/raw/workload-raw.err"
# cost: the confirmation's metrics alone, then with the FLOP counters, on the same workload (2 runs -> 8 launches)
C="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum"
F=$(tr ',' '\n' < "$D/raw/metrics-asked.txt" | grep -E 'sass_thread_inst|ops_path_tensor' | paste -sd,)
( time ncu --clock-control none --metrics "$C" --csv --page raw python3 "$HERE/workload.py" 4 ) > "$D/raw/cost-confirm.csv" 2> "$D/raw/cost-confirm.err"
( time ncu --clock-control none --metrics "$C,$F" --csv --page raw python3 "$HERE/workload.py" 4 ) > "$D/raw/cost-confirm-flops.csv" 2> "$D/raw/cost-confirm-flops.err"
( time python3 "$HERE/workload.py" 4 ) > "$D/raw/cost-plain.txt" 2>&1
grep -h -E 'pass|^real' "$D"/raw/cost-*.err | sort | uniq -c | head -20
cat "$D/raw/flop-bases.txt"; tail -3 "$D/raw/workload-raw.err"; head -c 1500 "$D/raw/workload-raw.csv"; echo
tar -czf "$D/flops-raw.tar.gz" -C "$D" raw && rm -rf "$D/raw"
ls -la "$D"
