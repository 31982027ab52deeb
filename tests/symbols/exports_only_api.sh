#!/usr/bin/env bash
# exports_only_api LIB
# Fails unless every dynamic symbol LIB defines is public API (ibv_*, rdma_*,
# giw_*, _ibv_*, __ibv_*, *_to_ibv_rate) or one of the shim's signal
# interposers (GIW_SIGNAL_RE): no Go runtime, cgo or other libc symbol may leak. Also checks the SONAME and that the exports are unversioned (see the
# comment in build/libgoiwarp.map for why).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
lib=${1:?usage: exports_only_api.sh path/to/libgoiwarp.so}
[[ -e $lib ]] || { echo "FAIL: $lib does not exist (build first)"; exit 1; }

fail=0
soname=$(giw_soname "$lib")
if [[ $soname != libgoiwarp.so.1 ]]; then
  echo "FAIL: SONAME is '${soname}', want libgoiwarp.so.1"; fail=1
fi

all=$(nm -D --defined-only "$lib" | awk 'NF >= 3 { print $3 }' | sort -u)
n=$(printf '%s\n' "$all" | grep -c . || true)
if [[ $n -eq 0 ]]; then
  echo "FAIL: $lib defines no dynamic symbols"; exit 1
fi
bad=$(printf '%s\n' "$all" | sed 's/@.*//' | grep -Ev "$GIW_API_RE" | grep -Ev "$GIW_SIGNAL_RE" || true)
if [[ -n $bad ]]; then
  echo "FAIL: $lib exports $(printf '%s\n' "$bad" | wc -l) non-API symbols (check build/libgoiwarp.map and the -extldflags):"
  printf '  %s\n' $bad | head -50
  fail=1
fi
versioned=$(printf '%s\n' "$all" | grep '@' || true)
if [[ -n $versioned ]]; then
  echo "FAIL: exports must be unversioned, found:"
  printf '  %s\n' $versioned | head -20
  fail=1
fi
if [[ $fail -eq 0 ]]; then
  echo "ok: $lib (SONAME $soname) exports $n symbols, all public API, unversioned"
fi
exit $fail
