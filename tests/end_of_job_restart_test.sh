#!/usr/bin/env bash
# Issue 22, item 2: the coordinator is killed (SIGKILL) 0.5 s after stage 0
# logs that it finished (it has reported so; the job's end-of-job
# evaluation of the test split still runs for about a second) and is
# started again on the same address and state directory. Before the fix
# the job stayed RUNNING at N/N for ever, holding its workers: stage 0's
# finished report had reached the dead coordinator and was lost with it.
# Now each worker says again that its stage finished when it registers
# again with its claim, and the job ends SUCCEEDED, releasing its workers.
# Three rounds.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

start_coordinator() {  # $1 host:port, $2 log; sets cpid
  rm -f "$tmp/port"
  "$COORDINATOR" --listen "$1" --port_file "$tmp/port" --state_dir "$tmp/cstate" \
    --heartbeat_interval_ms 100 --dead_after_ms 1500 >"$2" 2>&1 &
  cpid=$!
  pids+=("$cpid")
  wait_until 10 test -s "$tmp/port"
}
start_coordinator 127.0.0.1:0 "$tmp/coordinator-0.log" || { cat "$tmp/coordinator-0.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }
for w in w1 w2; do
  "$WORKER" --coordinator "$addr" --worker_id "$w" --listen 127.0.0.1:0 \
    --threads 1 --measure_gemm=false --peer_timeout_ms 10000 >"$tmp/$w.log" 2>&1 &
  pids+=("$!")
done
healthy() { [ "$(healthy_count)" -eq 2 ]; }
wait_until 15 healthy || { echo "FAIL: workers never HEALTHY: $(aq workers)"; exit 1; }

# Two stages (the delays make one worker too slow), about 2 s of training,
# then about 1.5 s evaluating 2,048 test samples.
cat >"$tmp/job.textproto" <<'SPEC'
name: "end-of-job"
model {
  layers { flatten {} }
  layers { linear { in_features: 16 out_features: 64 } }
  layers { relu {} }
  layers { delay { forward_ms: 5 backward_ms: 5 } }
  layers { linear { in_features: 64 out_features: 64 } }
  layers { relu {} }
  layers { delay { forward_ms: 5 backward_ms: 5 } }
  layers { linear { in_features: 64 out_features: 4 } }
}
data {
  synthetic { sample_shape: [16] num_classes: 4 train_samples: 256 test_samples: 2048 seed: 3 }
}
optimizer { sgd { lr: 0.05 } }
batch_size: 16
max_steps: 60
pipeline { workers: 2 schedule: "1f1b_flush" microbatches: 2 bandwidth_bytes_per_s: 1e6 }
fault_tolerance { max_restarts: 3 }
SPEC

state() { aq status "$1" --output json 2>/dev/null | json 'd["state"]' 2>/dev/null; }
for round in 1 2 3; do
  log="$tmp/coordinator-$((round - 1)).log"
  id=$(aq submit "$tmp/job.textproto" 2>"$tmp/err") || { fail "submit: $(cat "$tmp/err")"; break; }
  stage0_finished() { grep -q "job $id: stage 0 replica 0 finished" "$tmp"/w[12].log; }
  wait_until 60 stage0_finished || { fail "round $round: stage 0 never finished: $(aq status "$id")"; break; }
  sleep 0.5
  [ "$(state "$id")" = JOB_RUNNING ] ||
    { fail "round $round: $id not RUNNING when the coordinator is killed: $(aq status "$id")"; break; }
  kill -KILL "$cpid"
  wait "$cpid" 2>/dev/null
  forget "$cpid"
  start_coordinator "$addr" "$tmp/coordinator-$round.log" ||
    { fail "round $round: the coordinator did not restart"; break; }
  ended() { case "$(state "$id")" in JOB_SUCCEEDED | JOB_FAILED | JOB_CANCELLED) return 0 ;; esac; return 1; }
  wait_until 40 ended || fail "round $round: $id never ended after the restart: $(aq status "$id")"
  [ "$(state "$id")" = JOB_SUCCEEDED ] || fail "round $round: $id ended $(aq status "$id")"
  stages=$(aq status "$id" --output json | json 'len(d["plan"]["stages"])')
  [ "$stages" = 2 ] || fail "round $round: $id ran as $stages stage(s), not 2"
  idle() { [ "$(aq workers --output json | json 'sum(1 for w in d.get("workers", []) if not w.get("job_id"))')" -eq 2 ]; }
  wait_until 15 idle || fail "round $round: workers still held: $(aq workers)"
done

if [ "$fails" -ne 0 ]; then
  echo "$fails failure(s); last coordinator log:"
  tail -20 "$tmp/coordinator-$round.log"
  exit 1
fi
echo "end_of_job_restart_test: passed"
