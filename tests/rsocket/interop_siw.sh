#!/usr/bin/env bash
# interop_siw.sh LIB [PORT]
#
# goiwarp's rsockets against rdma-core's (librdmacm on Linux siw), in the qemu
# guest of ../shared/interop (build it first: SIW_GUEST_DIR=<dir>
# bash ../shared/interop/build-guest.sh). Not a ctest: it boots a guest
# (about a minute of one core under TCG). The guest's rstream/riostream are the
# clients, goiwarp's (LD_PRELOAD=LIB on the host) the servers, one per case;
# passes when both ends of every case exit 0 and print their figures.
#
# Only this direction: with siw 6.1 as the server, a client's first message
# can arrive while siw_accept() has not yet attached the socket to the QP, and
# it stays unread until more data comes (../shared/interop/README.md); rstream's
# client sends 16 bytes and waits for the answer, so it stalls whoever the
# client is.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=${1:?usage: interop_siw.sh path/to/libgoiwarp.so [PORT]}
port=${2:-32094}
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
trap 'kill "$hp" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"' EXIT

# host: one server per case, in the order the guest connects
(
  n=0
  for c in "${cases[@]}"; do
    n=$((n + 1))
    # shellcheck disable=SC2086 # a case is a command line
    LD_PRELOAD=$lib timeout 120 $c -p "$port" >"$tmp/host.$n" 2>&1
    echo "$?" >"$tmp/host.$n.rc"
  done
) &
hp=$!

guest_cmd=""
for c in "${cases[@]}"; do
  guest_cmd+="sleep 3; echo '=== $c'; timeout 100 $c -s 10.0.2.2 -p $port; echo guest-rc=\$?; "
done
bash "$interop/run-guest.sh" -t 600 -l "$tmp/guest.log" "$guest_cmd" >/dev/null 2>&1
wait "$hp"

fail=0
i=0
sed -n '/GUEST CMD START/,/GUEST CMD EXIT/p' "$tmp/guest.log" | grep -v '^name \|GUEST CMD' >"$tmp/guest"
for c in "${cases[@]}"; do
  i=$((i + 1))
  g=$(awk -v n="$i" '/^=== / { k++ } k == n' "$tmp/guest")
  echo "== $c: guest (librdmacm on siw) client, goiwarp server"
  echo "$g" | sed 's/^/  guest: /'
  sed 's/^/  host:  /' "$tmp/host.$i"
  if ! grep -q 'guest-rc=0' <<<"$g" || [[ $(cat "$tmp/host.$i.rc" 2>/dev/null) != 0 ]] ||
    ! grep -q '^custom' <<<"$g" || ! grep -q '^custom' "$tmp/host.$i"; then
    echo "  FAIL"
    fail=1
  fi
done
[[ $fail -eq 0 ]] && echo PASS || echo FAIL
exit $fail
