#!/usr/bin/env bash
# preload_bindings LIB [BINARY[:ARGS] ...]
#
# Runs installed rdma-core binaries under
#   LD_PRELOAD=LIB LD_BIND_NOW=1 LD_DEBUG=bindings
# (BIND_NOW resolves every reference at load time, so the run covers all of a
# binary's imports, not only those its code path happened to call) and checks
# in ld.so's log that
#   - every ibv_*/rdma_*/_ibv_* reference of the binary binds to LIB, and each
#     imported name shows up in the log (so the log was really read);
#   - every such reference of libibverbs.so.1 / librdmacm.so.1 themselves (they
#     call their own exported names through the PLT) binds to LIB whenever LIB
#     defines that name. Their references to names LIB lacks (internal or
#     not-yet-implemented verbs) stay in the real library; they are listed, not
#     failed: only code of the real library, which the checked binary never
#     enters, can reach them.
# Only binaries whose imported ibv_/rdma_ symbols are ALL defined by LIB are
# checked; the others are listed as skipped with the reason. The list grows by
# itself as LIB grows (GOIWARP_PRELOAD_BINARIES in tests/symbols/CMakeLists.txt).
# A binary that is not installed is skipped too, except when CI is set: then
# it fails (CI installs them all). Fails if no binary could be checked.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
lib=${1:?usage: preload_bindings.sh path/to/libgoiwarp.so [binary[:args] ...]}
shift
[[ -e $lib ]] || { echo "FAIL: $lib does not exist (build first)"; exit 1; }
lib=$(cd "$(dirname "$lib")" && pwd)/$(basename "$lib")
if [[ $# -eq 0 ]]; then set -- ibv_devices ibv_devinfo; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
giw_defined "$lib" >"$tmp/defined"

checked=() skipped=() fail=0
for spec in "$@"; do
  name=${spec%%:*}
  args=
  [[ $spec == *:* ]] && args=${spec#*:}
  bin=$(command -v "$name" || true)
  if [[ -z $bin ]]; then
    if [[ -n ${CI:-} ]]; then echo "FAIL: $name: not installed (CI is set)"; fail=1; continue; fi
    skipped+=("$name: not installed"); continue
  fi
  bin=$(readlink -f "$bin")
  giw_imports "$bin" >"$tmp/imports"
  comm -23 "$tmp/imports" "$tmp/defined" >"$tmp/missing"
  if [[ -s $tmp/missing ]]; then
    skipped+=("$name: $(wc -l <"$tmp/missing") of its $(wc -l <"$tmp/imports") ibv_/rdma_ imports not in libgoiwarp yet (e.g. $(head -3 "$tmp/missing" | paste -sd' '))")
    continue
  fi

  rm -f "$tmp"/ld.*
  # shellcheck disable=SC2086  # ARGS are split on purpose
  timeout -k 2 20 env LD_PRELOAD="$lib" LD_BIND_NOW=1 LD_DEBUG=bindings \
    LD_DEBUG_OUTPUT="$tmp/ld" "$bin" $args </dev/null >"$tmp/out" 2>&1 && rc=0 || rc=$?
  if ! ls "$tmp"/ld.* >/dev/null 2>&1; then
    echo "FAIL: $name: no LD_DEBUG output (exit $rc)"; sed 's/^/    /' "$tmp/out" | head -20; fail=1; continue
  fi
  # "<pid>: binding file FROM [n] to TO [m]: normal symbol `SYM' [VER]"
  sed -n "s/.*binding file \(.*\) \[[0-9]*\] to \(.*\) \[[0-9]*\]: normal symbol \`\([^']*\)'.*/\1|\2|\3/p" \
    "$tmp"/ld.* | sort -u >"$tmp/bindings"

  nbin=0 nlibs=0 notes=()
  while IFS='|' read -r from to sym; do
    [[ $sym =~ $GIW_IMPORT_RE ]] || continue
    case $from in
      "$bin") who=binary ;;
      */libibverbs.so*|*/librdmacm.so*) who=$(basename "$from") ;;
      *) continue ;;
    esac
    if [[ $to == "$lib" || $(basename "$to") == libgoiwarp.so* ]]; then
      if [[ $who == binary ]]; then nbin=$((nbin + 1)); else nlibs=$((nlibs + 1)); fi
      continue
    fi
    if [[ $who == binary ]] || grep -qx "$sym" "$tmp/defined"; then
      echo "FAIL: $name: $who's reference to $sym binds to $to, not libgoiwarp"
      fail=1
    else
      notes+=("$sym")
    fi
  done <"$tmp/bindings"
  # every imported name must have been bound (to us) in the log
  awk -F'|' -v b="$bin" '$1 == b { print $3 }' "$tmp/bindings" | sort -u >"$tmp/seen"
  unseen=$(comm -23 "$tmp/imports" "$tmp/seen")
  if [[ -n $unseen ]]; then
    echo "FAIL: $name: imports never bound in the LD_DEBUG log: $(echo $unseen)"; fail=1
  fi
  checked+=("$name: $nbin bindings of the binary + $nlibs of libibverbs/librdmacm -> libgoiwarp.so (exit $rc)")
  if [[ ${#notes[@]} -gt 0 ]]; then
    checked+=("    (libibverbs/librdmacm's own references to ${#notes[@]} names libgoiwarp does not define stay there: $(printf '%s\n' "${notes[@]}" | sort -u | paste -sd' '))")
  fi
  echo "--- $name $args (first lines of its output under LD_PRELOAD):"
  head -8 "$tmp/out" | sed 's/^/    /'
done

echo "checked:"
[[ ${#checked[@]} -gt 0 ]] && printf '  %s\n' "${checked[@]}" || echo "  (none)"
echo "skipped:"
[[ ${#skipped[@]} -gt 0 ]] && printf '  %s\n' "${skipped[@]}" || echo "  (none)"
if [[ ${#checked[@]} -eq 0 ]]; then
  echo "FAIL: no binary could be checked (libgoiwarp lacks even the device-list symbols?)"
  exit 1
fi
[[ $fail -eq 0 ]] && echo "ok: every ibv_/rdma_ binding checked lands in libgoiwarp.so"
exit $fail
