#!/usr/bin/env bash
# compare.sh [compare.py options]: goiwarp against kernel TCP and UCX in one run.
# Installs what it needs (build/deps.sh bench), builds into _build/ (or
# GOIWARP_BUILD_DIR), then runs bench/compare.py, which prints min/median/max
# per measurement and the ratios, and writes bench/results/compare-<date>.json.
#   bash bench/compare.sh               # 3 interleaved rounds of everything
#   bash bench/compare.sh --runs 5 --only 'write_bw|iperf3'
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
B=${GOIWARP_BUILD_DIR:-_build}
bash build/deps.sh bench
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$B" -j"$(nproc)" >/dev/null
go build -o "$B/bench/wakecost" ./bench/wakecost
exec python3 bench/compare.py --build "$B" "$@"
