#!/usr/bin/env bash
# shm.sh [shm.py options]: the same-host fast path (GOIWARP_SHM=1 against =0)
# beside iperf3 and UCX shared memory, in one run. Installs what it needs
# (build/deps.sh bench), builds into _build/ (or GOIWARP_BUILD_DIR), then runs
# bench/shm.py (min/median/max, the issue's target ratios, a JSON file).
#   bash bench/shm.sh                   # 3 interleaved rounds of everything
#   bash bench/shm.sh --runs 5 --only 'lat'
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
export PYTHONDONTWRITEBYTECODE=1
B=${GOIWARP_BUILD_DIR:-_build}
bash build/deps.sh bench
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$B" -j"$(nproc)" >/dev/null
exec python3 bench/shm.py --build "$B" "$@"
