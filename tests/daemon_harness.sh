# Shared by the process-level tests of the daemons (sourced, not run):
# failure counting, the pids to kill on exit, and a bounded poll.
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
pids=()
# On exit: kills the daemons, then fails the test if any file in $tmp (the
# daemons' logs, the clients' output) holds a sanitizer report. Under
# --config=asan/tsan a daemon stops at its first report, but one killed by
# the test, or whose death no check happened to notice, would go unseen.
sanitizer_pattern='ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|runtime error: '
cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  [ -n "${tmp:-}" ] || return
  local f
  # A failed or timed-out run keeps the daemons' logs among the test's
  # outputs (bazel-testlogs/<test>/test.outputs/outputs.zip).
  if [ "$rc" -ne 0 ] || [ "$fails" -ne 0 ]; then
    if [ -n "${TEST_UNDECLARED_OUTPUTS_DIR:-}" ]; then
      for f in "$tmp"/*.log "$tmp"/*.err; do
        [ -f "$f" ] && cp "$f" "$TEST_UNDECLARED_OUTPUTS_DIR/" 2>/dev/null
      done
    fi
  fi
  for f in "$tmp"/*; do
    [ -f "$f" ] && grep -qE "$sanitizer_pattern" "$f" || continue
    echo "FAIL: sanitizer report in $f:" >&2
    grep -m1 -A40 -E "$sanitizer_pattern" "$f" >&2
    exit 1
  done
}
trap cleanup EXIT
# bazel's timeout sends SIGTERM: exit through cleanup (logs kept).
trap 'echo "FAIL: terminated (a timeout?)" >&2; exit 143' TERM

# Polls `cmd` (a function) every 0.1 s for up to $1 seconds.
wait_until() {
  local limit=$1; shift
  local end=$((SECONDS + limit))
  while [ $SECONDS -lt $end ]; do "$@" && return 0; sleep 0.1; done
  return 1
}

# Drops $1 (reaped) from the pids killed on exit: by then the number may
# belong to another process.
forget() {
  local keep=() p
  for p in "${pids[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
  pids=("${keep[@]}")
}

# Prints the Python expression $1 of the JSON document on stdin (as `d`).
json() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"; }

# The number of HEALTHY workers (needs an `aq` function bound to the
# coordinator).
healthy_count() { aq workers --output json | grep -o '"state":"WORKER_HEALTHY"' | wc -l; }
