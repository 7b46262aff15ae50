#!/usr/bin/env bash
# Process-level test: the coordinator dies (SIGKILL) five times during one
# job and is started again each time on the same address with the same
# --state_dir. The two workers train on through every outage and register
# again claiming their stages; the restarted coordinator takes the job back
# from its journal. The job SUCCEEDS with no restart (attempt 0: no step of
# training lost or redone), and the checkpoints it lists were committed
# once each, in order (strictly increasing versions, none twice).
# Bounded in time; everything is cleaned up.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

kills=5
steps=450  # ~40 ms each: ~19 s of training.
# Starts the coordinator on $1 (host:port) with log file $2; sets cpid.
start_coordinator() {
  rm -f "$tmp/port"
  "$COORDINATOR" --listen "$1" --port_file "$tmp/port" --state_dir "$tmp/cstate" \
    --heartbeat_interval_ms 100 --suspect_after_missed 3 --dead_after_ms 1500 \
    --checkpoint_root "$tmp" >"$2" 2>&1 &
  cpid=$!; pids+=("$cpid")
  wait_until 10 test -s "$tmp/port"
}
start_coordinator 127.0.0.1:0 "$tmp/coordinator-0.log" ||
  { cat "$tmp/coordinator-0.log"; exit 1; }
port=$(cat "$tmp/port")
addr="127.0.0.1:$port"
aq() { "$AQ" "$@" --coordinator "$addr"; }
for w in w1 w2; do
  "$WORKER" --coordinator "$addr" --worker_id "$w" --listen 127.0.0.1:0 \
    --threads 1 --measure_gemm=false --peer_timeout_ms 10000 \
    --checkpoint_root "$tmp" >"$tmp/$w.log" 2>&1 &
  pids+=("$!")
done
healthy() { [ "$(healthy_count)" -eq 2 ]; }
wait_until 15 healthy || { echo "workers never HEALTHY: $(aq workers)"; exit 1; }

cat >"$tmp/job.textproto" <<SPEC
name: "coordinator-restarts"
model {
  layers { flatten {} }
  layers { linear { in_features: 16 out_features: 64 } }
  layers { relu {} }
  layers { delay { forward_ms: 10 backward_ms: 10 } }
  layers { linear { in_features: 64 out_features: 64 } }
  layers { relu {} }
  layers { linear { in_features: 64 out_features: 4 } }
}
data { synthetic { sample_shape: [16] num_classes: 4 train_samples: 512 seed: 3 } }
optimizer { sgd { lr: 0.05 } }
batch_size: 32
max_steps: $steps
epochs: 1000
pipeline { workers: 2 schedule: "1f1b_flush" microbatches: 2 bandwidth_bytes_per_s: 1e6 }
checkpoint { dir: "$tmp/ckpt" every_steps: 5 keep_last: 1000 }
fault_tolerance { max_restarts: 3 }
SPEC

status_json() { aq status "$id" --output json 2>/dev/null; }
step() { status_json | json 'int(d.get("step", 0))' 2>/dev/null || echo -1; }
running_past() {  # RUNNING at a step past $1
  local s; s=$(status_json) || return 1
  [ "$(echo "$s" | json 'd["state"]')" = JOB_RUNNING ] &&
    [ "$(echo "$s" | json 'int(d.get("step", 0))')" -gt "$1" ]
}
# Both workers came back to coordinator log $1 claiming their stages.
both_back() { [ "$(grep -c "job $id: worker w[12] is back with stage [01]" "$1")" -eq 2 ]; }
finished() { status_json | grep -qE '"state":"JOB_(SUCCEEDED|FAILED|CANCELLED)"'; }

id=$(aq submit "$tmp/job.textproto" 2>"$tmp/err") || { echo "submit: $(cat "$tmp/err")"; exit 1; }
wait_until 30 running_past 0 || fail "$id never RUNNING: $(aq status "$id")"
killed=0 before=0
for k in $(seq "$kills"); do
  # Kill at a random point, at least one step after the previous restart
  # saw the job again (the coordinator took it back and reports flow).
  sleep "0.$((RANDOM % 5 + 1))"
  before=$(step)
  if [ "$before" -ge $((steps - 20)) ] || finished; then
    fail "the job is ending before kill $k (step $before of $steps): the kills are too slow"
    break
  fi
  kill -KILL "$cpid"; wait "$cpid" 2>/dev/null
  forget "$cpid"
  killed=$((killed + 1))
  sleep "0.$((RANDOM % 5 + 1))"  # Down for a while: the workers train on.
  start_coordinator "$addr" "$tmp/coordinator-$k.log" ||
    { fail "the coordinator did not restart on $addr: $(tail -5 "$tmp/coordinator-$k.log")"; break; }
  [ "$(cat "$tmp/port")" = "$port" ] || fail "restart $k serves on port $(cat "$tmp/port"), not $port"
  wait_until 20 running_past "$before" ||
    { fail "after restart $k the job is not RUNNING past step $before: $(aq status "$id")"; break; }
  grep -q "1 running taken back" "$tmp/coordinator-$k.log" ||
    fail "restart $k did not take the job back: $(head -3 "$tmp/coordinator-$k.log")"
  wait_until 10 both_back "$tmp/coordinator-$k.log" ||
    fail "restart $k: not both workers back with their stages: $(grep "is back" "$tmp/coordinator-$k.log")"
  echo "kill $k at step $before; running again at step $(step)"
done
[ "$killed" -eq "$kills" ] || fail "only $killed of $kills kills"

wait_until 60 finished || fail "$id never ended: $(aq status "$id")"
aq status "$id" >"$tmp/status" 2>&1
grep -q "SUCCEEDED step $steps/$steps" "$tmp/status" || fail "$id did not succeed: $(cat "$tmp/status")"
grep -q '^restart ' "$tmp/status" && fail "$id restarted: $(cat "$tmp/status")"
status_json >"$tmp/status.json"
[ "$(json 'd.get("attempt", 0)' <"$tmp/status.json")" = 0 ] || fail "$id is not on attempt 0: $(cat "$tmp/status.json")"
[ "$(json 'len(d.get("restarts", []))' <"$tmp/status.json")" = 0 ] || fail "$id has restarts: $(cat "$tmp/status.json")"
grep -h "restart .* from version" "$tmp"/coordinator-*.log && fail "a coordinator restarted $id"

# The committed checkpoints: strictly increasing, none twice, each a
# multiple of every_steps, and the latest no older than 20 steps before the
# end.
aq checkpoints "$id" --output json >"$tmp/ckpts.json" 2>"$tmp/err" || fail "aq checkpoints: $(cat "$tmp/err")"
versions=$(json '" ".join(str(c["version"]) for c in d.get("checkpoints", []))' <"$tmp/ckpts.json")
echo "committed checkpoints: $versions"
prev=0 n=0
for v in $versions; do
  [ "$v" -gt "$prev" ] || fail "checkpoint v$v listed after v$prev"
  [ $((v % 5)) -eq 0 ] || fail "checkpoint v$v is not a multiple of every_steps 5"
  prev=$v n=$((n + 1))
done
[ "$n" -ge 10 ] || fail "only $n checkpoints committed: $versions"
[ "$prev" -ge $((steps - 20)) ] || fail "the latest checkpoint is v$prev of $steps steps"
# No version was committed twice (each commit is logged once).
dups=$(grep -ho "job $id: checkpoint version [0-9]* committed" "$tmp"/coordinator-*.log | sort | uniq -d)
[ -z "$dups" ] || fail "checkpoints committed twice: $dups"
"$AQ" verify-checkpoint "$tmp/ckpt/$id/$(printf 'v%08d' "$prev")" >"$tmp/verify" 2>&1 ||
  fail "the latest checkpoint does not verify: $(cat "$tmp/verify")"
aq weights "$id" -o "$tmp/model.safetensors" >/dev/null 2>"$tmp/err" || fail "aq weights: $(cat "$tmp/err")"

if [ "$fails" -gt 0 ]; then
  for f in "$tmp"/coordinator-*.log; do echo "== $f"; tail -15 "$f"; done
  echo "$fails failure(s)"; exit 1
fi
echo "PASS"
