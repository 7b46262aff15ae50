#!/usr/bin/env bash
# Process-level test of recovery under the parameter server, with the real
# daemons: a coordinator and three workers on ephemeral ports.
#  A job of pure data parallelism (one stage, 2 replicas: the planner's
#  choice for a small model over fast links) in data_parallel.mode
#  "parameter_server", consistency "sync", one shard per replica (shard k
#  hosted by replica k), checkpointing every 10 steps, with the third worker
#  idle. After checkpoint v20 is committed, the worker of a random replica
#  (a shard host) is SIGKILLed. The job must SUCCEED after exactly one
#  restart naming the killed worker, rolled back to a checkpoint at least as
#  new as the one committed before the kill, onto 2 workers (the spare among
#  them), again one stage of 2 replicas; its trained model must equal, byte
#  for byte, the model of the same job run without interruption (the same
#  layout: the shards sum in replica order, and the checkpoint holds every
#  shard's weights and optimizer state whole).
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
for w in w1 w2 w3; do
  "$WORKER" --coordinator "$addr" --worker_id "$w" --listen 127.0.0.1:0 \
    --threads 1 --measure_gemm=false --peer_timeout_ms 3000 \
    --checkpoint_root "$tmp" >"$tmp/$w.log" 2>&1 &
  pids+=("$!"); wpid[$w]=$!
done
healthy() { [ "$(healthy_count)" -eq "$1" ]; }
wait_until 15 healthy 3 || { echo "workers never HEALTHY: $(aq workers)"; exit 1; }

# 200 steps of ~20 ms (the delay layer: 8 ms each way per microbatch); the
# links at 1e12 bytes/s make data parallelism (one stage of 2 replicas) the
# plan.
cat >"$tmp/job.textproto" <<SPEC
name: "ps-recovery"
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
optimizer { sgd { lr: 0.05 momentum: 0.9 } }
batch_size: 32
max_steps: 200
epochs: 100
seed: 11
pipeline { workers: 2 schedule: "1f1b_flush" microbatches: 2 bandwidth_bytes_per_s: 1e12 }
data_parallel { mode: "parameter_server" consistency: "sync" }
checkpoint { dir: "$tmp/ckpt" every_steps: 10 }
fault_tolerance { max_restarts: 3 }
SPEC

status_json() { aq status "$1" --output json 2>/dev/null; }
job_id_of() { sed -E 's/.*"job_id":"([^"]+)".*/\1/' "$1"; }
ckpt_version() { status_json "$1" | json 'd.get("checkpoint_version", 0)'; }
state_of() { status_json "$1" | json 'd["state"]'; }
is_final() { case "$(state_of "$1")" in JOB_SUCCEEDED|JOB_FAILED|JOB_CANCELLED) return 0 ;; esac; return 1; }
at_least_ckpt() { [ "$(ckpt_version "$1")" -ge "$2" ]; }
# The layout of job $1: "STAGES REPLICAS-OF-STAGE-0".
layout_of() { status_json "$1" | json '"%d %d" % (len(d["stages"]), len(d["stages"][0]["workers"]))'; }
worker_state() { aq workers --output json | json "[w['state'] for w in d['workers'] if w['info']['worker_id'] == '$1']"; }

# Whether model $1 is model $2 bit for bit, tensor by tensor. Why not in
# $tmp/diff.
same_bits() {
  python3 - "$1" "$2" <<'PY' >"$tmp/diff" 2>&1
import json, struct, sys
def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    return {k: (t["shape"], data[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]])
            for k, t in header.items()}
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
bad = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
if bad:
    sys.exit("tensors that differ: " + ", ".join(bad))
PY
}

# The reference: the same job without interruption.
aq submit "$tmp/job.textproto" --wait --output json >"$tmp/ref.json" 2>"$tmp/ref.err" ||
  fail "the reference job: $(cat "$tmp/ref.err")"
ref=$(job_id_of "$tmp/ref.json")
aq weights "$ref" -o "$tmp/ref.safetensors" >/dev/null 2>"$tmp/err" || fail "aq weights $ref: $(cat "$tmp/err")"
[ "$(layout_of "$ref")" = "1 2" ] ||
  fail "the reference is not one stage of 2 replicas: $(aq plan "$ref")"
aq status "$ref" | grep -q "SUCCEEDED step 200/200" || fail "the reference: $(aq status "$ref")"

# The job again; a shard host SIGKILLed after checkpoint v20.
id=$(aq submit "$tmp/job.textproto" 2>"$tmp/submit.err") || fail "submit: $(cat "$tmp/submit.err")"
wait_until 30 at_least_ckpt "$id" 20 || fail "$id: no checkpoint v20: $(aq status "$id")"
replica=$((RANDOM % 2))
victim=$(status_json "$id" | json "d['stages'][0]['workers'][$replica]")
peer=$(status_json "$id" | json "d['stages'][0]['workers'][$((1 - replica))]")
spare=$(for w in w1 w2 w3; do [ "$w" != "$victim" ] && [ "$w" != "$peer" ] && echo "$w"; done)
ckpt_before=$(ckpt_version "$id")
[ "$(state_of "$id")" = JOB_RUNNING ] || fail "$id not RUNNING before the kill: $(aq status "$id")"
kill_at=$(date +"%F %T.%3N")
kill -KILL "${wpid[$victim]}"; wait "${wpid[$victim]}" 2>/dev/null; forget "${wpid[$victim]}"
echo "killed $victim (replica $replica of $id, the host of shard $replica; peer $peer) after checkpoint v$ckpt_before"

wait_until 60 is_final "$id" || fail "$id never ended: $(aq status "$id")"
aq status "$id" >"$tmp/status" 2>&1
grep -q "SUCCEEDED step 200/200" "$tmp/status" || fail "$id did not succeed: $(cat "$tmp/status")"
[ "$(grep -c '^restart ' "$tmp/status")" -eq 1 ] || fail "$id: not one restart: $(cat "$tmp/status")"
line=$(grep '^restart ' "$tmp/status")
echo "$line" | grep -Eq "^restart 1 at step [0-9]+: .*worker $victim\b" ||
  fail "$id: the restart does not name $victim: $line"
echo "$line" | grep -Eq "; rolled back to v[0-9]+, 2 workers\$" || fail "$id: the restart is not onto 2 workers: $line"
back=$(echo "$line" | sed -E 's/.*rolled back to v([0-9]+).*/\1/')
[ "$back" -ge "$ckpt_before" ] || fail "$id rolled back to v$back, older than v$ckpt_before committed before the kill"
[ "$(worker_state "$victim")" = "['WORKER_DEAD']" ] || fail "$victim: $(worker_state "$victim"), not DEAD"
[ "$(layout_of "$id")" = "1 2" ] || fail "$id after the restart is not one stage of 2 replicas: $(status_json "$id")"
status_json "$id" | json '" ".join(d["stages"][0]["workers"])' | grep -qw "$spare" ||
  fail "$id: the spare $spare is not among the job's workers: $(status_json "$id")"
# Recovery time: the kill to the restart, and to the first step the new
# attempt committed (the coordinator's log lines' times).
log_ms() { python3 -c 'import sys; t = sys.stdin.read().split()[1].split(":"); print(int((int(t[0]) * 3600 + int(t[1]) * 60 + float(t[2])) * 1000))'; }
kill_ms=$(echo "$kill_at" | log_ms)
restart=$(grep -m1 "job $id: restart 1 of" "$tmp/coordinator.log") || fail "$id: the coordinator logged no restart"
first=$(grep -m1 "job $id attempt 1: first step after the restart committed" "$tmp/coordinator.log") ||
  fail "$id: the coordinator logged no first step after the restart"
[ -n "$restart" ] && [ -n "$first" ] &&
  echo "recovery: restart $(( $(echo "$restart" | log_ms) - kill_ms )) ms after the kill, first step committed $(( $(echo "$first" | log_ms) - kill_ms )) ms after it"
aq weights "$id" -o "$tmp/got.safetensors" >/dev/null 2>"$tmp/err" || fail "aq weights $id: $(cat "$tmp/err")"
cmp -s "$tmp/ref.safetensors" "$tmp/got.safetensors" || same_bits "$tmp/ref.safetensors" "$tmp/got.safetensors" ||
  fail "$id: the model after the restart differs from the uninterrupted job's: $(cat "$tmp/diff")"
# Every committed checkpoint of the recovered job verifies.
aq checkpoints "$id" --output json >"$tmp/ckpts.json" 2>"$tmp/err" || fail "aq checkpoints $id: $(cat "$tmp/err")"
dir=$(json 'd["checkpoints"][0]["dir"]' <"$tmp/ckpts.json")
"$AQ" verify-checkpoint "$dir" >"$tmp/verify.out" 2>&1 || fail "verify-checkpoint $dir: $(cat "$tmp/verify.out")"

if [ "$fails" -gt 0 ]; then
  echo "coordinator log:"; tail -40 "$tmp/coordinator.log"
  echo "$fails failure(s)"; exit 1
fi
echo "PASS"
