#!/usr/bin/env bash
# deb.sh CPACK BUILD_DIR SOURCE_DIR VERSION PORT: the Debian package, end to end.
#  1. cpack -G DEB builds goiwarp_VERSION_ARCH.deb of BUILD_DIR into a scratch
#     directory; its control fields and contents are checked (dpkg-deb): the
#     shim, its dev link and the core in the multiarch library directory,
#     goiwarp.pc, every header of include/ under include/goiwarp/ (none where
#     libibverbs-dev's and librdmacm-dev's are), the launcher, giw_devices and
#     every example in bin/, the docs;
#  2. it is unpacked (dpkg -x) into a scratch root, and the root's programs
#     run on the root's library (check_root below);
#  3. as root: dpkg -i, check_root on /, dpkg -r, in a private mount
#     namespace whose /usr, /etc and /var are overlays on a tmpfs, so that
#     the machine's files and dpkg database never change (this script again,
#     under unshare -m, with GIW_DEB_OVERLAY set). Skipped with a line where
#     that namespace cannot be made (not root, no overlayfs).
# Ports PORT and PORT+1.
set -euo pipefail
cpack=$1 build=$2 src=$3 version=$4 port=$5
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
libdir=usr/lib/$multiarch
scratch=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$scratch"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

# Waits up to 10 s until the program `timeout` process $1 runs has mapped file $2.
wait_mapped() {
  local kid
  for _ in $(seq 100); do
    for kid in $(cat "/proc/$1/task/$1/children" 2>/dev/null); do
      grep -qF -- " $2" "/proc/$kid/maps" 2>/dev/null && return 0
    done
    kill -0 "$1" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# Runs a server (background) and a client, each under a timeout; the server
# must map CORE. Passes when both exit 0 and the client prints EXPECT.
#   pair NAME CORE EXPECT SERVER... --client CLIENT...
pair() {
  local name=$1 core=$2 expect=$3 srv=() cli=()
  shift 3
  while [[ $1 != --client ]]; do srv+=("$1"); shift; done
  shift
  cli=("$@")
  timeout -k 5 60 "${srv[@]}" >"$scratch/srv" 2>&1 &
  local sp=$! crc=0 src=0
  pids+=("$sp")
  wait_mapped "$sp" "$core" || { cat "$scratch/srv"; fail "$name: the server did not load $core"; }
  timeout -k 5 60 "${cli[@]}" >"$scratch/cli" 2>&1 || crc=$?
  [[ $crc -eq 0 ]] || kill "$sp" 2>/dev/null || true
  wait "$sp" || src=$?
  if [[ $crc -ne 0 || $src -ne 0 ]] || ! grep -Eq -- "$expect" "$scratch/cli"; then
    echo "== client: ${cli[*]} (exit $crc)"; cat "$scratch/cli"
    echo "== server: ${srv[*]} (exit $src)"; cat "$scratch/srv"
    fail "$name"
  fi
  echo "ok: $name"
}

# The programs of ROOT (a dpkg -x root, or "" for /) run on ROOT's library.
check_root() {
  local root=$1 bin=$1/usr/bin out lib core
  lib=$(readlink -f "$root/$libdir/libgoiwarp.so.1")
  core=$(readlink -f "$root/$libdir/libgoiwarp-core.so.1")

  out=$("$bin/goiwarp" devices) || fail "goiwarp devices"
  echo "$out"
  grep -Eq '^[[:space:]]+giw_lo[[:space:]]+[0-9a-f]{16}[[:space:]]+lo[[:space:]]+127\.0\.0\.1' <<<"$out" || fail "goiwarp devices: no giw_lo on lo, 127.0.0.1"
  out=$("$bin/goiwarp" stat -d giw_lo) || fail "goiwarp stat"
  grep -q '^giw_lo ' <<<"$out" || { echo "$out"; fail "goiwarp stat -d giw_lo: no giw_lo counters"; }
  echo "ok: goiwarp devices, goiwarp stat"
  for c in "" run devices stat; do
    out=$("$bin/goiwarp" $c --help) && [[ $out == "usage: goiwarp $c"* ]] || fail "goiwarp $c --help"
  done
  out=$(LD_PRELOAD=libm.so.6 "$bin/goiwarp" run -- printenv LD_PRELOAD)
  [[ $out == "libm.so.6:$lib" ]] || fail "goiwarp run: LD_PRELOAD is '$out', want 'libm.so.6:$lib'"
  echo "ok: goiwarp run: LD_PRELOAD=$out"

  # an installed example finds the library of its root (rpath), not another
  out=$(ldd "$bin/giw_write_bw" | awk '$1 == "libgoiwarp.so.1" { print $3 }')
  [[ $(readlink -f "$out") == "$lib" ]] || fail "giw_write_bw links '$out', want $lib"
  pair "$bin/giw_write_bw pair over 127.0.0.1" "$core" '#bytes +#iterations +BW peak' \
    "$bin/giw_write_bw" -p "$port" --client "$bin/giw_write_bw" -p "$port" -n 200 127.0.0.1
  # an rdma-core program, preloaded by the launcher
  if command -v rping >/dev/null; then
    pair "goiwarp run -- rping over 127.0.0.1" "$core" 'rdma-ping-4:' \
      "$bin/goiwarp" run -- rping -s -a 127.0.0.1 -p $((port + 1)) -C 5 \
      --client "$bin/goiwarp" run -- rping -c -v -a 127.0.0.1 -p $((port + 1)) -C 5
  else
    echo "SKIP: goiwarp run -- rping (rdmacm-utils is not installed)"
  fi

  # a program built with the root's goiwarp.pc and headers
  local pc=(env PKG_CONFIG_LIBDIR="$root/$libdir/pkgconfig" PKG_CONFIG_SYSROOT_DIR="$root" pkg-config)
  local cflags libs
  cflags=$("${pc[@]}" --cflags goiwarp) && libs=$("${pc[@]}" --libs goiwarp) || fail "pkg-config goiwarp"
  cat >"$scratch/app.c" <<'C'
#include <stdio.h>
#include <infiniband/verbs.h>
#include <goiwarp.h>

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx = list && list[0] ? ibv_open_device(list[0]) : NULL;
	struct giw_provider_attr a;

	if (!ctx || giw_query_provider(ctx, &a))
		return 1;
	printf("%s api %u on %s\n", a.name, a.api_version, ibv_get_device_name(list[0]));
	ibv_close_device(ctx);
	ibv_free_device_list(list);
	return 0;
}
C
  # shellcheck disable=SC2086 # pkg-config's flags are lists
  out=$(gcc -M $cflags "$scratch/app.c") || fail "gcc -M $cflags app.c"
  grep -qF "$root/usr/include/goiwarp/infiniband/verbs.h" <<<"$out" ||
    fail "app.c does not include $root/usr/include/goiwarp/infiniband/verbs.h (cflags: $cflags)"
  # shellcheck disable=SC2086
  gcc -Wall -o "$scratch/app" "$scratch/app.c" $cflags $libs || fail "cc app.c $cflags $libs"
  out=$(LD_LIBRARY_PATH=$root/$libdir "$scratch/app") || fail "app: exit $?"
  [[ $out == "goiwarp api "* ]] || fail "app printed '$out'"
  echo "ok: app.c built with pkg-config ($cflags $libs): $out"
}

# 3, inside the namespace
if [[ -n ${GIW_DEB_OVERLAY:-} ]]; then
  mount -t tmpfs goiwarp-deb "$GIW_DEB_OVERLAY" || exit 77
  for d in usr etc var; do
    mkdir -p "$GIW_DEB_OVERLAY"/{upper,work}/$d
    mount -t overlay goiwarp-deb -o "lowerdir=/$d,upperdir=$GIW_DEB_OVERLAY/upper/$d,workdir=$GIW_DEB_OVERLAY/work/$d" "/$d" ||
      exit 77
  done
  dpkg -i "$GIW_DEB" || fail "dpkg -i"
  check_root ""
  dpkg -r goiwarp || fail "dpkg -r"
  [[ ! -e /$libdir/libgoiwarp.so.1 ]] || fail "dpkg -r left /$libdir/libgoiwarp.so.1"
  exit 0
fi

echo "== cpack -G DEB (build dir $build)"
"$cpack" -G DEB --config "$build/CPackConfig.cmake" -B "$scratch/out" >"$scratch/cpack.log" 2>&1 ||
  { cat "$scratch/cpack.log"; fail "cpack"; }
deb=$scratch/out/goiwarp_${version}_${arch}.deb
[[ -f $deb ]] || { ls -l "$scratch/out"; fail "no $(basename "$deb")"; }
echo "ok: $(basename "$deb"), $(stat -c %s "$deb") bytes"

for f in Package:goiwarp Version:"$version" Architecture:"$arch"; do
  got=$(dpkg-deb -f "$deb" "${f%%:*}")
  [[ $got == "${f#*:}" ]] || fail "control ${f%%:*} is '$got', want '${f#*:}'"
done
depends=$(dpkg-deb -f "$deb" Depends)
[[ $depends =~ (^|, )libc6( |,|$) ]] || fail "Depends '$depends' lacks libc6"
echo "ok: control: goiwarp $version $arch, Depends: $depends"

dpkg-deb -c "$deb" | awk '{ print substr($1, 1, 1), $6 }' | sed 's| \./| |' >"$scratch/contents"
want=("l $libdir/libgoiwarp.so" "- $libdir/libgoiwarp.so.1" "- $libdir/libgoiwarp-core.so.1"
  "- $libdir/pkgconfig/goiwarp.pc" "- usr/bin/goiwarp" "- usr/bin/giw_devices"
  "- usr/share/doc/goiwarp/README.md")
while IFS= read -r h; do want+=("- usr/include/goiwarp/$h"); done < <(cd "$src/include" && find . -name '*.h' | sed 's|^\./||')
for c in "$src"/examples/c/*.c; do want+=("- usr/bin/$(basename "$c" .c)"); done
for w in "${want[@]}"; do
  grep -qxF -- "$w" "$scratch/contents" || { cat "$scratch/contents"; fail "package lacks ${w#? } (type ${w%% *})"; }
done
! grep -E ' usr/include/(infiniband|rdma)/' "$scratch/contents" ||
  fail "headers where libibverbs-dev/librdmacm-dev have theirs"
! grep -v ' usr/' "$scratch/contents" || fail "files outside /usr"
echo "ok: contents: $(grep -c '^[-l]' "$scratch/contents") files, the ${#want[@]} expected among them"

echo "== dpkg -x into a scratch root"
dpkg -x "$deb" "$scratch/root"
check_root "$scratch/root"

echo "== dpkg -i, dpkg -r in a private mount namespace"
rc=0
if [[ $(id -u) -eq 0 ]] && unshare -m true 2>/dev/null; then
  mkdir "$scratch/overlay"
  GIW_DEB_OVERLAY=$scratch/overlay GIW_DEB=$deb unshare -m --propagation private "$0" "$@" || rc=$?
else
  rc=77
fi
case $rc in
0) echo "ok: dpkg -i, the installed programs run, dpkg -r" ;;
77) echo "SKIP: dpkg -i: needs root, a mount namespace (unshare -m) and overlayfs" ;;
*) fail "dpkg -i, dpkg -r" ;;
esac
echo PASS
