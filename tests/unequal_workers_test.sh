#!/usr/bin/env bash
# Process-level test of workers of unequal speed (issue 28): two worker
# daemons, one started with --slowdown 2. Each registers its speed probe;
# the coordinator plans the job with the slow worker at about half speed
# (aq plan JOB lists it), gives it the fewer layers (2 of 6 equal Delays,
# not 3), and the job runs to the end.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

"$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" --state_dir "$tmp/cstate" \
  >"$tmp/coordinator.log" 2>&1 &
pids+=("$!")
wait_until 10 test -s "$tmp/port" || { cat "$tmp/coordinator.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }
# One after the other, so that the probes do not share the cores.
for w in fast slow; do
  slowdown=1; [ "$w" = slow ] && slowdown=2
  "$WORKER" --coordinator "$addr" --worker_id "$w" --listen 127.0.0.1:0 \
    --threads 1 --slowdown "$slowdown" --peer_timeout_ms 20000 >"$tmp/$w.log" 2>&1 &
  pids+=("$!")
  wait_until 15 grep -qs "speed probe" "$tmp/$w.log" || { fail "$w: no probe: $(cat "$tmp/$w.log")"; exit 1; }
done
wait_until 15 eval '[ "$(healthy_count)" -eq 2 ]' || { fail "workers: $(aq workers)"; exit 1; }
grep -h "speed probe" "$tmp/fast.log" "$tmp/slow.log"

cat >"$tmp/job.textproto" <<'SPEC'
name: "unequal"
model {
  layers { flatten {} }
  layers { linear { in_features: 8 out_features: 4 } }
  layers { delay { forward_ms: 1 backward_ms: 1 } }
  layers { delay { forward_ms: 1 backward_ms: 1 } }
  layers { delay { forward_ms: 1 backward_ms: 1 } }
  layers { delay { forward_ms: 1 backward_ms: 1 } }
  layers { delay { forward_ms: 1 backward_ms: 1 } }
  layers { delay { forward_ms: 1 backward_ms: 1 } }
}
data { synthetic { sample_shape: [8] num_classes: 4 train_samples: 64 seed: 2 } }
optimizer { sgd { lr: 0.05 } }
batch_size: 8
max_steps: 20
pipeline { workers: 2 }
SPEC
# A fixed profile (the fastest worker's): the Delays 3 ms each way, the
# rest near nothing, so that the cut depends on the speeds alone.
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
id=$(aq submit "$tmp/job.textproto" --profile "$tmp/profile.json" 2>"$tmp/submit.err") ||
  { fail "submit: $(cat "$tmp/submit.err")"; exit 1; }
final() { case "$(aq status "$id" --output json | json 'd["state"]')" in JOB_SUCCEEDED|JOB_FAILED|JOB_CANCELLED) return 0 ;; esac; return 1; }
wait_until 90 final || fail "the job never ended: $(aq status "$id")"
aq status "$id" >"$tmp/status" 2>&1
grep -q "SUCCEEDED" "$tmp/status" || fail "the job did not succeed: $(cat "$tmp/status")"

aq plan "$id" >"$tmp/plan.txt" 2>&1 || fail "aq plan $id: $(cat "$tmp/plan.txt")"
cat "$tmp/plan.txt"
grep -Eq "^worker speeds by rank \(fastest 1\): 1\.00 0\.(4|5|6)[05]$" "$tmp/plan.txt" ||
  fail "the plan does not list the slow worker at about half speed"
aq plan "$id" --output json >"$tmp/plan.json" 2>&1 || fail "aq plan --output json"
# Rank 1 is the slow worker: its stage holds 2 of the Delays, the fast
# worker's the other 4 (equal workers: 3 and 3).
layers=$(json '",".join(str(s["end_layer"] - s["first_layer"]) for s in d["stages"])' <"$tmp/plan.json")
[ "$layers" = "6,2" ] || fail "layers per stage $layers, want 6,2 (the fast worker's 4 Delays after the flatten and linear)"
workers=$(aq status "$id" --output json | json '",".join(s["workers"][0] for s in d["stages"])')
[ "$workers" = "fast,slow" ] || fail "stage workers $workers, want fast,slow"

[ "$fails" -eq 0 ] && echo "unequal_workers_test: passed"
exit $((fails > 0))
