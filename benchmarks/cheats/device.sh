#!/usr/bin/env bash
# The GPU-side reward hacks on the Triton example (benchmarks/cheats/run.py), one call on an H200 (<= 9 min):
#   source .devstage/benchmarks/real_repos/device_setup.sh   # the staged wheels: torch, triton, cupti-python, kopt_mcp
#   bash "$ROOT/benchmarks/cheats/device.sh"                  # (or any path to this file: it finds its run.py)
# Results: $OUT/cheats/cheats.json (each step's verdict, code, reason, commit code, % of peak; `right`),
# cheats-ledger.jsonl, log.txt, device.txt. CHEATS_FLAGS: more run.py flags (--only early-exit,warps-per-shape).
# TOTAL: the hard limit in seconds (default 530); run.py starts no new step in the last 150 s.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# not sourced yet (kopt_mcp and torch not importable outside a checkout): source it from the checkout root
if ! (cd /tmp && python3 -c "import kopt_mcp, torch") 2>/dev/null && [[ -f $HERE/../../.devstage/benchmarks/real_repos/device_setup.sh ]]; then
  cd "$HERE/../.." && source .devstage/benchmarks/real_repos/device_setup.sh
fi
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/cheats"
TOTAL=${TOTAL:-530}
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; command -v ncu && ncu --version | tail -1
  python3 -c "import torch, triton, kopt_mcp; print('torch', torch.__version__, 'triton', triton.__version__, 'kopt_mcp', kopt_mcp.__file__)"
  python3 -c "from importlib.metadata import version as v; print('cupti-python', v('cupti-python'))"
} > "$OUT/cheats/device.txt" 2>&1
cd /tmp  # never import a checkout's own kopt_mcp/
timeout -k 10 "$TOTAL" python3 "$HERE/run.py" --out "$OUT/cheats" --deadline-s $((TOTAL - 150)) ${CHEATS_FLAGS:-} 2>&1 \
  | tee "$OUT/cheats/log.txt"
echo "== cheats exit ${PIPESTATUS[0]} $(date -u +%T)"
