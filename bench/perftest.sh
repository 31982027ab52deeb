#!/bin/bash
# perftest through goiwarp (LD_PRELOAD) against plain TCP loopback (qperf), in
# one run: N runs of each, min/median/max, and the ratio of the medians.
#
#   bench/perftest.sh [-n RUNS] [-i ITERS] [-l LIB] [-t "TESTS"]
#
# LIB defaults to _build/libgoiwarp.so; TESTS to "write_bw write_lat send_lat
# read_lat". Ports come from 23000-23999 only (other people's programs run on
# this machine too); only the PIDs this script started are ever killed.
set -u
RUNS=5
ITERS=5000
LIB=
TESTS="write_bw write_lat send_lat read_lat"
while getopts "n:i:l:t:" o; do
	case $o in
	n) RUNS=$OPTARG ;;
	i) ITERS=$OPTARG ;;
	l) LIB=$OPTARG ;;
	t) TESTS=$OPTARG ;;
	*) sed -n 2,10p "$0"; exit 2 ;;
	esac
done
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/tests/common/listen.sh" # wait_listen
LIB=${LIB:-$here/_build/libgoiwarp.so}
LIB=$(cd "$(dirname "$LIB")" && pwd)/$(basename "$LIB")
[ -e "$LIB" ] || { echo "no $LIB (build first: cmake -S . -B _build && cmake --build _build -j)" >&2; exit 1; }
for p in ib_write_bw ib_write_lat ib_send_lat ib_read_lat qperf; do
	command -v $p >/dev/null || { echo "missing $p" >&2; exit 1; }
done

mine=()
trap 'for p in "${mine[@]}"; do kill "$p" 2>/dev/null; done' EXIT

nextport=$((23000 + RANDOM % 900))
# port: the next port into $P (not in a subshell: the counter must advance).
port() {
	nextport=$((nextport + 1))
	[ $nextport -gt 23990 ] && nextport=23000
	P=$nextport
}

# stats VALUES...: "min median max"
stats() {
	printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {
		if (NR == 0) { print "- - -"; exit }
		m = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2
		printf "%.2f %.2f %.2f\n", v[1], m, v[NR] }'
}

# perftest PROG ARGS...: runs server and client through goiwarp; prints the
# client's result line (the one after the "#bytes" header).
perftest() {
	port
	local p=$P
	LD_PRELOAD=$LIB timeout 120 "$@" -p "$p" >/dev/null 2>&1 &
	local s=$!
	mine+=("$s")
	wait_listen "$p" "$s"
	LD_PRELOAD=$LIB timeout 120 "$@" -p "$p" 127.0.0.1 2>/dev/null | awk '/#bytes/ {getline; print; exit}'
	wait "$s" 2>/dev/null
}

# qperf TEST ARGS...: plain TCP loopback; prints the value in us or MB/s.
qperf_run() {
	port
	local lp=$P
	port
	local ip=$P
	timeout 60 qperf -lp "$lp" >/dev/null 2>&1 &
	local s=$!
	mine+=("$s")
	wait_listen "$lp" "$s"
	timeout 60 qperf -lp "$lp" -ip "$ip" 127.0.0.1 "$@" 2>/dev/null | awk '
		$1 == "latency" || $1 == "bw" {
			v = $3; u = $4
			if (u == "ns") v /= 1000; else if (u == "ms") v *= 1000
			if (u == "GB/sec") v *= 1000; else if (u == "KB/sec") v /= 1000
			print v; exit }'
	kill "$s" 2>/dev/null
	wait "$s" 2>/dev/null
}

# line NAME "MIN MEDIAN MAX"
line() {
	local n=$1 a b c
	read -r a b c <<<"$2"
	printf '  %-34s min %9s  median %9s  max %9s\n' "$n" "$a" "$b" "$c"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }'; }

echo "goiwarp: $LIB"
echo "runs: $RUNS, perftest iterations: $ITERS; MB = 10^6 bytes"
for t in $TESTS; do
	ours=() avg=() ref=()
	case $t in
	write_bw)
		for ((r = 0; r < RUNS; r++)); do
			# BW average is in MiB/s (2^20)
			v=$(perftest ib_write_bw -R -s 65536 -n "$ITERS" | awk '{printf "%.1f", $4 * 1.048576}')
			[ -n "$v" ] && ours+=("$v")
			v=$(qperf_run -m 65536 tcp_bw)
			[ -n "$v" ] && ref+=("$v")
		done
		echo "ib_write_bw -R -s 65536 vs qperf tcp_bw -m 65536 (MB/s, higher is better)"
		read -r a b c <<<"$(stats "${ours[@]}")"
		line "goiwarp ib_write_bw" "$a $b $c"
		read -r d e f <<<"$(stats "${ref[@]}")"
		line "qperf tcp_bw" "$d $e $f"
		echo "  ratio of medians goiwarp/TCP: $(ratio "$b" "$e")x  (runs ok: ${#ours[@]}/${RUNS})"
		;;
	write_lat | send_lat | read_lat)
		for ((r = 0; r < RUNS; r++)); do
			l=$(perftest ib_$t -R -s 2 -n "$ITERS")
			if [ -n "$l" ]; then
				ours+=("$(awk '{print $5}' <<<"$l")")
				avg+=("$(awk '{print $6}' <<<"$l")")
			fi
			v=$(qperf_run -m 2 tcp_lat)
			[ -n "$v" ] && ref+=("$v")
		done
		echo "ib_$t -R -s 2 vs qperf tcp_lat -m 2 (one-way us, lower is better)"
		read -r a b c <<<"$(stats "${ours[@]}")"
		line "goiwarp ib_$t t_typical" "$a $b $c"
		read -r a2 b2 c2 <<<"$(stats "${avg[@]}")"
		line "goiwarp ib_$t t_avg" "$a2 $b2 $c2"
		read -r d e f <<<"$(stats "${ref[@]}")"
		line "qperf tcp_lat" "$d $e $f"
		echo "  ratio of medians goiwarp/TCP: t_typical $(ratio "$b" "$e")x, t_avg $(ratio "$b2" "$e")x  (runs ok: ${#ours[@]}/${RUNS})"
		;;
	*)
		echo "unknown test $t" >&2
		;;
	esac
done
