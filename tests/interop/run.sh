#!/usr/bin/env bash
# run.sh LIB [CONFIG...]
#
# goiwarp against the real Linux soft-iWARP driver (siw, Debian's 6.1
# kernel) in the qemu guest of ../shared/interop (README there), in both
# directions: each row runs once with siw as the server and goiwarp
# (LD_PRELOAD=LIB on the host) as the client, through a forwarded port
# (host 127.0.0.1:HPORT -> guest 10.0.2.15:GPORT), and once with goiwarp as
# the server and siw as the client (the guest reaches the host as 10.0.2.2).
# One guest boot per configuration runs all its rows as a job queue
# (guest-loop.sh), with tcpdump in the guest; mpa_check.py then checks the
# MPA bits of every handshake in the capture. Every attempt of a row has a
# server port of its own, so the check knows each connection's attempt: one
# of an attempt that failed may lack its request or reply (its row's verdict
# judges that attempt), the bits of what it sent are checked all the same.
# Configurations (all by default):
#   rev2   MPA revision 2, both sides' defaults
#   rev1   MPA revision 1 (siw mpa_version=1, GOIWARP_MPA_REV=1)
#   crcp2p siw mpa_crc_required=1 peer_to_peer=1, GOIWARP_MPA_CRC=1 (CRC on
#          every connection); goiwarp is in P2P mode as responder because
#          siw offers it, and does not offer it as initiator (GOIWARP_P2P
#          stays 0: siw 6.1 with P2P on both sides once crashed the guest
#          kernel, iwcm.c:969)
# A row that fails is run again once. A row that fails twice with one of
# the peer's own known behaviours (../shared/interop/README.md), shown by
# the evidence in its logs, is a QUIRK; any other failure, a check of the
# capture that fails or a guest that cannot be booted FAILs the test.
# Without qemu or the guest build: a skip (exit 77), unless CI is set.
# Env: SIW_GUEST_DIR (default <LIB's dir>/siw-guest, built when missing),
#   GIW_INTEROP_DIR (default ../shared/interop from the source tree),
#   INTEROP_OUT (logs; default <LIB's dir>/interop-logs), INTEROP_ROWS (a
#   regex of row names to run), INTEROP_GOENV (more settings of the goiwarp
#   side; default GOIWARP_LOG=debug, the CM trace is the evidence of a
#   failure). Host ports 12000-12099.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
lib=$(realpath "${1:?usage: run.sh path/to/libgoiwarp.so [rev2|rev1|crcp2p ...]}")
shift
configs=("$@")
[[ ${#configs[@]} -gt 0 ]] || configs=(rev2 rev1 crcp2p)
bdir=$(dirname "$lib")
interop=${GIW_INTEROP_DIR:-$here/../../../shared/interop}
export SIW_GUEST_DIR=${SIW_GUEST_DIR:-$bdir/siw-guest}
out=${INTEROP_OUT:-$bdir/interop-logs}
rowfilter=${INTEROP_ROWS:-.}
start=$SECONDS

unavailable() {
  if [[ -n ${CI:-} ]]; then echo "FAIL: $*"; exit 1; fi
  echo "SKIP: $* (set CI=1 to make this a failure)"; exit 77
}
[[ -x $interop/run-guest.sh ]] || unavailable "no $interop/run-guest.sh (GIW_INTEROP_DIR)"
if [[ ! -f $SIW_GUEST_DIR/vmlinuz || ! -f $SIW_GUEST_DIR/initramfs.cpio.gz ]]; then
  echo "building the siw guest in $SIW_GUEST_DIR (build-guest.sh, about 2 minutes)"
  mkdir -p "$SIW_GUEST_DIR"
  bash "$interop/build-guest.sh" >"$SIW_GUEST_DIR/build.log" 2>&1 ||
    { tail -20 "$SIW_GUEST_DIR/build.log"; unavailable "the siw guest cannot be built (log: $SIW_GUEST_DIR/build.log)"; }
fi
command -v qemu-system-x86_64 >/dev/null || unavailable "qemu-system-x86_64 not installed (build/deps.sh all)"
for t in python3 ss rping ib_write_bw ucmatose rstream; do
  command -v $t >/dev/null || unavailable "$t not installed (build/deps.sh all)"
done

HPORT=12074 GPORT=7174   # siw server rows: 12074.. -> 7174.., a pair per attempt of a boot
GIWPORT=12010            # goiwarp server rows: 12010.. (a new port per run)
ROW_T=40                 # bound on one side of one row (s)
BOOT_T=600               # bound on one boot (s)

# Rows: name | siw/goiwarp server command | client command (ADDR PORT replaced).
# perftest: -R (rdma_cm); small counts, the guest is emulated (TCG).
rows=(
  "rping|rping -s -a 0.0.0.0 -p PORT -v -C 10|rping -c -a ADDR -p PORT -v -C 10"
  "ib_write_bw|ib_write_bw -R -n 500 -p PORT|ib_write_bw -R -n 500 -p PORT ADDR"
  "ib_read_bw|ib_read_bw -R -n 500 -p PORT|ib_read_bw -R -n 500 -p PORT ADDR"
  "ib_send_bw|ib_send_bw -R -n 500 -p PORT|ib_send_bw -R -n 500 -p PORT ADDR"
  "ib_send_lat|ib_send_lat -R -n 300 -p PORT|ib_send_lat -R -n 300 -p PORT ADDR"
  "ib_write_lat|ib_write_lat -R -n 300 -p PORT|ib_write_lat -R -n 300 -p PORT ADDR"
  "ucmatose|ucmatose -p PORT -C 20|ucmatose -s ADDR -p PORT -C 20"
  "rstream|rstream -T b -T v -S 100000 -C 20 -p PORT|rstream -T b -T v -S 100000 -C 20 -s ADDR -p PORT"
)
nsiw=$((2 * ${#rows[@]})) # forwarded pairs: two attempts of every siw-server row

mkdir -p "$out"
results=()
fails=0
gpid=

# ---- the guest
boot() { # cfg siw_opts -> starts the guest; its share dir is $share
  local cfg=$1 opts=$2
  boots=$((boots + 1))
  share=$cdir/share.$boots
  rm -rf "$share"; mkdir -p "$share/jobs"
  job=0 siwnext=0
  local fwd="" i
  for ((i = 0; i < nsiw; i++)); do fwd+="$((HPORT + i)):$((GPORT + i)) "; done
  bash "$interop/run-guest.sh" -t $BOOT_T -p "$fwd" -s "$share" -l "$cdir/guest.$boots.log" \
    -e SIW_OPTS="$opts" -e CAPTURE=1 -e DMESG=1 -e TRAILER_DEBUG=$crc -e GUEST_TIMEOUT=$((BOOT_T - 15)) -c "$here/guest-loop.sh" \
    >/dev/null 2>"$cdir/run-guest.$boots.err" &
  gpid=$!
  for ((i = 0; i < 240; i++)); do
    [[ -f $share/ready ]] && return 0
    kill -0 "$gpid" 2>/dev/null || break
    sleep 0.5
  done
  echo "  guest boot $boots of $cfg failed:"; tail -20 "$cdir/guest.$boots.log" | sed 's/^/    /'
  halt
  return 1
}
halt() { # ends the guest (quit flag, then its hard timeout's kill)
  [[ -n $gpid ]] || return 0
  touch "$share/quit"
  local i
  for ((i = 0; i < 60; i++)); do kill -0 "$gpid" 2>/dev/null || break; sleep 0.5; done
  if kill -0 "$gpid" 2>/dev/null; then
    pkill -TERM -P "$gpid" 2>/dev/null # run-guest.sh's timeout/qemu children
    sleep 1
  fi
  wait "$gpid" 2>/dev/null
  gpid=
}
guest_job() { # script -> job number in $jn; the guest runs it next
  job=$((job + 1)); jn=$job
  printf '%s\n' "$1" >"$share/jobs/$jn.tmp"
  mv "$share/jobs/$jn.tmp" "$share/jobs/$jn.sh"
}
guest_wait() { # jn seconds -> 0 when the job's rc is there
  local i
  for ((i = 0; i < $2 * 5; i++)); do
    [[ -f $share/jobs/$1.rc ]] && return 0
    kill -0 "$gpid" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}

# ---- one attempt of one row in one direction; logs in $a.{host,guest}; the
# server's port (as the guest sees it) in $aport
attempt() { # dir(siw-server|giw-server) server-cmd client-cmd logprefix
  local dir=$1 srv=$2 cli=$3 a=$4 hrc grc
  if [[ $dir == siw-server ]]; then
    aport=$((GPORT + siwnext))
    srv=${srv//PORT/$aport}
    cli=${cli//PORT/$((HPORT + siwnext))}; cli=${cli//ADDR/127.0.0.1}
    siwnext=$((siwnext + 1))
    local hexp
    hexp=$(printf '%04X' $aport)
    # The marker once siw listens (its kernel socket is in /proc/net/tcp):
    # before, qemu's forwarder accepts and closes.
    guest_job "timeout $ROW_T $srv & p=\$!
i=0; while [ \$i -lt 50 ] && ! awk '\$4 == \"0A\" && \$2 ~ /:$hexp\$/ { f = 1 } END { exit !f }' /proc/net/tcp; do sleep 0.1; i=\$((i + 1)); done
touch \$JOB.listening
wait \$p"
    local i
    for ((i = 0; i < 150; i++)); do
      [[ -f $share/jobs/$jn.listening || -f $share/jobs/$jn.rc ]] && break
      sleep 0.2
    done
    # shellcheck disable=SC2086 # a command line
    env LD_PRELOAD=$lib $goenv ${INTEROP_GOENV:-GOIWARP_LOG=debug} timeout $ROW_T $cli >"$a.host" 2>&1
    hrc=$?
  else
    local port=$GIWPORT
    aport=$port
    GIWPORT=$((GIWPORT + 1)); ((GIWPORT > 12069)) && GIWPORT=12010
    srv=${srv//PORT/$port}
    cli=${cli//PORT/$port}; cli=${cli//ADDR/10.0.2.2}
    # shellcheck disable=SC2086
    env LD_PRELOAD=$lib $goenv ${INTEROP_GOENV:-GOIWARP_LOG=debug} timeout $ROW_T $srv >"$a.host" 2>&1 &
    local sp=$! i
    for ((i = 0; i < 100; i++)); do
      ss -Hltn "sport = :$port" | grep -q . && break
      sleep 0.1
    done
    guest_job "timeout $ROW_T $cli"
    guest_wait "$jn" $((ROW_T + 20))
    wait "$sp"
    hrc=$?
  fi
  if ! guest_wait "$jn" $((ROW_T + 20)); then
    echo "guest job $jn did not end: guest wedged" >"$a.guest"
    grc=wedged
  else
    cp "$share/jobs/$jn.out" "$a.guest"
    cp "$share/jobs/$jn.kmsg" "$a.kmsg" 2>/dev/null
    grc=$(cat "$share/jobs/$jn.rc")
  fi
  echo "$hrc $grc" >"$a.rc"
  [[ $hrc == 0 && $grc == 0 ]] && figures "$a.host" && figures "$a.guest"
}

# figures FILE: what the tool prints is there and not zero.
figures() {
  case $name in
    rping) grep -q 'ping data' "$1" || [[ $1 == *.guest && $dir == siw-server ]] ;;
    ib_*_bw)
      # The client prints the table (the server of -R too); BW average > 0.
      awk '/^ *#bytes/ { t = 1; next } t && NF >= 5 && $1 ~ /^[0-9]+$/ { n++; if ($4 + 0 <= 0) bad = 1 }
        END { exit !(n > 0 && !bad) }' "$1" || [[ $(grep -c '#bytes' "$1") == 0 && $1 == *.$srvside ]] ;;
    ib_*_lat)
      awk '/^ *#bytes/ { t = 1; next } t && NF >= 5 && $1 ~ /^[0-9]+$/ { n++; if ($5 + 0 <= 0) bad = 1 }
        END { exit !(n > 0 && !bad) }' "$1" || [[ $(grep -c '#bytes' "$1") == 0 && $1 == *.$srvside ]] ;;
    ucmatose) grep -q 'test complete' "$1" ;;
    rstream) grep -q '^custom' "$1" ;;
  esac
}

# quirk: prints the README's known siw behaviour the logs of a failed
# attempt show, if any.
quirk() { # logprefix
  local a=$1 h=$1.host g=$1.guest
  # rping's server starts with an RDMA Read: siw refuses to post it.
  if [[ $cfg == rev1 && $name =~ ^(ib_read_|rping) ]] &&
    grep -qiE 'post send error|completion with error|wc status|remote invalid|Failed status' "$g"; then
    echo "siw with MPA revision 1 gives IRD=ORD=0: RDMA Read fails"; return
  fi
  if [[ $name == ib_*_* ]] && grep -qE 'Bus error|Segmentation fault|rc=13[59]' "$g" ||
    [[ $name == ib_*_* && $(cut -d' ' -f2 "$a.rc") =~ ^13[59]$ ]]; then
    echo "perftest 4.5 -R in the guest: crash in its own retry path"; return
  fi
  # perftest times with the TSC, calibrated against the clock: on the
  # emulated CPU the calibration may fail, and perftest exits.
  if [[ $name == ib_*_* ]] && grep -q 'Correlation coefficient r^2: .* < 0.9' "$g" &&
    grep -q "Can't produce a report" "$g"; then
    echo "perftest in the guest: its CPU frequency calibration failed (TCG)"; return
  fi
  # siw 6.1's split-trailer reassembly (guest-loop.sh): its CRC error comes
  # right after a trailer read that found fewer bytes than it expected.
  if [[ -f $a.kmsg ]] && sed -nE 's/.*siw_get_trailer: expected ([0-9]+), available ([0-9]+).*/T \1 \2/p; s/.*crc error.*/C/p' "$a.kmsg" |
    awk '$1 == "T" { s2 = s1; s1 = ($3 < $2) } $1 == "C" && s2 { f = 1 } END { exit !f }'; then
    echo "siw 6.1 mis-reassembles an MPA trailer split over two skbs (crc error after a short trailer read)"; return
  fi
  if [[ $dir == siw-server ]]; then
    # The capture: siw replied, our first FPDUs followed and siw never
    # answered (mpa_check.py --stalls), on a connection of this attempt.
    # The guest's tcpdump lags: the packet that ends the silence (the FIN
    # of the server's timeout) may reach the capture seconds after the
    # attempt, so look again for a while before concluding.
    local ports stalled p i
    ports=$(sed -n 's/.*: RTS 127\.0\.0\.1:\([0-9]*\) -> .*/\1/p' "$h")
    for ((i = 0; i < 10; i++)); do
      stalled=$(for p in "$cdir"/share.*/guest.pcap; do python3 "$here/mpa_check.py" "$p" --stalls; done)
      for p in $ports; do
        if grep -qx "STALL $p" <<<"$stalled"; then
          echo "siw 6.1 siw_accept() window: our first FPDU sat unread (capture, port $p)"; return
        fi
      done
      [[ -n $ports ]] || break
      sleep 1
    done
  fi
  if grep -qE 'LOC_QP_OP_ERR|local QP operation error|status 2\b|status: 2\b' "$g"; then
    echo "siw 6.1 fails a Send already on the wire when the peer closes"; return
  fi
}

run_row() { # name dir srv cli
  name=$1 dir=$2
  srvside=$([[ $dir == siw-server ]] && echo guest || echo host)
  local a=$cdir/$name.$dir n verdict why
  for n in 1 2; do
    if attempt "$dir" "$3" "$4" "$a.$n"; then
      verdict=PASS; break
    fi
    verdict=FAIL
    echo "$aport" >>"$share/failed-ports" # this boot's capture check reads it
    if [[ $(cut -d' ' -f2 "$a.$n.rc") == wedged ]]; then
      echo "  $name $dir: guest wedged; rebooting it"
      halt; boot "$cfg" "$siw_opts" || break
    fi
  done
  if [[ $verdict == FAIL ]]; then
    why=$(quirk "$a.2")
    [[ -n $why ]] && [[ -n $(quirk "$a.1") ]] && verdict=QUIRK
  fi
  results+=("$(printf '%-7s %-13s %-11s %-5s %s' "$cfg" "$name" "$dir" "$verdict" "${n}x${why:+ ($why)}")")
  echo "  ${results[-1]}"
  if [[ $verdict == FAIL ]]; then
    fails=$((fails + 1))
    for f in "$a".*.host "$a".*.guest "$a".*.rc; do
      [[ -f $f ]] && { echo "    --- $f"; tail -15 "$f" | sed 's/^/    /'; }
    done
  fi
}

trap 'halt' EXIT
for cfg in "${configs[@]}"; do
  case $cfg in
    rev2) siw_opts="" goenv="" rev=2 crc=0 p2p=0 ;;
    rev1) siw_opts="mpa_version=1" goenv="GOIWARP_MPA_REV=1" rev=1 crc=0 p2p=0 ;;
    crcp2p) siw_opts="mpa_crc_required=1 peer_to_peer=1" goenv="GOIWARP_MPA_CRC=1" rev=2 crc=1 p2p=1 ;;
    *) echo "unknown configuration $cfg"; exit 2 ;;
  esac

  cdir=$out/$cfg
  rm -rf "$cdir"; mkdir -p "$cdir"
  boots=0
  echo "== $cfg: siw ${siw_opts:-defaults}, goiwarp ${goenv:-defaults} ($((SECONDS - start)) s)"
  if ! boot "$cfg" "$siw_opts"; then
    results+=("$(printf '%-7s %-13s %-11s %-5s' "$cfg" boot - FAIL)"); fails=$((fails + 1)); continue
  fi
  for r in "${rows[@]}"; do
    IFS='|' read -r rname rsrv rcli <<<"$r"
    [[ $rname =~ $rowfilter ]] || continue
    run_row "$rname" siw-server "$rsrv" "$rcli"
    [[ -n $gpid ]] || break
    run_row "$rname" giw-server "$rsrv" "$rcli"
    [[ -n $gpid ]] || break
  done
  halt
  # The MPA bits of every handshake of every boot of this configuration.
  ok=1
  for p in "$cdir"/share.*/guest.pcap; do
    [[ -f $p ]] || continue
    python3 "$here/mpa_check.py" "$p" --rev $rev --crc $crc --p2p $p2p \
      --failed-ports "$(paste -sd, "${p%/*}/failed-ports" 2>/dev/null)" >"$p.check" 2>&1 || ok=0
  done
  ls "$cdir"/share.*/guest.pcap >/dev/null 2>&1 || ok=0
  summary=$(cat "$cdir"/share.*/guest.pcap.check 2>/dev/null | grep '^mpa_check' | tr '\n' ' ')
  if [[ $ok == 1 ]]; then
    results+=("$(printf '%-7s %-13s %-11s %-5s %s' "$cfg" mpa-capture - PASS "$summary")")
  else
    results+=("$(printf '%-7s %-13s %-11s %-5s %s' "$cfg" mpa-capture - FAIL "$summary")")
    fails=$((fails + 1))
    cat "$cdir"/share.*/guest.pcap.check 2>/dev/null | grep -E 'BAD|mpa_check' | head -20 | sed 's/^/    /'
  fi
  echo "  ${results[-1]}"
done
trap - EXIT

echo
echo "== interop_siw summary ($((SECONDS - start)) s; logs in $out)"
printf '%s\n' "${results[@]}"
echo "PASS $(printf '%s\n' "${results[@]}" | grep -c ' PASS ') QUIRK $(printf '%s\n' "${results[@]}" | grep -c ' QUIRK ') FAIL $fails"
[[ $fails == 0 ]]
