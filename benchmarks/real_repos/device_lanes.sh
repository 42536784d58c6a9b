#!/usr/bin/env bash
# On a GPU machine with several GPUs (no network), from the checkout root carrying .whl/ and .devstage/
# (benchmarks/real_repos/device.sh says what they hold): independent jobs ("lanes") at once, each its
# own shell command, all sharing one kopt-mcp GPU lease folder (KOPT_LEASE_DIR, and `--lease-dir` for
# the real-repository drivers) so that every measuring call of every lane still gets a GPU of its own:
#   TOTAL=560 bash benchmarks/real_repos/device_lanes.sh 'NAME=COMMAND' ...
# Each COMMAND runs in /tmp under `timeout TOTAL`, with the staged wheels' environment and OUT=$OUT/NAME,
# ROOT (the checkout), STAGE (.devstage), LEASES (the shared lease folder) set. The wheels are installed
# once, before any lane starts. What comes back is at most 8 files: per lane NAME.tar.gz (its OUT, the
# text files only: .json .jsonl .md .log .txt .csv .toml) and lanes.md (per lane: exit code, wall
# time in s, the last lines of its log), plus device.txt, and stuck.txt where a lane was still running
# WATCH_S (default TOTAL - 45) s after the start: the process tree, nvidia-smi, and a py-spy dump of
# every Python process (what a hung benchmark was doing; py-spy travels in .whl).
set -uo pipefail
TOTAL=${TOTAL:-560}
ROOT=$PWD
source "$ROOT/.devstage/benchmarks/real_repos/device_setup.sh"  # installs the wheels once; cd /tmp
export ROOT STAGE LEASES=${KOPT_LEASE_DIR:-/tmp/kopt-leases}
export KOPT_LEASE_DIR=$LEASES
{ date -u; nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.sm --format=csv; python3 --version
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
  python3 -c "from importlib.metadata import version as v; print('cupti-python', v('cupti-python'))"
  nproc; command -v bwrap || echo "no bwrap"
} > "$OUT/device.txt" 2>&1
WATCH_S=${WATCH_S:-$((TOTAL - 45))}
( sleep "$WATCH_S"
  { date -u; ps -eo pid,ppid,etimes,stat,args --forest; nvidia-smi
    for p in $(pgrep -f python); do echo "== py-spy dump --pid $p"; timeout 20 py-spy dump --pid "$p" 2>&1 | head -80; done
  } > "$OUT/stuck.txt" 2>&1 ) &
watcher=$!
names=() pids=() starts=()
for spec in "$@"; do
  name=${spec%%=*} cmd=${spec#*=}
  mkdir -p "$OUT/$name"
  echo "== $name: $cmd ($(date -u +%T))"
  (cd /tmp && OUT="$OUT/$name" timeout -k 10 "$TOTAL" bash -c "$cmd") > "$OUT/$name/log.txt" 2>&1 &
  names+=("$name") pids+=($!) starts+=($SECONDS)
done
{ echo "# lanes ($(date -u +%F), TOTAL=$TOTAL s)"; echo; echo "| lane | exit | wall s |"; echo "|---|---|---|"; } > "$OUT/lanes.md"
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"; rc=$?
  echo "| ${names[$i]} | $rc | $((SECONDS - ${starts[$i]})) |" >> "$OUT/lanes.md"
  echo "== ${names[$i]} exit $rc after $((SECONDS - ${starts[$i]})) s"
done
kill "$watcher" 2>/dev/null
for name in "${names[@]}"; do
  { echo; echo "## $name"; echo '```'; tail -n 25 "$OUT/$name/log.txt"; echo '```'; } >> "$OUT/lanes.md"
  (cd "$OUT" && find "$name" -type f \( -name '*.json' -o -name '*.jsonl' -o -name '*.md' -o -name '*.log' \
     -o -name '*.txt' -o -name '*.csv' -o -name '*.toml' -o -name '*.tar.gz' \) -print0 \
     | tar czf "$name.tar.gz" --null -T -) && rm -rf "${OUT:?}/$name"
done
cat "$OUT/lanes.md"
ls -la "$OUT"
