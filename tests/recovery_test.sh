#!/usr/bin/env bash
# Process-level test of automatic recovery after a lost worker, with the
# real daemons: a coordinator and three workers on ephemeral ports.
#  (a) A 2-stage 1f1b_flush pipeline checkpointing every 10 steps loses a
#      worker to SIGKILL mid-job while the third worker is idle: the job
#      SUCCEEDS after exactly one restart that names the killed worker (not
#      its peer), rolled back to a checkpoint at least as new as the one
#      committed before the kill, onto 2 workers (the spare among them); its
#      trained model equals, byte for byte, the model of the same job run
#      without interruption.
#  (resume) aq submit --resume DIR of one of (a)'s checkpoints with another
#      worker count (1) SUCCEEDS, with the uninterrupted job's model within
#      1e-5 (relative, per tensor), and aq verify-checkpoint accepts DIR.
#  (b) The same pipeline loses the worker of the other stage with no spare
#      left: the job is re-planned onto the one survivor and SUCCEEDS, its
#      status showing the restart with 1 worker, its model the uninterrupted
#      job's within 1e-5.
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
# Where process $1 is (for a worker that should be alive and is not
# answering): its state and, with gdb, its threads' stacks.
describe_process() {
  [ -d "/proc/$1" ] || { echo "process $1 is gone"; return; }
  grep '^State:' "/proc/$1/status"
  command -v gdb >/dev/null && timeout 20 gdb -p "$1" -batch -ex "thread apply all bt" 2>&1 | grep -E '^(Thread|#)'
}
declare -A wpid
for w in w1 w2 w3; do
  "$WORKER" --coordinator "$addr" --worker_id "$w" --listen 127.0.0.1:0 \
    --threads 1 --measure_gemm=false --peer_timeout_ms 3000 \
    --checkpoint_root "$tmp" >"$tmp/$w.log" 2>&1 &
  pids+=("$!"); wpid[$w]=$!
done
healthy() { [ "$(healthy_count)" -eq "$1" ]; }
wait_until 15 healthy 3 || { echo "workers never HEALTHY: $(aq workers)"; exit 1; }

# A job of 160 steps, ~35 ms each (long enough that a kill after v20 is
# mid-job even when a sanitizer build's polls are slow): the delay layer
# makes layers [0, 4) the slow stage, and the low bandwidth makes a
# pipeline (not data parallelism) the plan. Two microbatches whatever the worker count, so that the
# arithmetic of a step does not depend on the plan.
spec() {  # $1: workers
  cat <<SPEC
name: "recovery"
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
max_steps: 160
epochs: 100
seed: 11
pipeline { workers: $1 schedule: "1f1b_flush" microbatches: 2 bandwidth_bytes_per_s: 1e6 }
checkpoint { dir: "$tmp/ckpt" every_steps: 10 }
fault_tolerance { max_restarts: 3 }
SPEC
}
spec 2 >"$tmp/job2.textproto"
spec 1 >"$tmp/job1.textproto"

# Reads one field of the JSON document on stdin: $1 is a Python expression
# over `d`.
status_json() { aq status "$1" --output json 2>/dev/null; }
job_id_of() { sed -E 's/.*"job_id":"([^"]+)".*/\1/' "$1"; }
# Version of job $1's latest committed checkpoint (0 before the first).
ckpt_version() { status_json "$1" | json 'd.get("checkpoint_version", 0)'; }
# The worker of job $1's stage $2.
stage_worker() { status_json "$1" | json "d['stages'][$2]['workers'][0]"; }
state_of() { status_json "$1" | json 'd["state"]'; }
is_final() { case "$(state_of "$1")" in JOB_SUCCEEDED|JOB_FAILED|JOB_CANCELLED) return 0 ;; esac; return 1; }
at_least_ckpt() { [ "$(ckpt_version "$1")" -ge "$2" ]; }
# The state of worker $1 in the registry.
worker_state() { aq workers --output json | json "[w['state'] for w in d['workers'] if w['info']['worker_id'] == '$1']"; }
# How many workers a job's status shows running its stages.
running_on='sum(len(s["workers"]) for s in d["stages"])'

# Submits the 2-worker job, waits for its checkpoint v20 and SIGKILLs the
# worker of stage $1. Sets id, victim, peer, ckpt_before.
submit_and_kill() {
  id=$(aq submit "$tmp/job2.textproto" 2>"$tmp/submit.err") || { fail "submit: $(cat "$tmp/submit.err")"; return 1; }
  wait_until 30 at_least_ckpt "$id" 20 || { fail "$id: no checkpoint v20: $(aq status "$id")"; return 1; }
  victim=$(stage_worker "$id" "$1") peer=$(stage_worker "$id" $((1 - $1)))
  ckpt_before=$(ckpt_version "$id")
  [ "$(state_of "$id")" = JOB_RUNNING ] || { fail "$id not RUNNING before the kill: $(aq status "$id")"; return 1; }
  kill -KILL "${wpid[$victim]}"; wait "${wpid[$victim]}" 2>/dev/null; forget "${wpid[$victim]}"
  echo "killed $victim (stage $1 of $id, peer $peer) after checkpoint v$ckpt_before"
}

# Checks job $1 SUCCEEDED all 160 steps after one restart naming $victim
# and not $peer, onto $2 workers, from a checkpoint no older than
# $ckpt_before.
check_one_restart() {
  wait_until 60 is_final "$1" || fail "$1 never ended: $(aq status "$1")"
  aq status "$1" >"$tmp/status.$1" 2>&1
  grep -q "SUCCEEDED step 160/160" "$tmp/status.$1" || fail "$1 did not succeed: $(cat "$tmp/status.$1")"
  [ "$(grep -c '^restart ' "$tmp/status.$1")" -eq 1 ] || fail "$1: not one restart: $(cat "$tmp/status.$1")"
  local line; line=$(grep '^restart ' "$tmp/status.$1")
  echo "$line" | grep -Eq "^restart 1 at step [0-9]+: .*worker $victim\b" ||
    fail "$1: the restart does not name $victim: $line"
  echo "$line" | grep -q "\b$peer\b" && fail "$1: the restart names the peer $peer: $line"
  local want_workers="$2 workers"; [ "$2" -eq 1 ] && want_workers="1 worker"
  echo "$line" | grep -Eq "; rolled back to v[0-9]+, $want_workers\$" ||
    fail "$1: the restart is not onto $want_workers: $line"
  local back; back=$(echo "$line" | sed -E 's/.*rolled back to v([0-9]+).*/\1/')
  [ "$back" -ge "$ckpt_before" ] || fail "$1 rolled back to v$back, older than v$ckpt_before committed before the kill"
  status_json "$1" | json 'len(d.get("restarts", []))' | grep -qx 1 || fail "$1: restarts in JSON: $(status_json "$1")"
  # Only the killed worker was declared DEAD; its peer is alive and well.
  [ "$(worker_state "$victim")" = "['WORKER_DEAD']" ] || fail "$victim: $(worker_state "$victim"), not DEAD"
  [ "$(worker_state "$peer")" = "['WORKER_HEALTHY']" ] ||
    fail "the peer $peer: $(worker_state "$peer"), not HEALTHY; its process: $(describe_process "${wpid[$peer]}")"
  grep -q "job $1 attempt 1: first step after the restart committed" "$tmp/coordinator.log" ||
    fail "$1: the coordinator logged no first step after the restart"
}

# The reference: the job without interruption.
aq submit "$tmp/job2.textproto" --wait --output json >"$tmp/ref.json" 2>"$tmp/ref.err" ||
  fail "the reference job: $(cat "$tmp/ref.err")"
ref=$(job_id_of "$tmp/ref.json")
aq weights "$ref" -o "$tmp/ref.safetensors" >/dev/null 2>"$tmp/err" || fail "aq weights $ref: $(cat "$tmp/err")"
[ "$(status_json "$ref" | json 'len(d["stages"])')" = 2 ] || fail "the reference is not a 2-stage pipeline: $(aq plan "$ref")"

# Whether model $1 is the reference model, tensor for tensor, within
# relative error $2 (the L2 norm of the difference over the reference's,
# per tensor; 0: the same bits). Why not in $tmp/diff.
same_model() {
  python3 - "$tmp/ref.safetensors" "$1" "$2" <<'PY' >"$tmp/diff" 2>&1
import array, json, math, struct, sys
def tensors(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, t in header.items():
        assert t["dtype"] == "F32", (name, t["dtype"])
        values = array.array("f")
        values.frombytes(data[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]])
        out[name] = (t["shape"], values)
    return out
ref, got, tolerance = tensors(sys.argv[1]), tensors(sys.argv[2]), float(sys.argv[3])
bad = []
for name in sorted(set(ref) | set(got)):
    if name not in ref or name not in got or ref[name][0] != got[name][0]:
        bad.append(name + " (missing or another shape)")
        continue
    a, b = ref[name][1], got[name][1]
    if tolerance == 0:
        if a.tobytes() != b.tobytes():
            bad.append(name)
        continue
    norm = math.sqrt(sum(x * x for x in a)) or 1.0
    error = math.sqrt(sum((x - y) ** 2 for x, y in zip(a, b))) / norm
    if error > tolerance:
        bad.append("%s (relative error %.3g)" % (name, error))
if bad:
    sys.exit("tensors that differ: " + ", ".join(bad))
PY
}

# (a) A worker dies; the spare takes its place.
stage=$((RANDOM % 2))
submit_and_kill "$stage"
a=$id
spare=$(for w in w1 w2 w3; do [ "$w" != "$victim" ] && [ "$w" != "$peer" ] && echo "$w"; done)
check_one_restart "$a" 2
status_json "$a" | json '" ".join(w for s in d["stages"] for w in s["workers"])' | grep -qw "$spare" ||
  fail "$a: the spare $spare is not among the job's workers: $(status_json "$a")"
aq weights "$a" -o "$tmp/a.safetensors" >/dev/null 2>"$tmp/err" || fail "aq weights $a: $(cat "$tmp/err")"
cmp -s "$tmp/ref.safetensors" "$tmp/a.safetensors" || same_model "$tmp/a.safetensors" 0 ||
  fail "$a: the model after the restart differs from the uninterrupted job's: $(cat "$tmp/diff")"

# Resume from one of (a)'s checkpoints on one worker.
aq checkpoints "$a" --output json >"$tmp/ckpts.json" 2>"$tmp/err" || fail "aq checkpoints $a: $(cat "$tmp/err")"
dir=$(json 'd["checkpoints"][0]["dir"]' <"$tmp/ckpts.json")
from=$(json 'd["checkpoints"][0]["version"]' <"$tmp/ckpts.json")
"$AQ" verify-checkpoint "$dir" >"$tmp/verify.out" 2>&1 || fail "verify-checkpoint $dir: $(cat "$tmp/verify.out")"
grep -Eq "^checkpoint v$from of $a: 2 files, [0-9]+ bytes, 7 layers: OK\$" "$tmp/verify.out" ||
  fail "verify-checkpoint $dir: $(cat "$tmp/verify.out")"
aq submit "$tmp/job1.textproto" --resume "$dir" --wait --output json >"$tmp/resumed.json" 2>"$tmp/resumed.err" ||
  fail "resume of $dir on 1 worker: $(cat "$tmp/resumed.err")"
r=$(job_id_of "$tmp/resumed.json")
aq status "$r" >"$tmp/status.r" 2>&1
grep -q "SUCCEEDED step 160/160" "$tmp/status.r" || fail "the resumed job: $(cat "$tmp/status.r")"
grep -qF "resumed from: $dir" "$tmp/status.r" || fail "the resumed job shows no resume: $(cat "$tmp/status.r")"
grep -q '^restart ' "$tmp/status.r" && fail "the resumed job restarted: $(cat "$tmp/status.r")"
[ "$(status_json "$r" | json "$running_on")" = 1 ] || fail "the resumed job is not on 1 worker: $(status_json "$r")"
# On another number of stages a flush schedule's model is the reference's
# within 1e-5 (docs/operations.md, "Guarantees by schedule").
aq weights "$r" -o "$tmp/r.safetensors" >/dev/null 2>"$tmp/err" || fail "aq weights $r: $(cat "$tmp/err")"
same_model "$tmp/r.safetensors" 1e-5 || fail "the resumed job's model is not the reference's: $(cat "$tmp/diff")"

# (b) A worker dies with no spare: re-planned onto the survivor. The other
# stage than in (a), so that every run loses each stage once.
submit_and_kill $((1 - stage))
b=$id
check_one_restart "$b" 1
[ "$(status_json "$b" | json "$running_on")" = 1 ] || fail "$b is not on 1 worker after the restart: $(status_json "$b")"
aq weights "$b" -o "$tmp/b.safetensors" >/dev/null 2>"$tmp/err" || fail "aq weights $b: $(cat "$tmp/err")"
same_model "$tmp/b.safetensors" 1e-5 || fail "$b's model is not the reference's: $(cat "$tmp/diff")"

if [ "$fails" -gt 0 ]; then
  echo "coordinator log:"; tail -40 "$tmp/coordinator.log"
  echo "$fails failure(s)"; exit 1
fi
echo "PASS"
