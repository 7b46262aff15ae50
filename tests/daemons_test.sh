#!/usr/bin/env bash
# Process-level test of the real daemons as users run them: a coordinator and
# two workers on ephemeral ports, jobs submitted through `aq`, bad input
# refused with precise errors, a worker killed with SIGKILL seen DEAD within
# its lease and its job FAILED with a reason naming it, SIGTERM handled
# cleanly, a succeeded job's trained model fetched with aq weights (also
# after a coordinator restart), checkpoints listed and resumed from. Bounded in time; everything is cleaned up.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
# The harness (fail, pids/cleanup, wait_until): next to this script, or
# under the runfiles root Bazel runs tests from.
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

# The state directory does not exist yet: the coordinator creates it.
cstate="$tmp/new/cstate"
"$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" --state_dir "$cstate" \
  --heartbeat_interval_ms 100 --suspect_after_missed 3 --dead_after_ms 1500 \
  --checkpoint_root "$tmp" >"$tmp/coordinator.log" 2>&1 &
cpid=$!; pids+=("$cpid")
wait_until 10 test -s "$tmp/port" || { echo "coordinator did not start"; cat "$tmp/coordinator.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }
[ -d "$cstate" ] || fail "--state_dir $cstate not created"
[ "$(stat -c %a "$cstate")" = 700 ] || fail "--state_dir mode $(stat -c %a "$cstate"), want 700"
[ -s "$cstate/coordinator.pid" ] || fail "no coordinator.pid in the new --state_dir"
# Is stdin exactly one JSON document?
one_json() { python3 -c 'import json,sys; json.load(sys.stdin)' 2>/dev/null; }

# An empty coordinator says so.
aq jobs >"$tmp/out" 2>&1 || fail "aq jobs on an empty coordinator: exit $?"
[ "$(cat "$tmp/out")" = "no jobs" ] || fail "aq jobs on an empty coordinator: $(cat "$tmp/out")"
aq workers >"$tmp/out" 2>&1 || fail "aq workers with no workers: exit $?"
[ "$(cat "$tmp/out")" = "no workers registered" ] || fail "aq workers with no workers: $(cat "$tmp/out")"
for cmd in jobs workers status; do
  aq "$cmd" --output json >"$tmp/out" 2>/dev/null || fail "aq $cmd --output json on an empty coordinator"
  one_json <"$tmp/out" || fail "aq $cmd --output json on an empty coordinator: $(cat "$tmp/out")"
done

# Unreachable coordinator: exit 3.
"$AQ" jobs --coordinator 127.0.0.1:1 >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 3 ] || fail "unreachable: exit $rc"
grep -q "cannot reach the coordinator at 127.0.0.1:1" "$tmp/err" || fail "unreachable message: $(cat "$tmp/err")"

# A device this machine or build cannot provide: the worker refuses to
# start (exit 2) and says why, before registering.
"$WORKER" --coordinator "$addr" --device tpu:0 >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "bad --device: exit $rc"
grep -q 'bad device "tpu:0": expected "cpu" or "cuda:N"' "$tmp/err" || fail "bad device message: $(cat "$tmp/err")"
"$WORKER" --coordinator "$addr" --device cpu --gemm_precision tf32 >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "tf32 on the CPU: exit $rc"
grep -q "tf32 GEMMs need a CUDA device" "$tmp/err" || fail "tf32 on the CPU message: $(cat "$tmp/err")"
"$WORKER" --coordinator "$addr" --gemm_precision fp16 >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "bad --gemm_precision: exit $rc"
grep -q 'bad GEMM precision "fp16"' "$tmp/err" || fail "bad --gemm_precision message: $(cat "$tmp/err")"
if ! nvidia-smi -L >/dev/null 2>&1; then
  "$WORKER" --coordinator "$addr" --device cuda:0 >/dev/null 2>"$tmp/err"; rc=$?
  [ "$rc" -eq 2 ] || fail "cuda:0 without a GPU: exit $rc"
  grep -Eq "no usable CUDA device|built without CUDA" "$tmp/err" || fail "cuda:0 message: $(cat "$tmp/err")"
fi

# Starts worker $1 with peer deadline $2 ms; its pid goes to pid_$1.
start_worker() {
  "$WORKER" --coordinator "$addr" --worker_id "$1" --listen 127.0.0.1:0 \
    --threads 1 --measure_gemm=false --peer_timeout_ms "$2" \
    --checkpoint_root "$tmp" >"$tmp/$1.log" 2>&1 &
  pids+=("$!"); eval "pid_$1=$!"
}
# True when exactly $1 workers are HEALTHY.
healthy() { [ "$(aq workers --output json | grep -o '"state":"WORKER_HEALTHY"' | wc -l)" -eq "$1" ]; }
for w in w1 w2; do start_worker "$w" 3000; done
wait_until 15 healthy 2 || fail "workers never both HEALTHY: $(aq workers)"

# Bad input gets precise errors; the daemons keep running.
printf 'name: "x"\nbatch_size: lots\n' >"$tmp/syntax.textproto"
aq submit "$tmp/syntax.textproto" >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "syntax error: exit $rc"
grep -q "syntax.textproto: not a valid text-format JobSpec: 2:" "$tmp/err" || fail "syntax message: $(cat "$tmp/err")"
cat >"$tmp/bad.textproto" <<'SPEC'
model { layers { flatten {} } layers { linear { in_features: 7 out_features: 2 } } }
data { synthetic { sample_shape: [8] num_classes: 2 train_samples: 64 seed: 1 } }
optimizer { sgd { lr: 0.1 } }
batch_size: 8
max_steps: 4
SPEC
aq submit "$tmp/bad.textproto" >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "invalid spec: exit $rc"
grep -q "invalid job spec: model.layers\[1\].linear.in_features=7 does not match the previous layer's output 8" "$tmp/err" ||
  fail "invalid spec message: $(cat "$tmp/err")"
aq status job-nope >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "unknown job: exit $rc"
grep -q "job 'job-nope' does not exist" "$tmp/err" || fail "unknown job message: $(cat "$tmp/err")"
aq cancel job-nope >/dev/null 2>&1 && fail "cancel of an unknown job succeeded"

# A short job succeeds.
cat >"$tmp/ok.textproto" <<'SPEC'
name: "ok"
model { layers { flatten {} } layers { linear { in_features: 8 out_features: 2 } } }
data { synthetic { sample_shape: [8] num_classes: 2 train_samples: 256 test_samples: 64 seed: 1 } }
optimizer { sgd { lr: 0.1 } }
batch_size: 16
epochs: 2
SPEC
aq submit "$tmp/ok.textproto" --wait >"$tmp/ok.out" 2>&1; rc=$?
[ "$rc" -eq 0 ] || fail "short job: exit $rc: $(cat "$tmp/ok.out")"
grep -q "SUCCEEDED step 32/32" "$tmp/ok.out" || fail "short job output: $(cat "$tmp/ok.out")"

# --output json: exactly one JSON document on stdout, submit --wait included;
# the job id and progress go to stderr.
aq submit "$tmp/ok.textproto" --wait --output json >"$tmp/ok.json" 2>"$tmp/ok.err"; rc=$?
[ "$rc" -eq 0 ] || fail "submit --wait --output json: exit $rc: $(cat "$tmp/ok.err")"
one_json <"$tmp/ok.json" || fail "submit --wait --output json is not one JSON document: $(cat "$tmp/ok.json")"
grep -q '"state":"JOB_SUCCEEDED"' "$tmp/ok.json" || fail "submit --wait --output json: $(cat "$tmp/ok.json")"
okid=$(sed -E 's/.*"job_id":"([^"]+)".*/\1/' "$tmp/ok.json")
aq submit "$tmp/ok.textproto" --output json >"$tmp/sub.json" 2>/dev/null || fail "submit --output json"
one_json <"$tmp/sub.json" || fail "submit --output json: $(cat "$tmp/sub.json")"
for args in "status $okid" "watch $okid" "jobs" "workers" "status"; do
  # shellcheck disable=SC2086
  aq $args --output json >"$tmp/out" 2>/dev/null || fail "aq $args --output json: exit $?"
  one_json <"$tmp/out" || fail "aq $args --output json is not one JSON document: $(head -c 300 "$tmp/out")"
done
aq watch "$okid" >"$tmp/out" 2>&1 || fail "aq watch of a succeeded job: exit $?"
grep -q "SUCCEEDED step 32/32" "$tmp/out" || fail "aq watch of a succeeded job: $(cat "$tmp/out")"

# The trained model: uploaded by the worker into <state_dir>/models, shown
# by aq status, fetched bit-exact by aq weights as a safetensors file of the
# spec's model.
model="$cstate/models/$okid.safetensors"
aq status "$okid" >"$tmp/out" 2>&1 || fail "aq status $okid: exit $?"
grep -qF "model: $model (" "$tmp/out" || fail "aq status shows no model: $(cat "$tmp/out")"
grep -qF "fetch with: aq weights $okid -o model.safetensors" "$tmp/out" ||
  fail "aq status shows no fetch hint: $(cat "$tmp/out")"
aq weights "$okid" -o "$tmp/model.safetensors" >"$tmp/out" 2>&1 || fail "aq weights: exit $?: $(cat "$tmp/out")"
grep -qF "wrote $tmp/model.safetensors ($(stat -c %s "$model") bytes, model of $okid)" "$tmp/out" ||
  fail "aq weights output: $(cat "$tmp/out")"
cmp -s "$model" "$tmp/model.safetensors" || fail "the fetched model differs from the coordinator's"
[ -e "$tmp/model.safetensors.part" ] && fail "aq weights left its .part file"
python3 - "$tmp/model.safetensors" <<'PY' || fail "the fetched model is not the spec's model as safetensors"
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
header = json.loads(data[8:8 + n])
assert header["layers.1.weight"]["shape"] == [2, 8], header
assert header["layers.1.bias"]["shape"] == [2], header
PY
aq weights "$okid" -o "$tmp/model-json.safetensors" --output json >"$tmp/out" 2>/dev/null || fail "aq weights --output json: exit $?"
one_json <"$tmp/out" || fail "aq weights --output json: $(cat "$tmp/out")"
aq checkpoints "$okid" >"$tmp/out" 2>&1 || fail "aq checkpoints: exit $?"
[ "$(cat "$tmp/out")" = "no checkpoints" ] || fail "aq checkpoints of a job without: $(cat "$tmp/out")"
aq checkpoints "$okid" --output json >"$tmp/out" 2>/dev/null || fail "aq checkpoints --output json: exit $?"
one_json <"$tmp/out" || fail "aq checkpoints --output json: $(cat "$tmp/out")"
aq checkpoints job-nope >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "aq checkpoints of an unknown job: exit $rc"
grep -q "job 'job-nope' does not exist" "$tmp/err" || fail "aq checkpoints job-nope: $(cat "$tmp/err")"

# Checkpoints: a pipeline job that checkpoints every 8 steps lists them
# (the last 3 kept), and a longer job resumes from its latest.
sed "s|^epochs: 2\$|epochs: 2\npipeline { workers: 2 }\ncheckpoint { dir: \"$tmp/ckpt\" every_steps: 8 }|" \
  "$tmp/ok.textproto" >"$tmp/ck.textproto"
ckid=$(aq submit "$tmp/ck.textproto" --wait --output json 2>/dev/null | sed -E 's/.*"job_id":"([^"]+)".*/\1/')
# The last version's commit runs on the committer's thread and may land
# just after the job's end is reported.
three_kept() { aq checkpoints "$ckid" 2>/dev/null | grep -c '^v[0-9]' | grep -qx 3; }
wait_until 10 three_kept
aq checkpoints "$ckid" >"$tmp/out" 2>&1 || fail "aq checkpoints $ckid: exit $?: $(cat "$tmp/out")"
grep -q "^version  *committed  *attempt  *files  *bytes  *directory$" "$tmp/out" ||
  fail "aq checkpoints table header: $(cat "$tmp/out")"
grep -qF "$tmp/ckpt/$ckid/" "$tmp/out" || fail "aq checkpoints names no directory: $(cat "$tmp/out")"
[ "$(grep -c '^v[0-9]' "$tmp/out")" -eq 3 ] || fail "aq checkpoints: not 3 kept: $(cat "$tmp/out")"
aq checkpoints "$ckid" --output json >"$tmp/out" 2>/dev/null || fail "aq checkpoints --output json: exit $?"
one_json <"$tmp/out" || fail "aq checkpoints --output json: $(cat "$tmp/out")"
sed 's/^epochs: 2$/epochs: 3/' "$tmp/ck.textproto" >"$tmp/ck3.textproto"
rid=$(aq submit "$tmp/ck3.textproto" --resume "$ckid" --wait --output json 2>/dev/null |
  sed -E 's/.*"job_id":"([^"]+)".*/\1/')
aq status "$rid" >"$tmp/out" 2>&1 || fail "aq status of the resumed job: exit $?"
grep -q "SUCCEEDED step 48/48" "$tmp/out" || fail "the resumed job: $(cat "$tmp/out")"
grep -qF "resumed from: $tmp/ckpt/$ckid/" "$tmp/out" || fail "aq status shows no resume: $(cat "$tmp/out")"
grep -q "^checkpoint: v[0-9]" "$tmp/out" || fail "aq status shows no checkpoint: $(cat "$tmp/out")"
aq submit "$tmp/ck3.textproto" --resume job-nope >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "--resume of an unknown job: exit $rc"
grep -q "job-nope" "$tmp/err" || fail "--resume job-nope: $(cat "$tmp/err")"

# A slow job; kill its worker with SIGKILL. Recovery is off (these jobs
# are to fail, naming the worker, rather than restart elsewhere).
cat >"$tmp/slow.textproto" <<'SPEC'
name: "slow"
model { layers { flatten {} } layers { linear { in_features: 8 out_features: 2 } }
        layers { delay { forward_ms: 20 backward_ms: 20 } } }
data { synthetic { sample_shape: [8] num_classes: 2 train_samples: 256 seed: 1 } }
optimizer { sgd { lr: 0.1 } }
fault_tolerance { max_restarts: 0 }
batch_size: 16
max_steps: 100000
epochs: 1000
SPEC
id=$(aq submit "$tmp/slow.textproto") || fail "slow submit"
running() { aq status "$id" --output json | grep -q '"state":"JOB_RUNNING"'; }
wait_until 20 running || fail "slow job never RUNNING: $(aq status "$id")"
progressing() { aq status "$id" --output json | grep -q '"committed_version":"[1-9]'; }
wait_until 10 progressing || fail "slow job reports no progress: $(aq status "$id" --output json)"
aq weights "$id" -o "$tmp/early.safetensors" >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "aq weights of a running job: exit $rc"
grep -q "job $id has no trained model (it is RUNNING)" "$tmp/err" || fail "aq weights of a running job: $(cat "$tmp/err")"
[ -e "$tmp/early.safetensors" ] || [ -e "$tmp/early.safetensors.part" ] && fail "aq weights of a running job left a file"
victim=$(aq status "$id" --output json | sed -E 's/.*"workers":\["([^"]+)"\].*/\1/')
case "$victim" in w1|w2) ;; *) fail "cannot tell the job's worker: $victim" ;; esac
eval "vpid=\$pid_$victim"
killed_at=$SECONDS
kill -KILL "$vpid"
is_dead() {
  aq workers --output json | sed 's/{"info":/\n/g' |
    grep "\"worker_id\":\"$victim\"" | grep -q '"state":"WORKER_DEAD"'
}
wait_until 10 is_dead || fail "$victim never DEAD: $(aq workers)"
took=$((SECONDS - killed_at))
[ "$took" -le 4 ] || fail "$victim took ${took}s to be declared DEAD (lease 1.5 s)"
failed() { aq status "$id" --output json | grep -q '"state":"JOB_FAILED"'; }
wait_until 5 failed || fail "job not FAILED: $(aq status "$id")"
aq status "$id" >"$tmp/status" 2>&1
grep -q "worker $victim (stage 0, replica 0) is DEAD: no heartbeat for" "$tmp/status" ||
  fail "failure reason: $(cat "$tmp/status")"

# A pipeline over two workers: one of them disappears mid-step. The job
# fails naming it; the survivor gives up on its peer within its deadline,
# returns to idle and runs the next job.
other=w1; [ "$victim" = w1 ] && other=w2
start_worker w3 3000
wait_until 15 healthy 2 || fail "w3 never HEALTHY: $(aq workers)"
sed 's/^epochs: 1000$/epochs: 1000\npipeline { workers: 2 schedule: "1f1b_stashed" }/' \
  "$tmp/slow.textproto" >"$tmp/pipe.textproto"
pid=$(aq submit "$tmp/pipe.textproto") || fail "pipeline submit"
prunning() { aq status "$pid" --output json | grep -q '"committed_version":"[1-9]'; }
wait_until 30 prunning || fail "pipeline never progressed: $(aq status "$pid")"
kill -KILL "$pid_w3"
pfailed() { aq status "$pid" --output json | grep -q '"state":"JOB_FAILED"'; }
wait_until 10 pfailed || fail "pipeline not FAILED after its worker died: $(aq status "$pid")"
aq status "$pid" >"$tmp/pstatus" 2>&1
# Either the lease expires first, or the survivor notices the closed
# connection first; both name the vanished worker and its stage.
grep -q -E "worker w3 \(stage [01], replica 0\) is DEAD|=w3 \(stage [01]\)" "$tmp/pstatus" ||
  fail "pipeline failure reason: $(cat "$tmp/pstatus")"
aq submit "$tmp/ok.textproto" --wait >"$tmp/after.out" 2>&1 ||
  fail "the survivor did not run the next job: $(cat "$tmp/after.out")"

# The coordinator's plan of the pipeline job: aq plan JOB (the argument is
# not a file).
aq plan "$pid" >"$tmp/plan.txt" 2>&1 || fail "aq plan $pid: exit $?: $(cat "$tmp/plan.txt")"
grep -q "^time per minibatch" "$tmp/plan.txt" || fail "aq plan $pid: $(cat "$tmp/plan.txt")"
[ "$(grep -c '^[01] ' "$tmp/plan.txt")" -eq 2 ] || fail "aq plan $pid has not 2 stages: $(cat "$tmp/plan.txt")"
aq plan "$pid" --output json >"$tmp/plan.json" 2>&1 || fail "aq plan $pid --output json: exit $?"
one_json <"$tmp/plan.json" || fail "aq plan --output json: $(cat "$tmp/plan.json")"
grep -q '"stages":\[' "$tmp/plan.json" || fail "aq plan --output json: $(cat "$tmp/plan.json")"
aq plan job-nope >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "aq plan of an unknown job: exit $rc"
grep -q "job 'job-nope' does not exist" "$tmp/err" || fail "aq plan job-nope: $(cat "$tmp/err")"
aq plan "$pid" --workers 2 >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "aq plan JOB --workers: exit $rc"
# A trace into a directory that does not exist fails naming the path.
aq trace "$pid" -o "$tmp/nonexistent/dir/t.json" >"$tmp/out" 2>"$tmp/err"; rc=$?
[ "$rc" -ne 0 ] || fail "trace into a missing directory: exit 0: $(cat "$tmp/out")"
grep -q "$tmp/nonexistent/dir/t.json" "$tmp/err" || fail "trace into a missing directory: $(cat "$tmp/err")"
aq trace "$pid" -o "$tmp/t.json" --output json >"$tmp/out" 2>"$tmp/err" ||
  fail "trace: $(cat "$tmp/err")"
one_json <"$tmp/out" || fail "trace --output json: $(cat "$tmp/out")"
one_json <"$tmp/t.json" || fail "the trace is not JSON: $(head -c 300 "$tmp/t.json")"

# A pipeline peer that hangs (SIGSTOP: its connections stay open, nothing
# moves). Its lease expires, the job FAILS, and the coordinator's StopJob
# aborts the survivors' waits: they are idle again long before their 60 s
# peer deadline and run the next pipeline job.
for w in w4 w5; do start_worker "$w" 60000; done
wait_until 15 healthy 3 || fail "w4, w5 never HEALTHY: $(aq workers)"
sed 's/^epochs: 1000$/epochs: 1000\npipeline { workers: 3 schedule: "1f1b_stashed" }/' \
  "$tmp/slow.textproto" >"$tmp/pipe3.textproto"
hid=$(aq submit "$tmp/pipe3.textproto") || fail "3-worker pipeline submit"
hrunning() { aq status "$hid" --output json | grep -q '"committed_version":"[1-9]'; }
wait_until 30 hrunning || fail "3-worker pipeline never progressed: $(aq status "$hid")"
kill -STOP "$pid_w5"
stopped_at=$SECONDS
hfailed() { aq status "$hid" --output json | grep -q '"state":"JOB_FAILED"'; }
wait_until 10 hfailed || fail "pipeline not FAILED after its worker hung: $(aq status "$hid")"
sed 's/^epochs: 2$/epochs: 2\npipeline { workers: 2 schedule: "1f1b_stashed" }/' \
  "$tmp/ok.textproto" >"$tmp/ok2.textproto"
timeout 30 "$AQ" submit "$tmp/ok2.textproto" --wait --coordinator "$addr" >"$tmp/after2.out" 2>&1 ||
  fail "survivors of a hung peer did not run the next job: $(cat "$tmp/after2.out")"
took=$((SECONDS - stopped_at))
[ "$took" -le 25 ] || fail "survivors of a hung peer took ${took}s to run the next job"
kill -KILL "$pid_w5"

# NCCL between stages needs GPU workers: on CPU workers the job fails
# saying so, and the workers stay usable.
sed 's/^epochs: 2$/epochs: 2\npipeline { workers: 2 schedule: "1f1b_stashed" transport: "nccl" }/' \
  "$tmp/ok.textproto" >"$tmp/nccl.textproto"
aq submit "$tmp/nccl.textproto" --wait >"$tmp/nccl.out" 2>&1 && fail "nccl on CPU workers succeeded"
grep -q "pipeline.transport=nccl needs every worker of the job on a GPU" "$tmp/nccl.out" ||
  fail "nccl on CPU workers: $(cat "$tmp/nccl.out")"

# Cancelling a running pipeline stops its workers at once too.
sed 's/^epochs: 1000$/epochs: 1000\npipeline { workers: 2 schedule: "1f1b_stashed" }/' \
  "$tmp/slow.textproto" >"$tmp/pipe2.textproto"
cid=$(aq submit "$tmp/pipe2.textproto") || fail "pipeline submit (cancel)"
crunning() { aq status "$cid" --output json | grep -q '"committed_version":"[1-9]'; }
wait_until 30 crunning || fail "pipeline to cancel never progressed: $(aq status "$cid")"
aq cancel "$cid" >/dev/null || fail "cancel of a running pipeline failed"
cancelled_at=$SECONDS
timeout 30 "$AQ" submit "$tmp/ok2.textproto" --wait --coordinator "$addr" >"$tmp/after3.out" 2>&1 ||
  fail "workers of a cancelled pipeline did not run the next job: $(cat "$tmp/after3.out")"
took=$((SECONDS - cancelled_at))
[ "$took" -le 20 ] || fail "workers of a cancelled pipeline took ${took}s to run the next job"
aq status "$cid" --output json | grep -q '"state":"JOB_CANCELLED"' ||
  fail "cancelled pipeline state: $(aq status "$cid")"

# The coordinator and the other worker are unharmed; SIGTERM exits 0.
eval "opid=\$pid_$other"
aq workers >/dev/null || fail "coordinator stopped answering"
kill -TERM "$opid"; wait "$opid"; rc=$?
[ "$rc" -eq 0 ] || fail "worker SIGTERM exit $rc"
left() { aq workers --output json | grep -q '"state":"WORKER_LEFT"'; }
wait_until 5 left || fail "$other not LEFT after SIGTERM: $(aq workers)"
aq status "$id" --output json >"$tmp/before-restart.json"
kill -TERM "$cpid"; wait "$cpid"; rc=$?
[ "$rc" -eq 0 ] || fail "coordinator SIGTERM exit $rc"

# A restarted coordinator (same --state_dir) still knows every job, with
# the status it ended with.
rm -f "$tmp/port"
"$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" --state_dir "$cstate" \
  --checkpoint_root "$tmp" >"$tmp/coordinator2.log" 2>&1 &
cpid=$!; pids+=("$cpid")
wait_until 10 test -s "$tmp/port" || fail "coordinator did not restart: $(cat "$tmp/coordinator2.log")"
addr="127.0.0.1:$(cat "$tmp/port")"
aq status "$id" --output json >"$tmp/after-restart.json" || fail "job $id forgotten after a restart"
cmp -s "$tmp/before-restart.json" "$tmp/after-restart.json" ||
  fail "job $id changed across a restart: $(cat "$tmp/after-restart.json")"
[ "$(aq jobs --output json | grep -o '"job_id"' | wc -l)" -ge 6 ] ||
  fail "jobs after a restart: $(aq jobs)"
# Trained models too.
aq weights "$okid" -o "$tmp/model2.safetensors" >/dev/null 2>"$tmp/err" ||
  fail "aq weights after a restart: $(cat "$tmp/err")"
cmp -s "$tmp/model.safetensors" "$tmp/model2.safetensors" || fail "the model changed across a restart"
kill -TERM "$cpid"; wait "$cpid"

if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed; logs:" >&2
  tail -n 20 "$tmp"/*.log >&2
  exit 1
fi
echo "all daemon checks passed"
