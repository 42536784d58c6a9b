#!/usr/bin/env bash
# On a GPU machine with several GPUs (no network), from the checkout root carrying .whl/ and .devstage/
# (see device.sh): several real-repository sessions at once, one GPU lease each (they share one lease
# folder, so the kopt gate gives each measuring call a GPU of its own):
#   TOTAL=560 bash .devstage/benchmarks/real_repos/device_parallel.sh NAME:PROJECT[:RUN_FLAGS] ...
# PROJECT: liger | triton-kernels | flaggems | fla; RUN_FLAGS: more run.py flags, spaces as commas
# inside the flag values are kept (e.g. "liger-a:liger:--only identical,slowdown"). Results: $OUT/NAME/.
set -uo pipefail
TOTAL=${TOTAL:-560}
source "$(dirname "${BASH_SOURCE[0]}")/device_setup.sh"
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm --format=csv; python3 --version
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  python3 -c "from importlib.metadata import version as v; print('cupti-python', v('cupti-python'))"
} > "$OUT/device.txt" 2>&1
declare -A SRC=([liger]=liger [triton-kernels]=tk [flaggems]=fg [fla]=p5)
pids=()
for spec in "$@"; do
  IFS=: read -r name project flags <<< "$spec"
  src=${SRC[$project]}
  mkdir -p "$OUT/$name"
  echo "== $name ($project) $(date -u +%T)"
  timeout -k 10 "$TOTAL" python3 "$STAGE/benchmarks/real_repos/run.py" --project "$project" --src "$STAGE/src/$src" \
    --commit "$(cat "$STAGE/src/$src.sha")" --out "$OUT/$name" --deadline-s $((TOTAL - 130)) \
    --lease-dir /tmp/kopt-leases --poll-s 5 --keep-runs ${flags:-} > "$OUT/$name/log.txt" 2>&1 &
  pids+=($!)
done
for i in "${!pids[@]}"; do wait "${pids[$i]}"; echo "== job $i exit $?"; done
for spec in "$@"; do IFS=: read -r name _ <<< "$spec"; echo "== $name"; tail -n 12 "$OUT/$name/log.txt"; done
# what comes back from the device tool is at most 8 files: per job its summary and one archive
for spec in "$@"; do
  IFS=: read -r name _ <<< "$spec"
  cp "$OUT/$name"/*.md "$OUT/$name.md" 2>/dev/null
  tar czf "$OUT/$name.tar.gz" -C "$OUT" "$name" && rm -rf "${OUT:?}/$name"
done
ls -la "$OUT"
