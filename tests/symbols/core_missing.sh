#!/usr/bin/env bash
# core_missing SHIM [PROGRAM]
# The shim without its Go core next to it (and none on the library path) must
# not hang or return garbage at the first API call: one line on stderr naming
# libgoiwarp-core.so.1 and dlerror, then abort(). Runs PROGRAM (default
# ibv_devices; it must call the API) with only a copy of the shim preloaded.
set -euo pipefail
. "$(dirname "$0")/../common/skip.sh"
shim=${1:?usage: core_missing.sh path/to/libgoiwarp.so [program]}
prog=${2:-$(command -v ibv_devices || true)}
[[ -n $prog ]] || skip_or_fail "no program to run (ibv_devices, ibverbs-utils, not installed)"
if /sbin/ldconfig -p 2>/dev/null | grep -q 'libgoiwarp-core\.so\.1'; then
  echo "SKIP: a libgoiwarp-core.so.1 is installed on the library path"; exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$(readlink -f "$shim")" "$tmp/libgoiwarp.so.1"
rc=0
timeout -k 2 20 env -u LD_LIBRARY_PATH LD_PRELOAD="$tmp/libgoiwarp.so.1" "$prog" \
  >"$tmp/out" 2>"$tmp/err" || rc=$?
sed 's/^/    stderr: /' "$tmp/err"
fail=0
# 134 = 128 + SIGABRT (timeout(1) passes the child's status through)
[[ $rc -eq 134 ]] || { echo "FAIL: exit status $rc, want 134 (abort)"; fail=1; }
n=$(grep -c 'libgoiwarp: cannot load the Go core libgoiwarp-core.so.1: ' "$tmp/err" || true)
[[ $n -eq 1 ]] || { echo "FAIL: want exactly one 'libgoiwarp: cannot load the Go core' line on stderr"; fail=1; }
[[ $fail -eq 0 ]] && echo "ok: without its core the shim says why on one line and aborts ($prog)"
exit $fail
