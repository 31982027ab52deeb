#!/usr/bin/env bash
# run_tools.sh LIB PORT COUNT TOOL [ARGS...]
#
# Runs an rsocket program of rdmacm-utils as server and client of 127.0.0.1
# on PORT under LD_PRELOAD=LIB (libgoiwarp.so), COUNT times, each process
# under a timeout, and checks what it prints:
#   rstream|riostream ARGS   both exit 0; both print the same number of result
#                            rows (name bytes xfers iters total time Gb/sec
#                            usec/xfer); every row has a time and a sane
#                            usec/xfer (0 < x < 200000); rows of 4 KiB and more
#                            a non-zero Gb/sec
#   rcopy                    a 5 MB file arrives intact, the client prints its rate
#   rspreload PROG ARGS      PROG (rstream with -T s, iperf3 or sockperf
#                            ping-pong: plain TCP programs) under
#                            LD_PRELOAD="LIB librspreload.so";
#                            GOIWARP_LOG=debug must show the connection in RTS,
#                            i.e. it ran over goiwarp's rsockets, not TCP
#   killpeer rstream ARGS    the server is killed (SIGKILL) in the middle of the
#                            transfer: the client must end within 10 s with an
#                            error of its own (no hang, no crash)
# Never leaves a process behind.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../common/listen.sh"
. "$here/../common/skip.sh"

lib=${1:?usage: run_tools.sh LIB PORT COUNT TOOL [ARGS...]}
port=$2 count=$3 tool=$4
shift 4
limit=${GIW_TEST_TIMEOUT:-120}
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
[[ -e $lib ]] || fail "$lib does not exist (build first)"

preload=$lib
prog=$tool
if [[ $tool == killpeer ]]; then
  prog=$1
  shift
fi
if [[ $tool == rspreload ]]; then
  rsp=$(dpkg -L librdmacm1 2>/dev/null | grep '/librspreload\.so$' | head -1)
  [[ -n $rsp ]] || skip_or_fail "librspreload.so (package librdmacm1) is not installed"
  preload="$lib $rsp"
  prog=$1
  shift
fi
command -v "$prog" >/dev/null || skip_or_fail "$prog is not installed"

# start_server OUT ARGS...: the server in the background, once it listens.
start_server() {
  local out=$1
  shift
  LD_PRELOAD=$preload timeout -k 5 "$limit" "$@" >"$out" 2>&1 &
  sp=$!
  pids+=("$sp")
  wait_listen "$port" "$sp" 20 || { cat "$out"; fail "server $* does not listen on $port"; }
}

# server_exit PID: its exit status, waiting at most a few seconds.
server_exit() {
  for _ in $(seq 50); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
  kill "$1" 2>/dev/null
  wait "$1"
}

# check_rows FILE: the result rows of rstream/riostream; prints their count.
check_rows() {
  awk '
    function bytes(s,   n, u) { n = s + 0; u = substr(s, length(s));
      if (u == "k") n *= 1024; else if (u == "m") n *= 1048576; else if (u == "g") n *= 1073741824; return n }
    $1 ~ /(_lat|_bw|^custom)$/ && NF == 8 {
      rows++
      t = $6; sub(/s$/, "", t)
      if (t !~ /^[0-9]+\.[0-9]+$/) { print "bad time: " $0 > "/dev/stderr"; bad++ }
      if ($8 + 0 <= 0 || $8 + 0 >= 200000) { print "bad usec/xfer: " $0 > "/dev/stderr"; bad++ }
      if (bytes($2) >= 4096 && $7 + 0 <= 0) { print "zero Gb/sec: " $0 > "/dev/stderr"; bad++ }
    }
    END { print rows + 0; exit bad > 0 }' "$1"
}

run_stream() { # rstream|riostream, once
  local s=$tmp/srv c=$tmp/cli sr cr ns nc
  start_server "$s" "$prog" -p "$port" "$@"
  LD_PRELOAD=$preload timeout -k 5 "$limit" "$prog" -s 127.0.0.1 -p "$port" "$@" >"$c" 2>&1
  cr=$?
  server_exit "$sp"
  sr=$?
  echo "== client: $prog -s 127.0.0.1 -p $port $* (exit $cr)"
  cat "$c"
  echo "== server: $prog -p $port $* (exit $sr)"
  cat "$s"
  [[ $cr -eq 0 && $sr -eq 0 ]] || fail "client exit $cr, server exit $sr (124 = timed out)"
  nc=$(check_rows "$c") || fail "client figures"
  ns=$(check_rows "$s") || fail "server figures"
  [[ $nc -ge 1 && $nc -eq $ns ]] || fail "result rows: client $nc, server $ns"
  if [[ $tool == rspreload ]]; then
    grep -q 'debug: qp [0-9]*: RTS' "$c" || fail "no RDMA connection in the client's log: not over rsockets"
  fi
}

run_rcopy() {
  local cr
  mkdir -p "$tmp/files"
  head -c 5000000 /dev/urandom >"$tmp/files/src"
  cd "$tmp/files" || fail "cd $tmp/files"
  start_server "$tmp/srv" rcopy -p "$port"
  LD_PRELOAD=$preload timeout -k 5 "$limit" rcopy "$tmp/files/src" "127.0.0.1:$tmp/files/dst" -p "$port" \
    >"$tmp/cli" 2>&1
  cr=$?
  sleep 0.2
  kill "$sp" 2>/dev/null # rcopy's server waits for the next client forever
  wait "$sp" 2>/dev/null
  echo "== client: rcopy src 127.0.0.1:dst -p $port (exit $cr)"
  cat "$tmp/cli"
  echo "== server: rcopy -p $port"
  cat "$tmp/srv"
  [[ $cr -eq 0 ]] || fail "client exit $cr"
  grep -Eq '^5000000 bytes in .* = [0-9.]+ Gb/sec' "$tmp/cli" || fail "no rate printed"
  ! grep -q '= 0.00 Gb/sec' "$tmp/cli" || fail "zero rate"
  cmp "$tmp/files/src" "$tmp/files/dst" || fail "the copy differs"
}

run_killpeer() {
  local cp cr real
  start_server "$tmp/srv" "$prog" -p "$port" "$@"
  LD_PRELOAD=$preload timeout -k 5 "$limit" "$prog" -s 127.0.0.1 -p "$port" "$@" >"$tmp/cli" 2>&1 &
  cp=$!
  pids+=("$cp")
  sleep 1.5
  real=$(pgrep -P "$sp") # the program under timeout
  [[ -n $real ]] || fail "the server ended before it could be killed"
  kill -9 "$real"
  for _ in $(seq 100); do kill -0 "$cp" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$cp" 2>/dev/null; then
    fail "the client still runs 10 s after its peer was killed"
  fi
  wait "$cp"
  cr=$?
  echo "== client: $prog -s 127.0.0.1 -p $port $* (exit $cr) after its server was killed"
  cat "$tmp/cli"
  [[ $cr -ne 0 && $cr -ne 124 && ($cr -lt 128 || $cr -gt 165) ]] ||
    fail "client exit $cr: want an error exit of its own (not 0, not a signal, not a timeout)"
}

run_iperf3() {
  local cr sr
  start_server "$tmp/srv" iperf3 -s -1 -p "$port"
  LD_PRELOAD=$preload timeout -k 5 "$limit" iperf3 -c 127.0.0.1 -p "$port" -t 2 "$@" >"$tmp/cli" 2>&1
  cr=$?
  server_exit "$sp"
  sr=$?
  echo "== client: iperf3 -c 127.0.0.1 -p $port -t 2 (exit $cr)"
  grep -v 'debug: cm:' "$tmp/cli"
  echo "== server: iperf3 -s -1 -p $port (exit $sr)"
  grep -v 'debug: cm:' "$tmp/srv"
  [[ $cr -eq 0 && $sr -eq 0 ]] || fail "client exit $cr, server exit $sr"
  grep -q 'debug: qp [0-9]*: RTS' "$tmp/cli" || fail "no RDMA connection in the client's log: not over rsockets"
  grep -Eq '[1-9][0-9.]* [MG]bits/sec.*receiver|0\.[0-9]*[1-9][0-9]* Gbits/sec.*receiver' "$tmp/cli" ||
    fail "no receiver rate"
}

# sockperf sends with sendto and the peer's address on its connected socket
# and reads TCP_INFO; its latency summary must be there and sane.
run_sockperf() {
  local cr
  start_server "$tmp/srv" sockperf server --tcp -i 127.0.0.1 -p "$port"
  LD_PRELOAD=$preload timeout -k 5 "$limit" sockperf ping-pong --tcp -i 127.0.0.1 -p "$port" -t 2 "$@" \
    >"$tmp/cli" 2>&1
  cr=$?
  kill "$sp" 2>/dev/null # sockperf's server serves until killed
  wait "$sp" 2>/dev/null
  echo "== client: sockperf ping-pong --tcp -i 127.0.0.1 -p $port -t 2 $* (exit $cr)"
  grep -v 'debug: cm:' "$tmp/cli"
  [[ $cr -eq 0 ]] || fail "client exit $cr"
  grep -q 'debug: qp [0-9]*: RTS' "$tmp/cli" || fail "no RDMA connection in the client's log: not over rsockets"
  awk '/Summary: Latency is/ { v = $(NF - 1) + 0; ok = v > 0 && v < 100000 } END { exit !ok }' "$tmp/cli" ||
    fail "no sane latency summary"
}

[[ $tool == rspreload ]] && export GOIWARP_LOG=debug
for i in $(seq "$count"); do
  echo "=== run $i of $count"
  case $prog in
  rstream | riostream)
    if [[ $tool == killpeer ]]; then run_killpeer "$@"; else run_stream "$@"; fi ;;
  rcopy) run_rcopy ;;
  iperf3) run_iperf3 "$@" ;;
  sockperf) run_sockperf "$@" ;;
  *) fail "unknown tool $prog" ;;
  esac
  port=$((port + 1))
done
echo "PASS"
