#!/usr/bin/env bash
# symbols.sh [--strict] [path/to/libgoiwarp.so]
#
# Symbol-completeness report: the set of ibv_*/rdma_*/_ibv_* names imported
# (nm -D --undefined-only) by the installed rdmacm-utils, ibverbs-utils,
# perftest and qperf binaries, and which of them libgoiwarp.so does not define
# yet, with the binaries that need each one. rsockets' r* calls are ignored.
#
# Reports only (exit 0) unless --strict or GOIWARP_SYMBOLS_STRICT=1: then it
# exits 1 when anything is missing. Registered as the ctest symbol_completeness.
# A package that is not installed narrows the report, except when CI is set:
# then it fails (CI installs them all).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../tests/symbols/common.sh"

strict=${GOIWARP_SYMBOLS_STRICT:-0}
lib=
for a in "$@"; do
  case $a in
    --strict) strict=1 ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) lib=$a ;;
  esac
done
lib=${lib:-$here/../_build/libgoiwarp.so}
[[ -e $lib ]] || { echo "FAIL: $lib does not exist (build first)"; exit 1; }

pkgs="rdmacm-utils ibverbs-utils perftest qperf"
bins=()
for p in $pkgs; do
  if ! files=$(dpkg -L "$p" 2>/dev/null); then
    [[ -z ${CI:-} ]] || { echo "FAIL: package $p is not installed (CI is set)"; exit 1; }
    echo "note: package $p is not installed"; continue
  fi
  while read -r f; do
    [[ -f $f && -x $f ]] && file -b "$f" 2>/dev/null | grep -q ELF && bins+=("$f")
  done < <(printf '%s\n' "$files" | grep -E '/s?bin/')
done
[[ ${#bins[@]} -gt 0 ]] || { echo "FAIL: none of $pkgs is installed"; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
giw_defined "$lib" >"$tmp/defined"
: >"$tmp/need"   # "sym binary"
complete=()
for b in "${bins[@]}"; do
  giw_imports "$b" >"$tmp/imp"
  sed "s|\$| $(basename "$b")|" "$tmp/imp" >>"$tmp/need"
  if [[ -z $(comm -23 "$tmp/imp" "$tmp/defined") ]]; then complete+=("$(basename "$b")"); fi
done
cut -d' ' -f1 "$tmp/need" | sort -u >"$tmp/wanted"
comm -23 "$tmp/wanted" "$tmp/defined" >"$tmp/missing"

nw=$(wc -l <"$tmp/wanted") nm=$(wc -l <"$tmp/missing")
echo "binaries scanned: ${#bins[@]} (from $pkgs)"
echo "ibv_/rdma_ symbols they import: $nw; defined by $(basename "$lib"): $((nw - nm)); missing: $nm"
echo "binaries whose imports are all defined: ${#complete[@]}${complete:+ (${complete[*]})}"
if [[ $nm -gt 0 ]]; then
  echo "missing symbols (number of binaries importing it: some of them):"
  while read -r s; do
    users=$(awk -v s="$s" '$1 == s { print $2 }' "$tmp/need" | sort -u)
    printf '  %-36s %3d: %s\n' "$s" "$(printf '%s\n' "$users" | wc -l)" "$(printf '%s\n' "$users" | head -4 | paste -sd' ')"
  done <"$tmp/missing"
fi
if [[ $nm -gt 0 && $strict == 1 ]]; then
  echo "FAIL (strict): $nm imported symbols are missing from libgoiwarp.so"
  exit 1
fi
if [[ $strict == 1 ]]; then echo "ok: nothing missing (strict)"; else echo "ok: report only (strict: --strict or GOIWARP_SYMBOLS_STRICT=1)"; fi
