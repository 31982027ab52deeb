#!/usr/bin/env bash
# deps.sh [all|build|bench]: installs the Debian packages goiwarp needs
# (idempotent, noninteractive). "build" = enough to build and run the main job;
# "all" (the default) = everything the tests need; "bench" = the build plus the
# references bench/compare.sh measures against and the programs of bench/ab.py,
# rsockets.py and netpath.py. Runs apt-get only when something
# is missing.
set -euo pipefail
# dpkg-dev: dpkg-shlibdeps and dpkg-architecture, for `cpack -G DEB` (docs/install.md).
build_pkgs=(cmake make gcc g++ pkg-config binutils file git dpkg-dev
  libibverbs-dev librdmacm-dev ibverbs-utils rdmacm-utils perftest)
test_pkgs=(qperf tshark iperf3 python3 python3-pyverbs procps iproute2 coreutils libfabric-bin util-linux sockperf
  openmpi-bin libopenmpi-dev)
# interop_siw (tests/interop): what ../shared/interop/build-guest.sh needs to
# build the siw guest (it downloads the kernel image and source itself), and
# run-guest.sh's qemu and bc; linux-headers-amd64 is the headers of the kernel
# linux-image-amd64 names, which the guest boots.
interop_pkgs=(qemu-system-x86 busybox-static ibverbs-providers tcpdump kmod cpio gzip xz-utils
  make gcc libelf-dev bc linux-headers-amd64)
optional_pkgs=(dwarves)   # pahole, for the ABI test; installed when apt has it
bench_pkgs=(qperf iperf3 ucx-utils strace python3 procps fio sockperf libfabric-bin)

want=("${build_pkgs[@]}")
[[ ${1:-all} == all ]] && want+=("${test_pkgs[@]}" "${interop_pkgs[@]}" "${optional_pkgs[@]}")
[[ ${1:-all} == bench ]] && want+=("${bench_pkgs[@]}")

missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "deps: all ${#want[@]} packages installed"
  exit 0
fi
sudo=
[[ $(id -u) -eq 0 ]] || sudo=sudo
export DEBIAN_FRONTEND=noninteractive
echo "deps: installing ${missing[*]}"
$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq
install=()
for p in "${missing[@]}"; do
  if [[ " ${optional_pkgs[*]} " == *" $p "* ]] && ! apt-cache show "$p" >/dev/null 2>&1; then
    echo "deps: optional package $p is not available, skipped"; continue
  fi
  install+=("$p")
done
[[ ${#install[@]} -eq 0 ]] || $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${install[@]}"
