#!/usr/bin/env bash
# run_pair.sh BIN PORT EXPECT [CLIENT_ARGS...]
# Runs BIN as a server (background) and as a client of 127.0.0.1 on PORT, each
# under a timeout. Passes when both exit 0 and the client's output matches the
# extended regex EXPECT. Never leaves the server behind. GIW_SERVER_ARGS
# (environment) adds server options.
set -uo pipefail
bin=$1 port=$2 expect=$3
shift 3
limit=${GIW_TEST_TIMEOUT:-60}
out=$(mktemp) srv=$(mktemp)
# shellcheck disable=SC2086 # GIW_SERVER_ARGS is a list of options
timeout -k 5 "$limit" "$bin" -p "$port" ${GIW_SERVER_ARGS:-} >"$srv" 2>&1 &
sp=$!
trap 'kill "$sp" 2>/dev/null; wait "$sp" 2>/dev/null; rm -f "$out" "$srv"' EXIT
timeout -k 5 "$limit" "$bin" -p "$port" "$@" 127.0.0.1 >"$out" 2>&1
crc=$?
if [[ $crc -ne 0 ]]; then
  # the server may wait for nobody now: give it a moment, then stop it
  for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$sp" 2>/dev/null || break; sleep 0.2; done
  kill "$sp" 2>/dev/null
fi
wait "$sp"
src=$?
echo "== client: $(basename "$bin") -p $port $* 127.0.0.1 (exit $crc)"
cat "$out"
echo "== server: $(basename "$bin") -p $port (exit $src)"
cat "$srv"
if [[ $crc -ne 0 || $src -ne 0 ]]; then
  echo "FAIL: client exit $crc, server exit $src (124 = timed out)"
  exit 1
fi
if ! grep -Eq -- "$expect" "$out"; then
  echo "FAIL: client output lacks /$expect/"
  exit 1
fi
echo "PASS"
