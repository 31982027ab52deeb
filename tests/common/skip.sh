#!/usr/bin/env bash
# skip_or_fail MESSAGE: a test that cannot run here (a tool it needs is not
# installed, tshark cannot capture) skips locally (exit 77, the ctests'
# SKIP_RETURN_CODE) but fails when CI is set (CI=true in CI), where a skip
# would hide that the test never ran. Sourced by the test scripts; run as a
# command (a ctest registered for a tool missing at configure time) it
# calls skip_or_fail with its arguments.
skip_or_fail() {
  if [[ -n ${CI:-} ]]; then
    echo "FAIL: $* (CI=$CI: a test that cannot run fails in CI; build/deps.sh installs the tools)"
    exit 1
  fi
  echo "SKIP: $*"
  exit 77
}
if [[ ${BASH_SOURCE[0]} == "$0" ]]; then skip_or_fail "$@"; fi
