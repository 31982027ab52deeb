#!/usr/bin/env bash
# affinity.sh LIB PORT: goiwarp leaves the host process's CPU affinity alone.
# An unmodified ib_write_lat pair (the ping-pong that GOIWARP_PIN_RX=1 would
# pin a receive thread for) runs over TCP under LD_PRELOAD=LIB:
#   started  the client starts under `taskset -c CPU`: every one of its
#            threads stays on CPU for the whole run;
#   moved    the client starts unconfined and is moved with `taskset -a -p`
#            once it runs: every thread, goiwarp's included, stays where the
#            application put it (a mask read when the library started must
#            not come back).
# Threads are sampled every 50 ms; passes when no sample shows another mask
# and the client printed a sane latency table.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../common/listen.sh"
. "$here/../common/skip.sh"
lib=${1:?usage: affinity.sh LIB PORT}
port=${2:?usage: affinity.sh LIB PORT}
command -v ib_write_lat >/dev/null || skip_or_fail "ib_write_lat (perftest) is not installed"
(($(nproc) >= 2)) || skip_or_fail "one CPU: no affinity to keep"
cpu=$(($(nproc) - 1))
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
export GOIWARP_SHM=0

# masks PID: one line per thread: "tid list".
masks() {
  for s in /proc/"$1"/task/*/status; do
    awk -v t="${s%/status}" '/^Cpus_allowed_list:/ { sub(".*/", "", t); print t, $2 }' "$s" 2>/dev/null
  done
}

run() { # mode
  local mode=$1 cp bad=0 samples=0
  LD_PRELOAD=$lib timeout -k 5 60 ib_write_lat -p "$port" -D 3 >"$tmp/srv" 2>&1 &
  local sp=$!
  pids+=("$sp")
  wait_listen "$port" "$sp" 20 || { cat "$tmp/srv"; fail "server does not listen on $port"; }
  if [[ $mode == started ]]; then
    LD_PRELOAD=$lib taskset -c "$cpu" ib_write_lat -p "$port" -D 3 127.0.0.1 >"$tmp/cli" 2>&1 &
  else
    LD_PRELOAD=$lib ib_write_lat -p "$port" -D 3 127.0.0.1 >"$tmp/cli" 2>&1 &
  fi
  cp=$!
  pids+=("$cp")
  sleep 0.5
  [[ $mode == moved ]] && { taskset -a -p -c "$cpu" "$cp" >/dev/null || fail "taskset -a -p $cp"; }
  while kill -0 "$cp" 2>/dev/null; do
    while read -r tid list; do
      samples=$((samples + 1))
      if [[ $list != "$cpu" ]]; then
        echo "thread $tid of the client on CPUs $list, not $cpu"
        bad=$((bad + 1))
      fi
    done < <(masks "$cp")
    sleep 0.05
  done
  wait "$cp"
  local cr=$?
  wait "$sp"
  echo "== $mode: client exit $cr, $samples thread samples, $bad outside CPU $cpu"
  cat "$tmp/cli"
  [[ $cr -eq 0 ]] || fail "client exit $cr"
  ((samples > 0 && bad == 0)) || fail "a thread left the application's affinity"
  awk '$1 == 2 && NF >= 4 { ok = $2 > 0 && $3 > 0 && $3 < 100000 } END { exit !ok }' "$tmp/cli" ||
    fail "no sane latency row (2 bytes)"
  port=$((port + 1))
}

run started
run moved
echo PASS
