#!/bin/bash
# Capture one rping run (LD_PRELOAD=libgoiwarp.so) on loopback with tshark
# and decode it with Wireshark's iWARP dissectors: no malformed packet, MPA
# request and reply, and the RDMAP opcodes Send, Read Request, Read Response
# and Write. When capture is impossible or a tool is missing: exit 77 (ctest
# SKIP_RETURN_CODE), or a failure when CI is set (tests/common/skip.sh).
# Usage: ws_check.sh LIBGOIWARP PORT
set -u
lib=$1 port=$2
. "$(dirname "$0")/../common/skip.sh"
. "$(dirname "$0")/../common/listen.sh"
command -v tshark >/dev/null || skip_or_fail "tshark not installed (build/deps.sh installs it)"
command -v rping >/dev/null || skip_or_fail "rping (rdmacm-utils) not installed"
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
pcap=$dir/rping.pcap
tshark -i lo -f "tcp port $port" -w "$pcap" >"$dir/tshark.log" 2>&1 &
ts=$!
# Wait until tshark is capturing (it prints "Capturing on").
for _ in $(seq 100); do
  grep -q "Capturing on" "$dir/tshark.log" && break
  kill -0 $ts 2>/dev/null || break
  sleep 0.1
done
if ! grep -q "Capturing on" "$dir/tshark.log"; then
  kill $ts 2>/dev/null; wait $ts 2>/dev/null
  skip_or_fail "tshark cannot capture on lo here: $(tr '\n' ' ' <"$dir/tshark.log")"
fi
LD_PRELOAD=$lib timeout 30 rping -s -a 127.0.0.1 -p "$port" -C 3 >"$dir/srv.log" 2>&1 &
srv=$!
wait_listen "$port" "$srv" || echo "note: rping server not listening on $port after 10 s"
LD_PRELOAD=$lib timeout 30 rping -c -a 127.0.0.1 -p "$port" -C 3 -v >"$dir/cli.log" 2>&1
crc=$?
wait $srv; src=$?
# Stop tshark once the capture holds the connection's end (both FINs or a
# RST come after every FPDU; tshark writes each packet as it gets it).
end=$((SECONDS + 10))
while ((SECONDS < end)); do
  tshark -r "$pcap" -Y 'tcp.flags.fin == 1 || tcp.flags.reset == 1' -T fields \
    -e tcp.flags.fin -e tcp.flags.reset 2>/dev/null |
    awk '$1 == 1 || $1 == "True" { f++ } $2 == 1 || $2 == "True" { r++ } END { exit !(f >= 2 || r >= 1) }' && break
  sleep 0.1
done
kill -INT $ts; wait $ts
fail=0
if [[ $crc != 0 || $src != 0 ]]; then
  echo "FAIL: rping client $crc server $src"; cat "$dir/cli.log" "$dir/srv.log"; fail=1
fi
out=$dir/decode.txt
tshark -r "$pcap" -O iwarp_mpa,iwarp_ddp_rdmap --disable-protocol rpcordma >"$out" 2>&1
if grep -qi "malformed" "$out" || [[ $(tshark -r "$pcap" -Y _ws.malformed --disable-protocol rpcordma 2>/dev/null | wc -l) != 0 ]]; then
  echo "FAIL: malformed packets"; grep -i -B30 malformed "$out" | head -80; fail=1
fi
# The order of the MPA frames and the presence of the opcodes.
seq=$(tshark -r "$pcap" --disable-protocol rpcordma -T fields -e iwarp_mpa.key.req -e iwarp_mpa.key.rep \
  -e iwarp_rdma.opcode -Y 'iwarp_mpa or iwarp_ddp_rdmap' 2>/dev/null)
first_req=$(echo "$seq" | awk -F'\t' '$1 != "" {print NR; exit}')
first_rep=$(echo "$seq" | awk -F'\t' '$2 != "" {print NR; exit}')
first_op=$(echo "$seq" | awk -F'\t' '$3 != "" {print NR; exit}')
if [[ -z $first_req || -z $first_rep || -z $first_op || $first_req -gt $first_rep || $first_rep -gt $first_op ]]; then
  echo "FAIL: want MPA request, then MPA reply, then FPDUs (lines $first_req $first_rep $first_op)"
  echo "$seq" | head -20; fail=1
fi
for op in "Send" "Read Request" "Read Response" "Write"; do
  if ! grep -Eq "OpCode.*: (RDMA )?$op( |\()" "$out"; then
    echo "FAIL: no RDMAP $op in the capture"; fail=1
  fi
done
if [[ $fail != 0 ]]; then
  exit 1
fi
grep -E "OpCode" "$out" | sort | uniq -c
echo "OK: MPA request, reply, then $(grep -c "OpCode" "$out") RDMAP headers decoded, none malformed"
