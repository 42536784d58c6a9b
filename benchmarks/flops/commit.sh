#!/usr/bin/env bash
# One commit with `[profiler] confirm_flops = true` on the Triton example (issue 38 item 3's last GPU run), <= 5 min:
# the installed example's kopt.toml gets the switch, then the cheats driver runs its honest step alone
# (warps-per-shape: `improved`, then commit_improvement, whose two ncu runs count the FLOPs of 360 marked
# launches at 8 replay passes each; 2026-12-02 it did not end within ~75 s, 31 s without the counters).
# On the GPU machine, from the checkout root, carrying .whl and .devstage (real_repos/README.md):
#   bash benchmarks/flops/commit.sh        # TOTAL: the driver's limit in s (default 300)
# Output: $OUT/flops-commit/cheats.json (the step's verdict, commit code and reason with the % of the FLOP
# peak), cheats-ledger.jsonl (event `confirmation`: the candidate's flop_rates / flop_peaks), log.txt.
set -uo pipefail
source .devstage/benchmarks/real_repos/device_setup.sh   # ROOT, OUT, the wheels; leaves us in /tmp
T=$(find /tmp/site -path '*triton_softmax/kopt.toml' | head -1)
grep -q '^confirm_flops' "$T" || sed -i 's/^kernel = "softmax"$/kernel = "softmax"\nconfirm_flops = true/' "$T"
grep -n confirm_flops "$T" || { echo "the example's kopt.toml has no [profiler] kernel line to follow" >&2; exit 2; }
mkdir -p "$OUT/flops-commit"
SECONDS=0
timeout -k 10 "${TOTAL:-300}" python3 "$ROOT/benchmarks/cheats/run.py" --out "$OUT/flops-commit" --only warps-per-shape \
  2>&1 | tee "$OUT/flops-commit/log.txt"
echo "== flops commit exit ${PIPESTATUS[0]} after $SECONDS s"
rm -f "$OUT/flops-commit/plan.json"
