#!/usr/bin/env bash
# Process-level test: a gpipe job with pipeline.microbatches unset and a
# batch of 9 on 3 worker daemons (3 microbatches) loses a worker with no
# spare; re-planned onto the 2 survivors it keeps training (microbatches:
# the smallest divisor of 9 that is at least 2, 3) and SUCCEEDS, instead of
# failing on "pipeline.microbatches=2 does not divide batch_size=9", a
# number the user never set (issue 23).
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

"$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" --state_dir "$tmp/cstate" \
  --heartbeat_interval_ms 100 --suspect_after_missed 3 --dead_after_ms 1500 \
  >"$tmp/coordinator.log" 2>&1 &
pids+=("$!")
wait_until 10 test -s "$tmp/port" || { cat "$tmp/coordinator.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }
declare -A wpid
for w in r1 r2 r3; do
  "$WORKER" --coordinator "$addr" --worker_id "$w" --listen 127.0.0.1:0 \
    --threads 1 --measure_gemm=false --peer_timeout_ms 3000 >"$tmp/$w.log" 2>&1 &
  pids+=("$!"); wpid[$w]=$!
done
wait_until 15 eval '[ "$(healthy_count)" -eq 3 ]' || { fail "workers: $(aq workers)"; exit 1; }

cat >"$tmp/job.textproto" <<'SPEC'
name: "replan"
model {
  layers { flatten {} }
  layers { linear { in_features: 8 out_features: 32 } }
  layers { delay { forward_ms: 3 backward_ms: 3 } }
  layers { linear { in_features: 32 out_features: 32 } }
  layers { delay { forward_ms: 3 backward_ms: 3 } }
  layers { linear { in_features: 32 out_features: 4 } }
  layers { delay { forward_ms: 3 backward_ms: 3 } }
}
data { synthetic { sample_shape: [8] num_classes: 4 train_samples: 900 seed: 2 } }
optimizer { sgd { lr: 0.05 } }
batch_size: 9
max_steps: 150
seed: 5
pipeline { workers: 3 schedule: "gpipe" bandwidth_bytes_per_s: 1e6 }
fault_tolerance { max_restarts: 2 }
SPEC
# The plan from a fixed profile (the Delays' 3 ms, the Linears' near
# nothing): a measured one, under load, sometimes tips the planner to 2
# stages, one replicated (three Delays split evenly either way).
"$AQ" profile "$tmp/job.textproto" --threads 1 -o "$tmp/measured.json" >/dev/null 2>&1 ||
  { fail "aq profile"; exit 1; }
python3 - "$tmp/measured.json" "$tmp/profile.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for n in d["nodes"]:
    delay = n["description"].startswith("delay")
    n["forwardMs"] = 3.0 if delay else 0.005
    n["backwardMs"] = 3.0 if delay else 0.01
json.dump(d, open(sys.argv[2], "w"))
PY
id=$(aq submit "$tmp/job.textproto" --profile "$tmp/profile.json" 2>"$tmp/submit.err") || { fail "submit: $(cat "$tmp/submit.err")"; exit 1; }
stages() { aq status "$id" --output json | json 'len(d.get("stages", []))'; }
step_of() { aq status "$id" --output json | json 'int(d.get("step", 0))'; }
wait_until 20 eval '[ "$(stages)" -eq 3 ] && [ "$(step_of)" -ge 10 ]' ||
  { fail "not running on 3 stages: $(aq status "$id")"; exit 1; }
victim=$(aq status "$id" --output json | json 'd["stages"][1]["workers"][0]')
kill -KILL "${wpid[$victim]}"; wait "${wpid[$victim]}" 2>/dev/null; forget "${wpid[$victim]}"
echo "killed $victim (stage 1) at step $(step_of)"
final() { case "$(aq status "$id" --output json | json 'd["state"]')" in JOB_SUCCEEDED|JOB_FAILED|JOB_CANCELLED) return 0 ;; esac; return 1; }
wait_until 60 final || fail "the job never ended: $(aq status "$id")"
aq status "$id" >"$tmp/status" 2>&1
grep -q "SUCCEEDED step 150/150" "$tmp/status" || fail "the job did not succeed: $(cat "$tmp/status")"
grep -Eq "^restart 1 .*worker $victim\b.*, 2 workers\$" "$tmp/status" ||
  fail "no restart onto 2 workers naming $victim: $(cat "$tmp/status")"
grep -q "does not divide" "$tmp/status" && fail "a microbatch error: $(cat "$tmp/status")"

[ "$fails" -eq 0 ] && echo "replan_microbatches_test: passed"
exit $((fails > 0))
