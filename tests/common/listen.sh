# Sourced by the test scripts: a server is ready when it listens, not after a
# guessed time.
# listening PORT: a TCP socket listens on PORT (/proc/net/tcp and tcp6: local
# port in hex, state 0A).
listening() {
  awk -v p="$(printf ':%04X' "$1")" 'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { f = 1 }
    END { exit !f }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
# wait_listen PORT PID [SECONDS]: waits until something listens on PORT while
# PID runs, at most SECONDS (10). Returns 0 once it listens, 1 if not.
wait_listen() {
  local end=$((SECONDS + ${3:-10}))
  while ((SECONDS < end)) && kill -0 "$2" 2>/dev/null; do
    listening "$1" && return 0
    sleep 0.02 # the poll interval
  done
  return 1
}
