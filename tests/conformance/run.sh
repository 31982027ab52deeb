#!/usr/bin/env bash
# run.sh BUILD_DIR [run.py options]: the conformance table (see run.py --help).
# Registered as the ctest `conformance`; runnable alone:
#   tests/conformance/run.sh _build
#   tests/conformance/run.sh _build --only 'rping|ib_write'   # a subset
#   GOIWARP_LOG=debug tests/conformance/run.sh _build --only qperf
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# No __pycache__ in the source tree.
export PYTHONDONTWRITEBYTECODE=1
exec python3 "$here/run.py" "$@"
