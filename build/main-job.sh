#!/usr/bin/env bash
# main-job.sh: the README's first command. Installs what the build needs (if
# missing), builds libgoiwarp.so + examples into $GOIWARP_BUILD_DIR (default
# _build/), then runs the main job. This script is the single place that says
# what the main job is.
#
# Today: list our devices with the unmodified rdma-core tools under LD_PRELOAD.
# Later: a perftest-style bandwidth/latency run over loopback on giw_lo.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
B=${GOIWARP_BUILD_DIR:-_build}

bash build/deps.sh build
cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$B" -j"$(nproc)"

lib=$(pwd)/$B/libgoiwarp.so
echo "== LD_PRELOAD=$lib ibv_devices"
LD_PRELOAD=$lib ibv_devices
echo "== LD_PRELOAD=$lib ibv_devinfo"
LD_PRELOAD=$lib ibv_devinfo
