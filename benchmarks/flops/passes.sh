#!/usr/bin/env bash
# The cost of FLOP counters in the confirmation (issue 38 item 3): ncu's replay passes and wall for the
# confirmation's metrics alone and with the minimal FLOP set (ncu's roofline terms: fadd/fmul/ffma,
# hadd/hmul/hfma, dadd/dmul/dfma, the tensor path per source type), on workload.py and on an L2-resident
# softmax (does a multi-pass replay under --cache-control none move a small kernel's duration?), and the
# tensor path's peak per cycle. From the checkout root after device_setup.sh. Output: $OUT/passes/.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${OUT:-/tmp/out}; D=$OUT/passes; mkdir -p "$D"
C="gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum"
F="sm__sass_thread_inst_executed_op_fadd_pred_on.sum,sm__sass_thread_inst_executed_op_fmul_pred_on.sum,sm__sass_thread_inst_executed_op_ffma_pred_on.sum"
F="$F,sm__sass_thread_inst_executed_op_hadd_pred_on.sum,sm__sass_thread_inst_executed_op_hmul_pred_on.sum,sm__sass_thread_inst_executed_op_hfma_pred_on.sum"
F="$F,sm__sass_thread_inst_executed_op_dadd_pred_on.sum,sm__sass_thread_inst_executed_op_dmul_pred_on.sum,sm__sass_thread_inst_executed_op_dfma_pred_on.sum"
T="sm__ops_path_tensor_src_fp16.sum,sm__ops_path_tensor_src_bf16_dst_fp32.sum,sm__ops_path_tensor_src_tf32_dst_fp32.sum,sm__ops_path_tensor_src_fp8.sum,sm__ops_path_tensor_src_fp64.sum,sm__ops_path_tensor_src_int8.sum"
P="sm__cycles_elapsed.avg.per_second,sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained,sm__sass_thread_inst_executed_op_hfma_pred_on.sum.peak_sustained,sm__sass_thread_inst_executed_op_dfma_pred_on.sum.peak_sustained"
PT="sm__ops_path_tensor_src_fp16.sum.peak_sustained,sm__ops_path_tensor_src_bf16_dst_fp32.sum.peak_sustained,sm__ops_path_tensor_src_tf32_dst_fp32.sum.peak_sustained,sm__ops_path_tensor_src_fp8.sum.peak_sustained,sm__ops_path_tensor_src_fp64.sum.peak_sustained,sm__ops_path_tensor_src_int8.sum.peak_sustained"
cat > /tmp/smx.py <<'PY'
import torch
x = torch.randn(4096, 2048, device="cuda", dtype=torch.float16)   # 16 MiB: L2-resident on an H200
for _ in range(40):
    torch.softmax(x, dim=-1)
torch.cuda.synchronize()
PY
cd /tmp
n=0
for set in "C" "C,F" "C,F,T" "C,F,T,P"; do
  M=$(for k in ${set//,/ }; do printf '%s,' "${!k}"; done); M=${M%,}
  for w in "$HERE/workload.py 4" "/tmp/smx.py"; do
    n=$((n+1)); s=$(date +%s%N)
    ncu --clock-control none --cache-control none --metrics "$M" --csv --page raw python3 $w > "$D/run$n.csv" 2> "$D/run$n.err"; rc=$?
    echo "run$n set=$set work=$(basename ${w%% *}) rc=$rc wall_ms=$(( ($(date +%s%N) - s) / 1000000 ))" | tee -a "$D/index.txt"
  done
done
ncu --clock-control none --metrics "$PT" --csv --page raw python3 "$HERE/workload.py" 1 > "$D/tensor-peak.csv" 2>&1; echo "tensor peak rc=$?"
for w in "$HERE/workload.py 4" "/tmp/smx.py"; do s=$(date +%s%N); python3 $w >/dev/null; echo "plain $(basename ${w%% *}) wall_ms=$(( ($(date +%s%N) - s) / 1000000 ))" | tee -a "$D/index.txt"; done
tar -czf "$OUT/passes.tar.gz" -C "$OUT" passes && rm -rf "$D"
