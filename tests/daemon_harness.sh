# Shared by the process-level tests of the daemons (sourced, not run):
# failure counting, the pids to kill on exit, and a bounded poll.
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
pids=()
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; }
trap cleanup EXIT

# Polls `cmd` (a function) every 0.1 s for up to $1 seconds.
wait_until() {
  local limit=$1; shift
  local end=$((SECONDS + limit))
  while [ $SECONDS -lt $end ]; do "$@" && return 0; sleep 0.1; done
  return 1
}
