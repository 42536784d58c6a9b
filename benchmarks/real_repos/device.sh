#!/usr/bin/env bash
# On the GPU machine (no network), from the root of a checkout that carries .whl/ (gpu_suite.sh's
# wheels) and .devstage/ (whl/: this branch's kopt_mcp wheel + the liger_kernel wheel; src/liger,
# src/tk: the projects' snapshots and their commit shas (liger.sha, tk.sha); benchmarks/real_repos/,
# benchmarks/decision_quality/, benchmarks/common.py: the drivers, copied from this repository; not under the checkout's
# own root, whose kopt_mcp/ they would import instead of the wheel's):
#   bash .devstage/benchmarks/real_repos/device.sh PHASE:SECONDS ...
# PHASE: liger | tk | fg | fla | flaln (benchmarks/real_repos/run.py on Liger-Kernel, triton-kernels, FlagGems,
# flash-linear-attention, its LayerNorm backward alone: fla_ln.py) | fresh (init_fresh.py: `kopt-mcp init --write` on a fresh clone of FRESH_PROJECT
# (one name, a comma-separated list, or all),
# unedited, then baseline and an identical candidate; FRESH_FLAGS e.g. --work /tmp/w-fresh) | dq (the do_bench decision-quality
# benchmark) | clk (benchmarks/clocks/levels.py: the harness's time against the SM clock, CLK_RUNS runs). SECONDS: the phase's hard limit (timeout kills it; its drivers stop starting new steps
# about 100 s before), or `rest`: until TOTAL (default 570) seconds after the start. Results go to
# $OUT/<phase>/. LIGER_FLAGS / TK_FLAGS / FG_FLAGS / FLA_FLAGS / FLALN_FLAGS: more run.py flags (e.g. --skip-init, --only win,broken,
# --work /tmp/w-tk: a later call while the machine is warm goes on without a new baseline);
# DQ_EFFECTS: the decision-quality effects (default identical,-1%,+1%); DQ_FLAGS: more run.py flags (--work
# /tmp/w-dq: a later call while the machine is warm resumes the session, no new baseline).
set -uo pipefail
END=$((SECONDS + ${TOTAL:-570}))
source "$(dirname "${BASH_SOURCE[0]}")/device_setup.sh"
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; python3 --version
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  python3 -c "import kopt_mcp, liger_kernel; print('kopt_mcp', kopt_mcp.__file__, 'liger_kernel', liger_kernel.__file__)"
  python3 -c "from importlib.metadata import version as v; print('cupti-python', v('cupti-python'), 'transformers', v('transformers'))"
} > "$OUT/device.txt" 2>&1
for spec in "$@"; do
  phase=${spec%%:*}; secs=${spec##*:}; mkdir -p "$OUT/$phase"
  [[ $secs == rest ]] && secs=$((END - SECONDS))
  (( secs > 60 )) || { echo "== $phase skipped: $secs s left"; continue; }
  echo "== $phase ($secs s) $(date -u +%T)"
  case $phase in
    liger) timeout -k 10 "$secs" python3 "$STAGE/benchmarks/real_repos/run.py" --project liger --src "$STAGE/src/liger" \
             --commit "$(cat "$STAGE/src/liger.sha")" --out "$OUT/liger" --deadline-s $((secs - 100)) ${LIGER_FLAGS:-} ;;
    tk) timeout -k 10 "$secs" python3 "$STAGE/benchmarks/real_repos/run.py" --project triton-kernels --src "$STAGE/src/tk" \
          --commit "$(cat "$STAGE/src/tk.sha")" --out "$OUT/tk" --deadline-s $((secs - 120)) ${TK_FLAGS:-} ;;
    fg) timeout -k 10 "$secs" python3 "$STAGE/benchmarks/real_repos/run.py" --project flaggems --src "$STAGE/src/fg" \
          --commit "$(cat "$STAGE/src/fg.sha")" --out "$OUT/fg" --deadline-s $((secs - 100)) ${FG_FLAGS:-} ;;
    fla) timeout -k 10 "$secs" python3 "$STAGE/benchmarks/real_repos/run.py" --project fla --src "$STAGE/src/p5" \
          --commit "$(cat "$STAGE/src/p5.sha")" --out "$OUT/fla" --deadline-s $((secs - 100)) ${FLA_FLAGS:-} ;;
    flaln) timeout -k 10 "$secs" python3 "$STAGE/benchmarks/real_repos/run.py" --project fla-ln --src "$STAGE/src/p5" \
          --commit "$(cat "$STAGE/src/p5.sha")" --out "$OUT/flaln" --deadline-s $((secs - 60)) ${FLALN_FLAGS:-} ;;
    fresh) timeout -k 10 "$secs" python3 "$STAGE/benchmarks/real_repos/init_fresh.py" --project "${FRESH_PROJECT:-liger}" \
             --src "$STAGE/src" --out "$OUT/fresh" --deadline-s $((secs - 200)) --end-s $((secs - 15)) ${FRESH_FLAGS:-} ;;
    clk) timeout -k 10 "$secs" python3 "$STAGE/benchmarks/clocks/levels.py" --runs "${CLK_RUNS:-12}" --out "$OUT/clk" ;;
    dq) timeout -k 10 "$secs" python3 "$STAGE/benchmarks/decision_quality/run.py" --device gpu-dobench --trials 20 \
          --effects "${DQ_EFFECTS:-identical,-1%,+1%}" --out "$OUT/dq" --max-seconds $((secs - 40)) ${DQ_FLAGS:-} ;;
  esac 2>&1 | tee "$OUT/$phase/log.txt"
  echo "== $phase exit ${PIPESTATUS[0]} $(date -u +%T)"
done
