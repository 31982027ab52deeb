#!/usr/bin/env bash
# loader_exports SHIM CORE
# The loader shim (libgoiwarp.so.1, capi/loader/) must export exactly the
# public names of the Go core (libgoiwarp-core.so.1) plus its own signal
# interposers (GIW_SIGNAL_RE, all of them), all of them functions
# (a trampoline cannot forward data), and the core's SONAME must be the one the
# shim dlopen()s.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
shim=${1:?usage: loader_exports.sh SHIM CORE}
core=${2:?usage: loader_exports.sh SHIM CORE}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
giw_defined "$shim" | grep -Ev "$GIW_SIGNAL_RE" >"$tmp/shim" || true
nsig=$(giw_defined "$shim" | grep -cE "$GIW_SIGNAL_RE" || true)
if [[ $nsig -ne 6 ]]; then
  echo "FAIL: the shim defines $nsig of the 6 signal interposers (capi/loader/signals.c)"; fail=1
fi
giw_defined "$core" | grep -E "$GIW_API_RE" >"$tmp/core" || true
if ! diff -u "$tmp/core" "$tmp/shim" >"$tmp/diff"; then
  echo "FAIL: the shim's exports differ from the core's public names (- core, + shim):"
  sed -n '3,$p' "$tmp/diff" | grep '^[-+]' | head -40
  fail=1
fi
for lib in "$shim" "$core"; do
  data=$(nm -D --defined-only "$lib" | awk 'NF >= 3 && $2 !~ /^[TtWwi]$/' || true)
  if [[ -n $data ]]; then
    echo "FAIL: $(basename "$lib") exports non-function symbols:"; printf '  %s\n' "$data"; fail=1
  fi
done
soname=$(giw_soname "$core")
[[ $soname == libgoiwarp-core.so.1 ]] || { echo "FAIL: core SONAME '$soname', want libgoiwarp-core.so.1"; fail=1; }
[[ $fail -eq 0 ]] && echo "ok: the shim exports the core's $(wc -l <"$tmp/shim") public functions, no data"
exit $fail
