#!/usr/bin/env bash
# run.sh LIB [SRC]: Open MPI jobs over goiwarp through libfabric's verbs
# provider (pml cm, mtl ofi, provider "verbs;ofi_rxm"), each rank under
# LD_PRELOAD=LIB, running mpi_check (SRC, built here with mpicc).
#
# libfabric ignores loopback interfaces, so the job runs in a user + network
# namespace of its own (`unshare -rn`, no root) with a veth pair, giwma
# 10.78.0.1/24 and giwmb 10.78.1.1/24; the ranks use giwma's device. Jobs:
#   2 ranks over the TCP data path (GOIWARP_SHM=0)
#   2 ranks over the same-host path (the default)
#   4 ranks on 2 cores over the same-host path, and over the TCP path
#     (oversubscribed)
# Each job: mpirun exits 0, rank 0 prints "mpi_check: ok", and every
# ping-pong row has a latency > 0 and a bandwidth > 0 (or 0.00 where
# bytes / usec rounds to it). The pml and mtl are forced: if goiwarp's
# device were unusable, MPI_Init would fail rather than fall back to TCP.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../common/skip.sh"
if [[ ${1:-} != --inside ]]; then
  lib=$(readlink -f "${1:?usage: run.sh LIB [SRC]}")
  src=$(readlink -f "${2:-$here/mpi_check.c}")
  for t in mpirun mpicc fi_info unshare ip timeout; do
    command -v "$t" >/dev/null || skip_or_fail "mpi: $t is not installed (build/deps.sh all installs openmpi-bin, libopenmpi-dev, libfabric-bin)"
  done
  if ! out=$(timeout 10 unshare -rn true 2>&1); then
    skip_or_fail "mpi: cannot create a user + network namespace (unshare -rn: $out)"
  fi
  exec timeout 280 unshare -rn bash "$0" --inside "$lib" "$src"
fi

# ---- inside the user + network namespace -------------------------------------
lib=$2 src=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
die() { echo "FAIL: $*"; exit 1; }
ip link set lo up || die "ip link set lo up"
ip link add giwma type veth peer name giwmb || die "cannot create a veth pair (ip link add type veth)"
ip addr add 10.78.0.1/24 dev giwma && ip addr add 10.78.1.1/24 dev giwmb &&
  ip link set giwma up && ip link set giwmb up || die "addresses on the veth pair"
mpicc -O2 -o "$work/mpi_check" "$src" || die "mpicc $src"

fail=0
job() { # name ranks shm
  local name=$1 np=$2 shm=$3 rc rows
  echo "--- $name: mpirun -np $np, pml cm, mtl ofi, verbs;ofi_rxm on giw_giwma, GOIWARP_SHM=$shm"
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$np" --host "localhost:$np" \
    --mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "verbs;ofi_rxm" \
    --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
    -x LD_PRELOAD="$lib" -x GOIWARP_SHM="$shm" -x FI_VERBS_IFACE=giwma \
    "$work/mpi_check" >"$work/out" 2>&1
  rc=$?
  sed 's/^/  /' "$work/out"
  rows=$(awk '
    /^pingpong [0-9]+ bytes:/ {
      n++; b = $2 + 0; us = $4 + 0; mb = $8 + 0
      if (!(us > 0) || !(mb > 0 || b / us < 0.005)) { print "bad row: " $0; bad = 1 }
    }
    END { if (!bad) print n + 0 }' "$work/out")
  if [[ $rc -ne 0 ]]; then echo "FAIL: $name: mpirun exit $rc"; fail=1; return; fi
  grep -q '^mpi_check: ok' "$work/out" || { echo "FAIL: $name: no \"mpi_check: ok\""; fail=1; return; }
  [[ $rows =~ ^[0-9]+$ && $rows -eq 12 ]] || { echo "FAIL: $name: ping-pong rows: $rows"; fail=1; return; }
  echo "$name: ok (12 ping-pong rows with figures, ring, bcast, allreduce, alltoall checked)"
}
job "2 ranks, TCP path" 2 0
job "2 ranks, same-host path" 2 1
job "4 ranks, same-host path" 4 1
job "4 ranks, TCP path" 4 0
if ((fail)); then
  echo "FAIL: Open MPI over goiwarp"
  exit 1
fi
echo "ok: Open MPI (mtl ofi, verbs;ofi_rxm) over goiwarp: 2 and 4 ranks over the TCP path and the same-host path"
