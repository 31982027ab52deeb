#!/usr/bin/env bash
# run.sh BUILD_DIR: rdma-core v44's own Python test suite (tests/run_tests.py
# with Debian's python3-pyverbs) under LD_PRELOAD=libgoiwarp.so, checked by
# check.py against expected.txt (every test passes unless listed there).
# The suite comes from ../shared/rdma-core-tests (GIW_RDMA_CORE_TESTS: the
# tarball), unpacked into a scratch folder for the run, never into the tree.
# Its CM tests want a device with a non-loopback interface and
# /sys/class/infiniband/<dev>/device/net/<ifname>: the run happens in a
# private network namespace with one veth interface (device giw_giwrc0)
# and a private mount namespace with a tmpfs over /sys/class holding that
# one entry. Needs root (or an unprivileged user namespace: unshare -r).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../common/skip.sh"

if [[ ${1:-} != --inside ]]; then
  build=$(cd "${1:?usage: run.sh BUILD_DIR}" && pwd)
  lib=$build/libgoiwarp.so
  [[ -e $lib ]] || { echo "FAIL: $lib missing (build first)"; exit 1; }
  tarball=${GIW_RDMA_CORE_TESTS:-$here/../../../shared/rdma-core-tests/rdma-core-v44-tests.tar.gz}
  [[ -r $tarball ]] || skip_or_fail "rdma-core tests not found at $tarball (../shared/rdma-core-tests)"
  /usr/bin/python3 -c 'import pyverbs' 2>/dev/null || skip_or_fail "python3-pyverbs is not installed (build/deps.sh)"
  for t in unshare ip mount tar timeout; do
    command -v "$t" >/dev/null || skip_or_fail "$t is not installed"
  done
  userns=()
  [[ $(id -u) -eq 0 ]] || userns=(-r)
  if ! out=$(unshare "${userns[@]}" -m -n true 2>&1); then
    skip_or_fail "cannot create mount + network namespaces (unshare ${userns[*]} -m -n: $out)"
  fi
  exec unshare "${userns[@]}" -m -n bash "$0" --inside "$lib" "$tarball"
fi

lib=$2 tarball=$3
die() { echo "FAIL: $*"; exit 1; }
mount --make-rprivate / || die "mount --make-rprivate /"
ifname=giwrc0 dev=giw_giwrc0
ip link set lo up || die "ip link set lo up"
# A veth pair (the kernel may lack the dummy driver); only its first end
# gets an address, so only it has a device.
ip link add "$ifname" type veth peer name "${ifname}p" || die "ip link add $ifname type veth"
# 198.18.0.0/15 is for benchmarking (RFC 2544): routed nowhere.
ip addr add 198.18.251.1/24 dev "$ifname" && ip link set "${ifname}p" up &&
  ip link set "$ifname" up || die "cannot set up $ifname"
# sysfs has no infiniband class here: a tmpfs over /sys/class (this
# namespace only) with the one entry the suite reads (base.py get_net_name).
mount -t tmpfs giw-sysclass /sys/class || die "mount tmpfs on /sys/class"
mkdir -p "/sys/class/infiniband/$dev/device/net/$ifname"

scratch=$(mktemp -d /tmp/giw-rdmacore.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
tar xzf "$tarball" -C "$scratch" || die "cannot unpack $tarball"
cd "$scratch" || die "cd $scratch"
LD_PRELOAD=$lib timeout 900 /usr/bin/python3 "$here/check.py" "$here/expected.txt" "$scratch/tests" --dev "$dev" -v
