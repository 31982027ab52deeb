#!/usr/bin/env bash
# main-job.sh: the README's first command. Installs what the build needs (if
# missing), builds libgoiwarp.so + examples into $GOIWARP_BUILD_DIR (default
# _build/), then runs the main job. This script is the single place that says
# what the main job is.
#
# The main job: our perftest-style giw_write_bw over loopback on giw_lo — a
# server in the background, a client connecting to 127.0.0.1, each under a
# timeout — and print the client's bandwidth table. Exits non-zero if either
# side fails or hangs; leaves no process behind.
#   MAIN_JOB_ARGS   client options (default: -s 65536 -D 2)
#   MAIN_JOB_PORT   port (default 18515)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
B=${GOIWARP_BUILD_DIR:-_build}

bash build/deps.sh build
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$B" -j"$(nproc)"

bin=$B/examples/c/giw_write_bw
port=${MAIN_JOB_PORT:-18515}
read -r -a args <<<"${MAIN_JOB_ARGS:--s 65536 -D 2}"
srv_log=$(mktemp)
srv_pid=
cleanup() {
  if [[ -n $srv_pid ]] && kill -0 "$srv_pid" 2>/dev/null; then
    kill "$srv_pid" 2>/dev/null || true
    wait "$srv_pid" 2>/dev/null || true
  fi
  rm -f "$srv_log"
}
trap cleanup EXIT

echo "== $bin -d giw_lo -p $port   (server, background)"
echo "== $bin -d giw_lo -p $port ${args[*]} 127.0.0.1   (client)"
timeout -k 5 60 "$bin" -d giw_lo -p "$port" >"$srv_log" 2>&1 &
srv_pid=$!
# The client retries for up to 5 s while the server comes up.
crc=0
timeout -k 5 60 "$bin" -d giw_lo -p "$port" "${args[@]}" 127.0.0.1 || crc=$?
src=0
wait "$srv_pid" || src=$?
srv_pid=
if [[ $crc -ne 0 || $src -ne 0 ]]; then
  echo "main job FAILED: client exit $crc, server exit $src (124: timed out); server output:" >&2
  sed 's/^/  server: /' "$srv_log" >&2
  exit 1
fi
echo "main job OK: giw_write_bw over loopback on giw_lo"
