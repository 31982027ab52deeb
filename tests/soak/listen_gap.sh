#!/usr/bin/env bash
# listen_gap.sh LIB GAPLIB: perftest -R pairs whose server opens its data
# listener 300 ms after the control handshake (GAPLIB delays the second
# rdma_listen); the client connects in that gap. perftest 4.5 reports
# REJECTED and then crashes in its own retry (SIGBUS) unless the connect
# waits for the listener: goiwarp retries a refused connect for
# GOIWARP_CONNECT_RETRY (1 s). Ports 26900-26999.
set -uo pipefail
lib=${1:?usage: listen_gap.sh LIB GAPLIB} gap=${2:?usage: listen_gap.sh LIB GAPLIB}
fail=0 port=$((26900 + RANDOM % 50))
for prog in ib_write_bw ib_send_bw ib_read_bw; do
  command -v $prog >/dev/null || { echo "FAIL: $prog not installed"; exit 1; }
  port=$((port + 1))
  out=$(mktemp) srv=$(mktemp)
  LD_PRELOAD="$gap $lib" timeout -k 5 60 $prog -R -d giw_lo -F -n 200 -p $port >"$srv" 2>&1 &
  s=$!
  for _ in $(seq 500); do # the server's first listen: the control connection
    awk -v p=":$(printf '%04X' $port)" '$2 ~ p "$" && $4 == "0A" { f = 1 } END { exit !f }' /proc/net/tcp && break
    sleep 0.01
  done
  LD_PRELOAD=$lib timeout -k 5 60 $prog -R -d giw_lo -F -n 200 -p $port 127.0.0.1 >"$out" 2>&1
  c=$?
  [[ $c -eq 0 ]] || kill $s 2>/dev/null
  wait $s
  sv=$?
  if [[ $c -ne 0 || $sv -ne 0 ]]; then
    echo "FAIL: $prog with a 300 ms listen gap: client exit $c, server exit $sv"
    tail -5 "$out" "$srv"
    fail=1
  else
    echo "ok: $prog with a 300 ms listen gap"
  fi
  rm -f "$out" "$srv"
done
exit $fail
