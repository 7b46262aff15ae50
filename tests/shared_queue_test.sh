#!/usr/bin/env bash
# Process-level test of the queue as a shared service (issue 25) with the
# real daemons: two jobs that each need both workers both succeed, the
# second after waiting in PENDING longer than the 60 s that once failed it
# (no deadline by default), its status saying its place and what it waits
# for; priorities order the queue (aq queue), and a job of higher priority
# starts before an older one of lower priority; a job needing more workers
# than are registered is refused at submit naming both counts; --set
# reaches nested fields of aq submit's and aq train-local's spec, and a bad
# path is named.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

"$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" \
  --heartbeat_interval_ms 200 --dead_after_ms 2000 \
  --checkpoint_root "$tmp" >"$tmp/coordinator.log" 2>&1 &
pids+=("$!")
SECONDS=0
wait_until 10 test -s "$tmp/port" || { cat "$tmp/coordinator.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }
for w in q1 q2; do
  "$WORKER" --coordinator "$addr" --worker_id "$w" --listen 127.0.0.1:0 \
    --threads 1 --measure_gemm=false --checkpoint_root "$tmp" >"$tmp/$w.log" 2>&1 &
  pids+=("$!")
done
wait_until 20 eval '[ "$(healthy_count)" -eq 2 ]' || { fail "workers: $(aq workers)"; exit 1; }

# A job of MAX_STEPS steps of 2 x 40 ms on both workers (about 70 s).
cat >"$tmp/job.textproto" <<'SPEC'
name: "job"
model {
  layers { flatten {} }
  layers { delay { forward_ms: 20 backward_ms: 20 } }
  layers { linear { in_features: 8 out_features: 8 } }
  layers { delay { forward_ms: 20 backward_ms: 20 } }
  layers { linear { in_features: 8 out_features: 2 } }
}
data { synthetic { sample_shape: [8] num_classes: 2 train_samples: 64 seed: 1 } }
optimizer { sgd { lr: 0.1 } }
batch_size: 16
max_steps: 4
pipeline { workers: 2 schedule: "1f1b_flush" }
SPEC
submit() { aq submit "$tmp/job.textproto" "$@" 2>>"$tmp/submit.err"; }
long=$(submit --name long --set max_steps=1150) || fail "long: $(cat "$tmp/submit.err")"
second=$(submit --name second --set max_steps=6) || fail "second: $(cat "$tmp/submit.err")"
running() { aq status "$long" | grep -q RUNNING; }
wait_until 30 running || fail "the long job: $(aq status "$long")"
aq status "$second" | grep -q "PENDING #1 in the queue: needs 2 workers, 0 idle" ||
  fail "the second job's place: $(aq status "$second")"

# Priorities: urgent (5) ahead of second (0) ahead of low (-1), whatever
# the order of submission.
low=$(submit --name low --set pipeline.workers=1 --set max_steps=4 --priority -1) ||
  fail "low: $(cat "$tmp/submit.err")"
urgent=$(submit --name urgent --set pipeline.workers=1 --set max_steps=4 --priority 5) ||
  fail "urgent: $(cat "$tmp/submit.err")"
aq queue >"$tmp/queue.out" || fail "aq queue"
order=$(awk 'NR > 1 {print $3}' "$tmp/queue.out" | tr '\n' ' ')
[ "$order" = "urgent second low " ] || fail "the queue's order: $(cat "$tmp/queue.out")"
grep -q "^1 .*urgent .* 5 .*needs 1 worker, 0 idle" "$tmp/queue.out" ||
  fail "aq queue's row: $(cat "$tmp/queue.out")"
aq queue --output json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert [j["name"] for j in d["jobs"]] == ["urgent", "second", "low"], d' ||
  fail "aq queue --output json"

# More workers than are registered: refused at submit, once the registry
# has had time to fill (--dead_after_ms and 5 s).
sleep $((8 - SECONDS > 0 ? 8 - SECONDS : 0))
aq submit "$tmp/job.textproto" --workers 3 >"$tmp/three.out" 2>&1 &&
  fail "a 3-worker job on 2 workers was accepted"
grep -q "the job needs 3 workers and 2 are registered" "$tmp/three.out" ||
  fail "the 3-worker job's refusal: $(cat "$tmp/three.out")"
aq submit "$tmp/job.textproto" --set pipeline.wrkers=1 >"$tmp/bad.out" 2>&1 &&
  fail "a bad --set path was accepted"
grep -q "\-\-set pipeline.wrkers: PipelineSpec has no field 'wrkers'" "$tmp/bad.out" ||
  fail "the bad --set path: $(cat "$tmp/bad.out")"

# Everything runs to its end; the second job waited over 60 s.
done_all() {
  for j in "$long" "$second" "$low" "$urgent"; do
    aq status "$j" | grep -qE "SUCCEEDED|FAILED|CANCELLED" || return 1
  done
}
wait_until 240 done_all || fail "the jobs did not end: $(aq jobs)"
for j in long second low urgent; do
  aq status "${!j}" --output json >"$tmp/$j.json"
done
python3 - "$tmp" <<'PY' || fail "the jobs' results"
import json, sys
d = {n: json.load(open(f"{sys.argv[1]}/{n}.json")) for n in ("long", "second", "low", "urgent")}
for n, j in d.items():
    assert j["state"] == "JOB_SUCCEEDED", (n, j.get("state"), j.get("reason"))
waited = (int(d["second"]["started_ms"]) - int(d["second"]["submitted_ms"])) / 1000
print(f"second job: waited {waited:.1f} s in PENDING, then {d['second']['step']}/{d['second']['total_steps']}")
assert waited > 60, waited
start = {n: int(j["started_ms"]) for n, j in d.items()}
assert start["urgent"] <= start["second"] <= start["low"], start
PY

# --set in train-local reaches nested fields: 48 samples, one epoch of 16.
"$AQ" train-local "$tmp/job.textproto" --set data.synthetic.train_samples=48 \
  --set max_steps=0 --set epochs=1 --output json >"$tmp/local.json" 2>"$tmp/local.err" ||
  fail "train-local --set: $(cat "$tmp/local.err")"
grep -q '"steps":3,' "$tmp/local.json" || fail "train-local --set: $(cat "$tmp/local.json")"

[ "$fails" -eq 0 ] && echo "shared_queue_test: passed"
exit $((fails > 0))
