#!/usr/bin/env bash
# Process-level test of a tolerated loss under the asynchronous parameter
# server, with the real daemons: a coordinator and four workers on
# ephemeral ports.
#  A job of pure data parallelism (one stage, 4 replicas: the planner's
#  choice for a small model over fast links) in data_parallel.mode
#  "parameter_server", consistency "async", 2 shards (hosted by replicas 0
#  and 1), checkpointing every 20 steps. Replica 3, which hosts no shard, is
#  SIGKILLed mid-job. The job must go on without it and SUCCEED with no
#  restart: the output stage's step and the loss curve advance past the
#  kill, every minibatch's loss is in the curve once, the status and the
#  job's log record the loss naming the worker (tolerated), the killed
#  worker is DEAD and the others HEALTHY. Prints how long the shard hosts
#  and the coordinator took to notice the loss.
# Bounded in time; everything is cleaned up.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

"$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" --state_dir "$tmp/cstate" \
  --heartbeat_interval_ms 100 --suspect_after_missed 3 --dead_after_ms 1500 \
  --checkpoint_root "$tmp" >"$tmp/coordinator.log" 2>&1 &
pids+=("$!")
wait_until 10 test -s "$tmp/port" || { cat "$tmp/coordinator.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }
declare -A wpid
for w in w1 w2 w3 w4; do
  "$WORKER" --coordinator "$addr" --worker_id "$w" --listen 127.0.0.1:0 \
    --threads 1 --measure_gemm=false --peer_timeout_ms 3000 \
    --checkpoint_root "$tmp" >"$tmp/$w.log" 2>&1 &
  pids+=("$!"); wpid[$w]=$!
done
healthy() { [ "$(healthy_count)" -eq "$1" ]; }
wait_until 15 healthy 4 || { echo "workers never HEALTHY: $(aq workers)"; exit 1; }

# 300 steps of ~20 ms (the delay layer, 8 ms each way per microbatch).
cat >"$tmp/job.textproto" <<SPEC
name: "async-replica-loss"
model {
  layers { flatten {} }
  layers { linear { in_features: 16 out_features: 128 } }
  layers { relu {} }
  layers { delay { forward_ms: 8 backward_ms: 8 } }
  layers { linear { in_features: 128 out_features: 128 } }
  layers { relu {} }
  layers { linear { in_features: 128 out_features: 4 } }
}
data { synthetic { sample_shape: [16] num_classes: 4 train_samples: 512 test_samples: 128 seed: 7 } }
optimizer { sgd { lr: 0.02 momentum: 0.9 } }
batch_size: 32
max_steps: 300
epochs: 100
seed: 11
pipeline { workers: 4 schedule: "1f1b_flush" microbatches: 4 bandwidth_bytes_per_s: 1e12 }
data_parallel { mode: "parameter_server" consistency: "async" shards: 2 }
checkpoint { dir: "$tmp/ckpt" every_steps: 20 }
fault_tolerance { max_restarts: 3 }
SPEC

status_json() { aq status "$1" --output json 2>/dev/null; }
state_of() { status_json "$1" | json 'd["state"]'; }
step_of() { status_json "$1" | json 'd.get("step", 0)'; }
is_final() { case "$(state_of "$1")" in JOB_SUCCEEDED|JOB_FAILED|JOB_CANCELLED) return 0 ;; esac; return 1; }
at_least_step() { [ "$(step_of "$1")" -ge "$2" ]; }
worker_state() { aq workers --output json | json "[w['state'] for w in d['workers'] if w['info']['worker_id'] == '$1']"; }
# Milliseconds of the day of a log line's "YYYY-MM-DD HH:MM:SS.mmm" (stdin).
log_ms() { python3 -c 'import sys; t = sys.stdin.read().split()[1].split(":"); print(int((int(t[0]) * 3600 + int(t[1]) * 60 + float(t[2])) * 1000))'; }

id=$(aq submit "$tmp/job.textproto" 2>"$tmp/submit.err") || { fail "submit: $(cat "$tmp/submit.err")"; exit 1; }
wait_until 30 at_least_step "$id" 60 || fail "$id: never reached step 60: $(aq status "$id")"
[ "$(status_json "$id" | json '"%d %d" % (len(d["stages"]), len(d["stages"][0]["workers"]))')" = "1 4" ] ||
  fail "$id is not one stage of 4 replicas: $(aq plan "$id")"
victim=$(status_json "$id" | json "d['stages'][0]['workers'][3]")
[ "$(state_of "$id")" = JOB_RUNNING ] || fail "$id not RUNNING before the kill: $(aq status "$id")"
kill_at=$(date +"%F %T.%3N")
kill -KILL "${wpid[$victim]}"; wait "${wpid[$victim]}" 2>/dev/null; forget "${wpid[$victim]}"
step_at_kill=$(step_of "$id")
echo "killed $victim (replica 3 of $id, no shard) at step $step_at_kill"
kill_ms=$(echo "$kill_at" | log_ms)
[ "$step_at_kill" -lt 250 ] || fail "$id was at step $step_at_kill of 300 at the kill: not mid-job"

wait_until 60 is_final "$id" || fail "$id never ended: $(aq status "$id")"
aq status "$id" >"$tmp/status" 2>&1
status_json "$id" >"$tmp/status.json"
grep -q "SUCCEEDED step 300/300" "$tmp/status" || fail "$id did not succeed: $(cat "$tmp/status")"
grep -q '^restart ' "$tmp/status" && fail "$id restarted: $(cat "$tmp/status")"
[ "$(json 'd.get("attempt", 0)' <"$tmp/status.json")" = 0 ] || fail "$id is not on its first attempt"
# The loss, recorded: in the status (text and JSON), the job's log and the
# coordinator's log.
grep -Eq "^lost at step [0-9]+, tolerated: worker $victim \(stage 0, replica 3\) is DEAD" "$tmp/status" ||
  fail "$id: the status shows no tolerated loss of $victim: $(cat "$tmp/status")"
[ "$(json '[(l["worker_id"], l.get("replica", 0)) for l in d.get("tolerated_losses", [])]' <"$tmp/status.json")" = "[('$victim', 3)]" ] ||
  fail "$id: tolerated_losses in JSON: $(cat "$tmp/status.json")"
lost_step=$(json 'int(d["tolerated_losses"][0].get("step", 0))' <"$tmp/status.json")
# The shards' staleness histogram reaches the status: the 2 shards applied
# 2 pushes a step from each live replica (some stale), the stage's
# optimizer state is there.
applied=$(json 'sum(int(c) for c in d["stages"][0].get("staleness_histogram", []))' <"$tmp/status.json")
[ "$applied" -gt 1000 ] || fail "$id: the staleness histogram counts $applied updates: $(cat "$tmp/status.json")"
[ "$(json 'int(d["stages"][0].get("optimizer_state_bytes", 0)) > 0' <"$tmp/status.json")" = True ] ||
  fail "$id: no optimizer state in the status: $(cat "$tmp/status.json")"
echo "staleness applied by the shards: $(json 'd["stages"][0]["staleness_histogram"]' <"$tmp/status.json")"
aq logs "$id" >"$tmp/job.log" 2>&1 || fail "aq logs $id: $(cat "$tmp/job.log")"
grep -q "worker $victim (stage 0, replica 3) lost at step [0-9]*, tolerated" "$tmp/job.log" ||
  fail "$id: the job's log has no line of the loss: $(tail -20 "$tmp/job.log")"
# Training went on after the kill, and the loss with it: the curve has every
# minibatch once, through the last.
[ "$lost_step" -lt 300 ] || fail "$id: the loss was only noticed at the end (step $lost_step)"
curve='[int(p.get("minibatch", 0)) for p in d["loss_curve"]]'
json "$curve == list(range(300))" <"$tmp/status.json" | grep -qx True ||
  fail "$id: the loss curve is not minibatches 0..299 once each: $(json "$curve" <"$tmp/status.json")"
[ "$(worker_state "$victim")" = "['WORKER_DEAD']" ] || fail "$victim: $(worker_state "$victim"), not DEAD"
for w in w1 w2 w3 w4; do
  [ "$w" = "$victim" ] && continue
  [ "$(worker_state "$w")" = "['WORKER_HEALTHY']" ] || fail "$w: $(worker_state "$w"), not HEALTHY"
done
# How fast each shard host dropped the replica (both host a shard that it
# pushed to), and the coordinator noticed.
hosts=$(status_json "$id" | json "' '.join(d['stages'][0]['workers'][:2])")
for h in $hosts; do
  line=$(grep -m1 "replica 3 (rank [0-9]*) dropped" "$tmp/$h.log") ||
    { fail "shard host $h never dropped replica 3: $(tail -5 "$tmp/$h.log")"; continue; }
  echo "shard host $h dropped replica 3 $(( $(echo "$line" | log_ms) - kill_ms )) ms after the kill: ${line#*dropped }"
done
line=$(grep -m1 "lost at step .*, tolerated" "$tmp/coordinator.log") || fail "the coordinator logged no tolerated loss"
[ -n "$line" ] && echo "the coordinator tolerated the loss $(( $(echo "$line" | log_ms) - kill_ms )) ms after the kill, at step $lost_step (killed at $step_at_kill)"

if [ "$fails" -gt 0 ]; then
  echo "coordinator log:"; tail -40 "$tmp/coordinator.log"
  echo "$fails failure(s)"; exit 1
fi
echo "PASS"
