# One device command that outlives the device service's 600 s per call (a fresh clone of Liger
# FusedLinearCrossEntropy: init ~550 s, then a baseline of 3-4 profiled runs of ~215 s each): the
# first call starts COMMAND in a process session of its own (setsid: the service kills what a call
# leaves running, except a new session, which runs on until the machine goes back); every call, the
# first too, waits for it up to WAIT_S seconds (default 560) and copies what it wrote so far to $OUT:
# while it runs, only files under SMALL_KB KiB (default 1024); everything once it ended. (2026-12-04:
# a call that brought back a 4.4 MB tar found, on the next call issued at once, the machine gone.)
# The calls must follow each other while the machine is warm (30 s after a call); only the first
# needs `carry` (the later ones find .devstage and /tmp as the first left them).
#
#   WAIT_S=560 bash .devstage/benchmarks/real_repos/detached.sh NAME 'COMMAND'    # the same in every call
#
# COMMAND runs in the repository root with OUT=<state>/out. State in ${DETACH_DIR:-/tmp/detached}/NAME:
# pid, log (COMMAND's stdout and stderr), rc (its exit status, once it ended), out/. Prints
# "NAME: started", then "NAME: running after N s" or "NAME: exit RC after N s"; exits 0 once COMMAND
# ended (whatever its status; see rc), 3 while it runs, 2 on bad arguments.
set -uo pipefail
(( $# == 2 )) || { echo "usage: WAIT_S=560 bash detached.sh NAME 'COMMAND'" >&2; exit 2; }
name=$1; cmd=$2
dir=${DETACH_DIR:-/tmp/detached}/$name
mkdir -p "$dir/out" "${OUT:=/tmp/out}"
if [[ ! -f $dir/pid ]]; then
  date +%s > "$dir/started"
  OUT=$dir/out setsid bash -c '( eval "$1" ); echo $? > "$2.tmp" && mv "$2.tmp" "$2"' _ "$cmd" "$dir/rc" \
    > "$dir/log" 2>&1 < /dev/null &
  echo $! > "$dir/pid"
  echo "$name: started (pid $(cat "$dir/pid"))"
fi
end=$((SECONDS + ${WAIT_S:-560}))
while [[ ! -f $dir/rc ]] && (( SECONDS < end )); do sleep 1; done
if [[ -f $dir/rc ]]; then  # ended: everything it wrote
  cp -r "$dir/out/." "$OUT/" 2>/dev/null
else  # still running: small files only, so that the reply comes fast and the next call finds the machine warm
  (cd "$dir/out" && find . -type f -size -"${SMALL_KB:-1024}"k -exec cp --parents {} "$OUT/" \;) 2>/dev/null
fi
cp "$dir/log" "$OUT/detached-$name.log"
age=$(( $(date +%s) - $(cat "$dir/started") ))
if [[ -f $dir/rc ]]; then
  echo "$name: exit $(cat "$dir/rc") after $age s"
  exit 0
fi
echo "$name: running after $age s"
exit 3
