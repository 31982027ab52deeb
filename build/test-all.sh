#!/usr/bin/env bash
# test-all.sh: every test of the tree, in the order CI runs them (.ci/run runs
# this after installing packages). Needs the Debian packages of build/deps.sh.
#   go vet, gofmt check, go test -race, each fuzz target for a fixed number of
#   inputs (FUZZ_EXECS below, about 10 s each on a 2-core machine), cmake
#   configure + build, ctest, an install smoke test (shim + core, headers,
#   goiwarp.pc, examples; pkg-config; the installed giw_stat runs), and the C
#   suites again in sanitizer builds (<build dir>-asan, -tsan).
# Env: GOIWARP_BUILD_DIR (default _build); FUZZTIME, a multiplier of every
#   target's input count (default 1; 0 skips fuzzing; 0.2 a quick pass), or
#   seconds as before (30s: 3 times the counts, about 30 s per target);
#   SANITIZE (default 1; 0 skips the sanitizer builds).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
B=${GOIWARP_BUILD_DIR:-_build}
FUZZTIME=${FUZZTIME:-1}
SANITIZE=${SANITIZE:-1}
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
step() { echo; echo "=== $* ($(date +%T))"; }

step go vet
go vet ./...

step gofmt
unformatted=$(find . -name '*.go' -not -path './.git/*' -not -path './_build*/*' \
  -not -path './build-*/*' -print0 | xargs -0 -r gofmt -l)
if [[ -n $unformatted ]]; then
  echo "FAIL: gofmt: these files are not formatted (run gofmt -w):"
  printf '  %s\n' $unformatted
  exit 1
fi
echo "ok: gofmt"

step go test -race
go test -race -count=1 -timeout 20m ./... 2>&1 | tee "$logs/gotest"

step fuzz
# Bounded by inputs (-fuzztime=Nx), not by time: with a time bound Go 1.26's
# coordinator can fail with a bare "context deadline exceeded" when the time
# runs out while a worker is busy (golang/go#75804). Counts give each target
# about 10 s here; a new target needs its line.
declare -A FUZZ_EXECS=(
  [FuzzMPARequest]=60000 [FuzzFPDUStream]=30000 [FuzzMPAReply]=8000
  [FuzzParseHeader]=200000 [FuzzFPDU]=200000 [FuzzMPAFrame]=200000
  [FuzzTerminate]=200000 [FuzzStreamRoundTrip]=60000 [FuzzStreamParse]=200000 [FuzzRing]=60000
)
mult=${FUZZTIME%s}
if [[ $mult != "$FUZZTIME" ]]; then mult=$(awk -v s="$mult" 'BEGIN { print s / 10 }'); fi
[[ $mult =~ ^[0-9]+(\.[0-9]+)?$ ]] || { echo "FAIL: FUZZTIME=$FUZZTIME: want a multiplier (2, 0.5) or seconds (30s)"; exit 1; }
fuzzlog=()
if awk -v m="$mult" 'BEGIN { exit !(m > 0) }'; then
  while IFS= read -r f; do
    dir=./$(dirname "${f#./}")
    for fn in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$f"); do
      [[ -n ${FUZZ_EXECS[$fn]:-} ]] ||
        { echo "FAIL: fuzz: $fn has no input count in FUZZ_EXECS (build/test-all.sh)"; exit 1; }
      n=$(awk -v b="${FUZZ_EXECS[$fn]}" -v m="$mult" 'BEGIN { n = int(b * m + 0.5); print n < 1 ? 1 : n }')
      echo "--- go test -run=^\$ -fuzz=^$fn\$ -fuzztime=${n}x $dir"
      if ! go test -run='^$' -fuzz="^$fn\$" -fuzztime="${n}x" "$dir" >"$logs/fuzz" 2>&1; then
        cat "$logs/fuzz"; echo "FAIL: fuzz $dir $fn (a failing input is saved under $dir/testdata/fuzz/$fn/)"; exit 1
      fi
      grep 'elapsed:' "$logs/fuzz" | tail -1
      fuzzlog+=("ok fuzz $dir $fn (${n} inputs)")
    done
  done < <(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v -e '^./_build' -e '^./build-' | sort)
fi
echo "fuzz targets run: ${#fuzzlog[@]}"

step cmake configure + build
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$B" -j"$(nproc)"

step ctest
(cd "$B" && ctest --output-on-failure --timeout 600) 2>&1 | tee "$logs/ctest"

step install smoke test
prefix=$logs/prefix
cmake --install "$B" --prefix "$prefix" >/dev/null
libdir=$(sed -n 's/^CMAKE_INSTALL_LIBDIR:PATH=//p' "$B/CMakeCache.txt")
headers=$(if [[ -d include ]]; then cd include && find . -name '*.h' | sed 's|^\./|include/|'; fi)
for f in "$libdir/libgoiwarp.so.1" "$libdir/libgoiwarp.so" "$libdir/libgoiwarp-core.so.1" \
  "$libdir/pkgconfig/goiwarp.pc" $headers; do
  [[ -e $prefix/$f ]] || { echo "FAIL: install: $prefix/$f missing"; exit 1; }
done
PKG_CONFIG_PATH=$prefix/$libdir/pkgconfig pkg-config --cflags --libs goiwarp
[[ -L $prefix/$libdir/libgoiwarp.so ]] || { echo "FAIL: install: $libdir/libgoiwarp.so is not a symlink"; exit 1; }
# The installed program finds the installed shim (relative rpath) and the shim
# its core next to it: giw_stat lists giw_lo.
stat=$("$prefix/bin/giw_stat" 2>&1) || true
grep -q '^giw_lo ' <<<"$stat" ||
  { echo "FAIL: install: $prefix/bin/giw_stat does not list giw_lo:"; echo "$stat"; exit 1; }
echo "ok: install (shim, soname link, core, giw_stat runs, $(echo $headers | wc -w) headers, goiwarp.pc, $(ls "$prefix/bin" 2>/dev/null | wc -l) examples)"

step sanitizers
# The C of the shim, the tests, rsockets/ and the core's cgo (capi/*.c) under
# -DGOIWARP_SANITIZE (CMakeLists.txt); the Go code is not instrumented, go test
# -race above covers it (Go's race runtime is a second TSan, the two cannot
# share a process). ASan+UBSan (LeakSanitizer at exit included): the thread,
# verbs and rdmacm suites. TSan works beside the Go runtime because it sees
# only the instrumented C; what Go does between two C calls (its channels and
# mutexes) is invisible to it, so a TSan report may be a false positive to
# read, not to suppress. TSan runs the thread suite (the verbs suite takes
# minutes under it). The bench case measures nothing under a sanitizer.
sanlog=()
if [[ $SANITIZE != 0 ]]; then
  for san in address,undefined thread; do
    if [[ $san == thread ]]; then
      sb=$B-tsan targets=(threads) tests='^threads_'
    else
      sb=$B-asan targets=(threads verbs_basic verbs_data cm_test cm_more cm_appqp)
      tests='^(threads_|verbs_|rdmacm_)'
    fi
    echo "--- -DGOIWARP_SANITIZE=$san in $sb: ${targets[*]}"
    cmake -S . -B "$sb" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGOIWARP_SANITIZE=$san >/dev/null
    cmake --build "$sb" -j"$(nproc)" --target "${targets[@]}"
    (cd "$sb" && ctest --output-on-failure --timeout 120 -R "$tests" -E '^threads_bench$') 2>&1 |
      tee "$logs/ctest-$san"
    sanlog+=("$san: $(grep -E 'tests passed|tests failed' "$logs/ctest-$san")")
  done
fi

step summary
grep -E '^(ok|FAIL|---|\?)' "$logs/gotest" | grep -v '^---' || true
[[ ${#fuzzlog[@]} -eq 0 ]] || printf '%s\n' "${fuzzlog[@]}"
[[ ${#sanlog[@]} -eq 0 ]] || printf 'sanitizer ctest %s\n' "${sanlog[@]}"
grep -E 'tests passed|tests failed' "$logs/ctest"
