#!/usr/bin/env bash
# The coordinator's leases against its own clock's faults (issue 22, items
# 3 and 4), with a real coordinator and two real workers:
#  - its wall clock set 1 h ahead (libfaketime, monotonic time not faked):
#    a healthy worker stays HEALTHY;
#  - set 30 min back: a frozen worker (SIGSTOP) is still DEAD on time;
#  - the coordinator itself stopped (SIGSTOP) for longer than dead_after:
#    on resuming it blames no worker, and the job keeps all its workers.
# Before the fix, +1 h declared both workers DEAD at once, -30 min left the
# frozen one HEALTHY, and the stall declared the workers DEAD.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

faketime=/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1
[ -f "$faketime" ] || { echo "FAIL: $faketime missing (deploy/setup.sh installs faketime)"; exit 1; }
echo "+0" >"$tmp/offset"
# The coordinator alone sees the faked wall clock; FAKETIME_NO_CACHE makes
# it read $tmp/offset at every call, so the clock steps when the file does.
LD_PRELOAD="$faketime" FAKETIME_TIMESTAMP_FILE="$tmp/offset" FAKETIME_NO_CACHE=1 \
  FAKETIME_DONT_FAKE_MONOTONIC=1 \
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:verify_asan_link_order=0" \
  "$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" \
  --state_dir "$tmp/state" --heartbeat_interval_ms 200 --dead_after_ms 3000 \
  >"$tmp/coordinator.log" 2>&1 &
coordinator=$!
pids+=("$coordinator")
wait_until 15 test -s "$tmp/port" || { echo "FAIL: coordinator did not start"; cat "$tmp/coordinator.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }
for n in 1 2; do
  "$WORKER" --coordinator "$addr" --worker_id "w$n" --listen 127.0.0.1:0 \
    --threads 1 --measure_gemm=false >"$tmp/w$n.log" 2>&1 &
  pids+=("$!")
  eval "worker$n=$!"
done
state_of() { aq workers --output json | json "[w['state'] for w in d.get('workers', []) if w['info']['worker_id'] == '$1'][0]"; }
both_healthy() { [ "$(healthy_count)" -eq 2 ]; }
wait_until 30 both_healthy || { echo "FAIL: workers never HEALTHY: $(aq workers)"; exit 1; }

# A job on both workers, long enough to outlive the faults below.
cat >"$tmp/job.textproto" <<'SPEC'
name: "clock-faults"
model {
  layers { flatten {} }
  layers { linear { in_features: 16 out_features: 16 } }
  layers { relu {} }
  layers { linear { in_features: 16 out_features: 4 } }
}
data { synthetic { sample_shape: [16] num_classes: 4 train_samples: 256 seed: 3 } }
optimizer { sgd { lr: 0.01 } }
batch_size: 8
max_steps: 100000000
pipeline { workers: 2 schedule: "1f1b_flush" }
SPEC
job=$(aq submit "$tmp/job.textproto" --output json | json "d['job_id']")
running() { [ "$(aq status "$job" --output json | json "d['state']")" = JOB_RUNNING ]; }
wait_until 30 running || fail "job never RUNNING: $(aq status "$job")"

# 1. The wall clock 1 h ahead: nobody dies.
echo "+1h" >"$tmp/offset"
sleep 4
[ "$(healthy_count)" -eq 2 ] || fail "wall clock +1 h: workers not HEALTHY: $(aq workers)"
# (A worker declared DEAD re-registers at once: the log tells.)
deaths() { grep -- '-> DEAD' "$tmp/coordinator.log"; }
deaths && fail "wall clock +1 h: a worker was declared DEAD"

# 2. The coordinator stopped for 7 s (more than dead_after, 3 s).
kill -STOP "$coordinator"
sleep 7
kill -CONT "$coordinator"
sleep 2
[ "$(healthy_count)" -eq 2 ] || fail "after a 7 s stall of the coordinator: $(aq workers)"
deaths && fail "a stall of the coordinator declared a worker DEAD"
grep -q "did not run for" "$tmp/coordinator.log" ||
  fail "the coordinator did not notice its own stall"
workers=$(aq status "$job" --output json | json "d['workers']")
[ "$workers" = 2 ] || fail "job re-planned onto $workers worker(s) after the stall: $(aq status "$job")"
running || fail "job not RUNNING after the stall: $(aq status "$job")"

# 3. The wall clock 30 min behind, and w2 frozen: DEAD within dead_after
# (3 s) and a tick or two.
echo "-30m" >"$tmp/offset"
sleep 1
kill -STOP "$worker2"
start=$SECONDS
w2_dead() { [ "$(state_of w2)" = WORKER_DEAD ]; }
wait_until 15 w2_dead || fail "wall clock -30 min: frozen w2 not DEAD: $(aq workers)"
[ $((SECONDS - start)) -le 6 ] || fail "frozen w2 took $((SECONDS - start)) s to be DEAD (dead_after 3 s)"
[ "$(state_of w1)" = WORKER_HEALTHY ] || fail "w1 not HEALTHY: $(aq workers)"
kill -CONT "$worker2"
aq cancel "$job" >/dev/null 2>&1

if [ "$fails" -ne 0 ]; then
  echo "$fails failure(s); coordinator log:"
  tail -30 "$tmp/coordinator.log"
  exit 1
fi
echo "clock_faults_test: passed"
