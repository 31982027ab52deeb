#!/usr/bin/env bash
# run.sh LIB [CTRL_PORT]: libfabric's verbs provider over goiwarp between two
# network namespaces joined by a veth pair that the test creates.
#
# libfabric ignores loopback interfaces (vrb_getifaddrs skips "lo"), so its
# verbs provider needs a device on an interface with an address. Without
# root the test makes the namespaces itself: `unshare -rn` gives a user
# namespace (root inside it) with a network namespace A; `unshare -n` inside
# makes B. A veth pair joins them: giwfa 10.77.0.1/24 in A, giwfb 10.77.0.2/24
# in B. Then, under LD_PRELOAD=LIB:
#   fi_info -p verbs                         lists giw_giwfa with FI_EP_MSG (and
#                                            verbs;ofi_rxm with FI_EP_RDM)
#   fi_pingpong -p verbs -e msg -c           server in B, client in A
#   fi_pingpong -p "verbs;ofi_rxm" -e rdm -c
# Every pingpong result row is checked: #sent = #ack = the iterations, MB/sec
# (unless bytes / usec/xfer rounds to 0.00) and usec/xfer > 0, on both
# sides; -c has fi_pingpong verify the data.
# Every process runs under timeout; nothing outlives the test (the
# namespaces go with their last process).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../common/skip.sh"
if [[ ${1:-} != --inside ]]; then
  lib=$(readlink -f "${1:?usage: run.sh LIB [CTRL_PORT]}")
  port=${2:-31300}
  iters=${PINGPONG_ITERS:-50}
  for t in fi_info fi_pingpong unshare nsenter ip timeout; do
    command -v "$t" >/dev/null || skip_or_fail "libfabric: $t is not installed (build/deps.sh all installs libfabric-bin, util-linux, iproute2)"
  done
  if ! out=$(timeout 10 unshare -rn true 2>&1); then
    skip_or_fail "libfabric: cannot create a user + network namespace (unshare -rn: $out); the test needs one for its veth pair"
  fi
  exec timeout 240 unshare -rn bash "$0" --inside "$lib" "$port" "$iters"
fi

# ---- inside the user + network namespace A --------------------------------
lib=$2 port=$3 iters=$4
logs=$(mktemp -d)
holder=
cleanup() {
  [[ -n $holder ]] && kill "$holder" 2>/dev/null
  rm -rf "$logs"
}
trap cleanup EXIT
fail=0
die() { echo "FAIL: $*"; exit 1; }

ip link set lo up || die "ip link set lo up"
ip link add giwfa type veth peer name giwfb ||
  die "cannot create a veth pair inside the namespace (ip link add type veth)"
timeout 200 unshare -n sleep 200 &
holder=$!
for _ in $(seq 50); do
  [[ $(readlink /proc/$holder/ns/net) != $(readlink /proc/self/ns/net) ]] && break
  sleep 0.02
done
B() { nsenter -t "$holder" -n --preserve-credentials "$@"; }
ip link set giwfb netns "$holder" || die "cannot move giwfb into namespace B"
ip addr add 10.77.0.1/24 dev giwfa && ip link set giwfa up || die "address on giwfa"
B ip link set lo up && B ip addr add 10.77.0.2/24 dev giwfb && B ip link set giwfb up ||
  die "address on giwfb"
echo "namespaces: A giwfa 10.77.0.1/24 <-> B giwfb 10.77.0.2/24 (veth)"

export LD_PRELOAD=$lib

# fi_info: the device of the veth interface, with FI_EP_MSG
timeout 30 fi_info -p verbs >"$logs/fi_info" 2>&1
rc=$?
echo "--- fi_info -p verbs (exit $rc)"
cat "$logs/fi_info"
msg=$(awk '/^provider: verbs$/ {p=1; next} /^provider:/ {p=0} p && /domain: giw_giwfa$/ {d=1} p && d && /type: FI_EP_MSG$/ {print; exit}' "$logs/fi_info")
rdm=$(awk '/^provider: verbs;ofi_rxm$/ {p=1; next} /^provider:/ {p=0} p && /domain: giw_giwfa$/ {d=1} p && d && /type: FI_EP_RDM$/ {print; exit}' "$logs/fi_info")
[[ $rc -eq 0 && -n $msg ]] || { echo "FAIL: fi_info lists no verbs domain giw_giwfa with FI_EP_MSG"; fail=1; }
[[ -n $rdm ]] || { echo "FAIL: fi_info lists no verbs;ofi_rxm domain giw_giwfa with FI_EP_RDM"; fail=1; }
grep -q "protocol: FI_PROTO_IWARP" "$logs/fi_info" || { echo "FAIL: fi_info shows no FI_PROTO_IWARP"; fail=1; }

# A result table row: bytes #sent #ack total time MB/sec usec/xfer Mxfers/sec
check_table() { # file side
  local rows
  rows=$(awk -v n="$iters" -v side="$2" '
    /^bytes/ {hdr=1; next}
    hdr && NF == 8 {
      rows++
      ack = $3; sub(/^=/, "", ack)
      # MB/sec is bytes per usec/xfer, printed to 2 decimals: 0.00 is
      # right for small messages at a slow rate (a loaded machine).
      b = $1 + 0; if ($1 ~ /k$/) b *= 1024; if ($1 ~ /m$/) b *= 1048576
      if ($2 != n || ack != n || !($7 + 0 > 0) || !($6 + 0 > 0 || b / $7 < 0.005))
        { print "bad " side " row: " $0; bad = 1 }
    }
    END { if (!bad) print rows + 0 }' "$1")
  if [[ ! $rows =~ ^[0-9]+$ ]]; then echo "FAIL: $rows"; return 1; fi
  if ((rows == 0)); then echo "FAIL: $2 printed no result row"; return 1; fi
  echo "$2: $rows result rows, each $iters sent and acknowledged, usec/xfer > 0, MB/sec > 0 (or 0.00 where it rounds to that)"
}

run_pingpong() { # provider ep_type ctrl_port
  local p=$1 e=$2 cport=$3 src crc
  echo "--- fi_pingpong -p \"$p\" -e $e -c -I $iters (server in B, client in A)"
  B timeout 60 fi_pingpong -p "$p" -e "$e" -c -I "$iters" -B "$cport" >"$logs/srv" 2>&1 &
  local srv=$!
  # the server listens on its control port in B before the client comes
  for _ in $(seq 100); do
    B ss -Hltn "sport = :$cport" 2>/dev/null | grep -q . && break
    sleep 0.05
  done
  timeout 60 fi_pingpong -p "$p" -e "$e" -c -I "$iters" -P "$cport" 10.77.0.2 >"$logs/cli" 2>&1
  crc=$?
  wait "$srv"
  src=$?
  echo "client (exit $crc):"; sed 's/^/  /' "$logs/cli"
  echo "server (exit $src):"; sed 's/^/  /' "$logs/srv"
  local ok=1
  [[ $crc -eq 0 ]] || { echo "FAIL: $p $e: client exit $crc"; ok=0; }
  [[ $src -eq 0 ]] || { echo "FAIL: $p $e: server exit $src"; ok=0; }
  check_table "$logs/cli" client || ok=0
  check_table "$logs/srv" server || ok=0
  ((ok)) || fail=1
}

run_pingpong verbs msg "$port"
run_pingpong "verbs;ofi_rxm" rdm "$((port + 1))"

if ((fail)); then
  echo "FAIL: libfabric over goiwarp"
  exit 1
fi
echo "ok: libfabric: fi_info lists giw_giwfa (FI_EP_MSG, FI_EP_RDM); fi_pingpong msg and rdm pass between two namespaces"
