#!/usr/bin/env bash
# On a GPU machine with several GPUs (no network), from the checkout root carrying .whl/ and .devstage/
# (see device.sh): several real-repository sessions at once, one GPU lease each, as lanes of
# benchmarks/real_repos/device_lanes.sh (one shared lease folder, so the kopt gate gives each measuring call a
# GPU of its own):
#   TOTAL=560 bash .devstage/benchmarks/real_repos/device_parallel.sh NAME:PROJECT[:RUN_FLAGS] ...
# PROJECT: liger | triton-kernels | flaggems | fla; RUN_FLAGS: more run.py flags (e.g.
# "liger-a:liger:--only identical,slowdown"). Results: $OUT/NAME.tar.gz and $OUT/lanes.md.
set -uo pipefail
TOTAL=${TOTAL:-560}
declare -A SRC=([liger]=liger [triton-kernels]=tk [flaggems]=fg [fla]=p5)
lanes=()
for spec in "$@"; do
  IFS=: read -r name project flags <<< "$spec"
  src=${SRC[$project]:?"unknown project $project (liger, triton-kernels, flaggems, fla)"}
  lanes+=("$name=python3 \$STAGE/benchmarks/real_repos/run.py --project $project --src \$STAGE/src/$src \
--commit \$(cat \$STAGE/src/$src.sha) --out \$OUT --deadline-s $((TOTAL - 130)) --lease-dir \$LEASES --poll-s 5 \
--keep-runs ${flags:-}")
done
TOTAL=$TOTAL exec bash "$PWD/benchmarks/real_repos/device_lanes.sh" "${lanes[@]}"
