#!/usr/bin/env bash
# interop_siw.sh LIB [PORT]
#
# goiwarp's rsockets against rdma-core's (librdmacm on Linux siw 6.1), in the
# qemu guest of ../shared/interop (build it first: SIW_GUEST_DIR=<dir>
# bash ../shared/interop/build-guest.sh). Not a ctest: it boots the guest
# (about two minutes of one core under TCG). Each case runs both ways:
#   guest client -> goiwarp server (the guest reaches the host as 10.0.2.2:PORT)
#   goiwarp client -> guest server (host 127.0.0.1:PORT+1 forwarded to the guest)
# and passes when both ends exit 0 and print their figures.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=${1:?usage: interop_siw.sh path/to/libgoiwarp.so [PORT]}
port=${2:-32094}
fport=$((port + 1))
interop=${GIW_INTEROP_DIR:-$here/../../../shared/interop}
: "${SIW_GUEST_DIR:?set SIW_GUEST_DIR to the guest build (see ../shared/interop/README.md)}"
export SIW_GUEST_DIR
cases=(
  "rstream -T b -T v -S 100000 -C 50"
  "rstream -S 1048576 -C 20"
  "riostream -T b -T v -S 100000 -C 50"
  "riostream -S 4096 -C 1000"
)
tmp=$(mktemp -d)
gp=
trap '[[ -n $gp ]] && kill "$gp" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT

# The guest: for each case, a client of the host, then a server for the host.
guest_cmd=""
for c in "${cases[@]}"; do
  guest_cmd+="sleep 3; echo '=== client: $c'; timeout 100 $c -s 10.0.2.2 -p $port; echo guest-rc=\$?; "
  guest_cmd+="echo '=== server: $c'; (timeout 100 $c -p $fport; echo guest-rc=\$?) & sleep 2; echo GUEST-LISTENING; wait; "
done
: >"$tmp/guest.log"
bash "$interop/run-guest.sh" -t 900 -p "$fport" -l "$tmp/guest.log" "$guest_cmd" >/dev/null 2>&1 &
gp=$!

n=0
for c in "${cases[@]}"; do
  n=$((n + 1))
  # shellcheck disable=SC2086 # a case is a command line
  LD_PRELOAD=$lib timeout 120 $c -p "$port" >"$tmp/host-srv.$n" 2>&1
  echo "$?" >"$tmp/host-srv.$n.rc"
  for _ in $(seq 300); do
    (($(grep -c '^GUEST-LISTENING' "$tmp/guest.log") >= n)) && break
    kill -0 "$gp" 2>/dev/null || break
    sleep 0.5
  done
  # shellcheck disable=SC2086
  LD_PRELOAD=$lib timeout 120 $c -s 127.0.0.1 -p "$fport" >"$tmp/host-cli.$n" 2>&1
  echo "$?" >"$tmp/host-cli.$n.rc"
done
wait "$gp"
gp=

fail=0
sed -n '/GUEST CMD START/,/GUEST CMD EXIT/p' "$tmp/guest.log" | grep -v '^name \|GUEST CMD\|GUEST-LISTENING' >"$tmp/guest"
n=0
for c in "${cases[@]}"; do
  n=$((n + 1))
  for dir in client server; do
    g=$(awk -v want="=== $dir: $c" '/^=== / { on = ($0 == want) } on' "$tmp/guest")
    if [[ $dir == client ]]; then h=host-srv.$n; else h=host-cli.$n; fi
    echo "== $c: guest (librdmacm on siw) $dir, goiwarp $([[ $dir == client ]] && echo server || echo client)"
    echo "$g" | sed 's/^/  guest: /'
    grep -v '^name ' "$tmp/$h" | sed 's/^/  host:  /'
    if ! grep -q 'guest-rc=0' <<<"$g" || [[ $(cat "$tmp/$h.rc" 2>/dev/null) != 0 ]] ||
      ! grep -q '^custom' <<<"$g" || ! grep -q '^custom' "$tmp/$h"; then
      echo "  FAIL"
      fail=1
    fi
  done
done
[[ $fail -eq 0 ]] && echo PASS || echo FAIL
exit $fail
