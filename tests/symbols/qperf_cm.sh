#!/usr/bin/env bash
# qperf_cm LIB
# qperf's server forks a child per client before any RDMA call and the child
# does all the RDMA work: with LD_PRELOAD=LIB the child must load its own Go
# core (capi/loader/) and run the test. Server and client on 127.0.0.1, RDMA CM
# (-cm1), rc_bw; the control port is in 22000-22999. Only our own PIDs are
# killed. Without qperf: skips (77), fails when CI is set.
set -uo pipefail
. "$(dirname "$0")/../common/skip.sh"
. "$(dirname "$0")/../common/listen.sh"
lib=${1:?usage: qperf_cm.sh path/to/libgoiwarp.so}
lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
command -v qperf >/dev/null || skip_or_fail "qperf not installed"
tmp=$(mktemp -d)
spid=
cleanup() { [[ -n $spid ]] && kill "$spid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT

for attempt in 1 2 3 4 5; do
  port=$((22000 + (RANDOM % 1000)))
  listening "$port" && continue # taken: wait_listen would see its owner
  LD_PRELOAD=$lib timeout -k 2 120 qperf -lp "$port" >"$tmp/server" 2>&1 &
  spid=$!
  if wait_listen "$port" "$spid"; then break; fi
  kill "$spid" 2>/dev/null
  wait "$spid" 2>/dev/null; spid=
  echo "server on port $port did not start: $(head -2 "$tmp/server")"
done
[[ -n $spid ]] || { echo "FAIL: could not start a qperf server"; exit 1; }

fail=0
for t in rc_bw rc_lat; do
  rc=0
  LD_PRELOAD=$lib timeout -k 2 60 qperf 127.0.0.1 -lp "$port" -cm1 -t 2 "$t" >"$tmp/client" 2>&1 || rc=$?
  sed 's/^/    /' "$tmp/client"
  if [[ $rc -ne 0 ]] || ! grep -qE '^ +(bw|latency) += ' "$tmp/client"; then
    echo "FAIL: qperf -cm1 $t (exit $rc)"; fail=1
  fi
done
if [[ -s $tmp/server ]]; then echo "server output:"; sed 's/^/    /' "$tmp/server"; fi
[[ $fail -eq 0 ]] && echo "ok: qperf -cm1 rc_bw rc_lat under LD_PRELOAD (server child forked before its first RDMA call)"
exit $fail
