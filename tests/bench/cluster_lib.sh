# Shell functions the durability benchmarks and the chaos run share: a
# local cluster (opt build) whose processes they can kill and restart.
# Source it after setting: bin (bazel-bin of the opt build), state (a
# directory), threads (BLAS threads per worker).

# Starts the coordinator on $1 (host:port; port 0 picks one) and sets
# $address and $coordinator_pid. Appends to coordinator.log.
start_coordinator() {
  local listen="$1"
  rm -f "$state/coordinator.port"
  "$bin/coordinator/coordinator" --listen "$listen" --state_dir "$state" \
    --port_file "$state/coordinator.port" --checkpoint_root "$state" \
    >>"$state/coordinator.log" 2>&1 &
  coordinator_pid=$!
  disown $!
  for _ in $(seq 100); do [ -s "$state/coordinator.port" ] && break; sleep 0.1; done
  [ -s "$state/coordinator.port" ] || { echo "the coordinator did not start" >&2; return 1; }
  address="127.0.0.1:$(cat "$state/coordinator.port")"
}

# Starts worker local-$1 (a new incarnation when it ran before).
start_worker() {
  "$bin/worker/worker" --coordinator "$address" --worker_id "local-$1" \
    --threads "$threads" --listen 127.0.0.1:0 --checkpoint_root "$state" \
    >>"$state/worker-$1.log" 2>&1 &
  echo $! >"$state/worker-$1.pid"
  disown $!  # Killed on purpose: no "Killed" notice from the shell.
}

# Waits (at most 60 s) until $1 workers are HEALTHY.
wait_healthy() {
  for _ in $(seq 600); do
    [ "$("$bin/client/aq" workers --coordinator "$address" --output json 2>/dev/null |
      grep -o '"state":"WORKER_HEALTHY"' | wc -l)" -ge "$1" ] && return 0
    sleep 0.1
  done
  echo "fewer than $1 healthy workers" >&2
  return 1
}

stop_cluster() {
  for f in "$state"/worker-*.pid; do
    [ -f "$f" ] && kill -TERM "$(cat "$f")" 2>/dev/null
  done
  kill -TERM "${coordinator_pid:-0}" 2>/dev/null
  sleep 1
  for f in "$state"/worker-*.pid; do
    [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
  done
  kill -KILL "${coordinator_pid:-0}" 2>/dev/null
  return 0
}

# The job's field $2 from `aq status $1 --output json` (numbers and
# strings), empty if absent.
job_field() {
  "$bin/client/aq" status "$1" --coordinator "$address" --output json 2>/dev/null |
    python3 -c "import json,sys; d=json.load(sys.stdin); print(d.get('$2', ''))"
}

# The job's step (0 while unknown).
job_step() {
  local s
  s=$(job_field "$1" step)
  echo "${s:-0}"
}

# Waits until job $1 reaches step $2 (or ends); at most $3 seconds.
wait_step() {
  local deadline=$((SECONDS + $3))
  while [ "$SECONDS" -lt "$deadline" ]; do
    [ "$(job_step "$1")" -ge "$2" ] && return 0
    case "$(job_field "$1" state)" in JOB_SUCCEEDED | JOB_FAILED | JOB_CANCELLED) return 1 ;; esac
    sleep 0.2
  done
  return 1
}

# The worker ids running job $1, one per line.
job_workers() {
  "$bin/client/aq" workers --coordinator "$address" | awk -v j="$1" '$0 ~ j { print $1 }'
}

# Seconds since the epoch of a coordinator log line's timestamp.
log_time() {
  date -d "$(echo "$1" | cut -c1-23)" +%s.%N
}
