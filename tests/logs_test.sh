#!/usr/bin/env bash
# Process-level test of logs and traces that survive (issue 15): a
# coordinator and two workers run a short 2-stage pipeline job. `aq logs
# --follow`, started while the job runs, exits 0 when it SUCCEEDS; `aq logs`
# shows lines from both workers' stages and the coordinator's own events;
# the Chrome trace has a flow start ("s") and finish ("f") for every
# transfer. Then the coordinator is SIGKILLed and restarted on the same
# address and --state_dir: `aq logs` and `aq trace` answer with the same
# content as before. Loopback without TLS (the daemons' security is tested
# elsewhere). Bounded in time; everything is cleaned up.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"
PY=/usr/bin/python3

start_coordinator() {  # $1 address, $2 log file; sets cpid
  rm -f "$tmp/port"
  "$COORDINATOR" --listen "$1" --port_file "$tmp/port" --state_dir "$tmp/cstate" \
    --heartbeat_interval_ms 100 --suspect_after_missed 3 --dead_after_ms 1500 \
    >"$2" 2>&1 &
  cpid=$!; pids+=("$cpid")
  wait_until 10 test -s "$tmp/port"
}
start_coordinator 127.0.0.1:0 "$tmp/coordinator-0.log" ||
  { cat "$tmp/coordinator-0.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }
for w in w1 w2; do
  "$WORKER" --coordinator "$addr" --worker_id "$w" --listen 127.0.0.1:0 \
    --threads 1 --measure_gemm=false --peer_timeout_ms 10000 >"$tmp/$w.log" 2>&1 &
  pids+=("$!")
done
healthy() { [ "$(healthy_count)" -eq 2 ]; }
wait_until 15 healthy || { echo "workers never HEALTHY: $(aq workers)"; exit 1; }

cat >"$tmp/job.textproto" <<SPEC
name: "logs"
model {
  layers { flatten {} }
  layers { linear { in_features: 16 out_features: 64 } }
  layers { relu {} }
  layers { delay { forward_ms: 10 backward_ms: 10 } }
  layers { linear { in_features: 64 out_features: 64 } }
  layers { relu {} }
  layers { linear { in_features: 64 out_features: 4 } }
}
data { synthetic { sample_shape: [16] num_classes: 4 train_samples: 256 seed: 3 } }
optimizer { sgd { lr: 0.05 } }
batch_size: 32
max_steps: 100
epochs: 1000
pipeline { workers: 2 schedule: "1f1b_flush" microbatches: 2 bandwidth_bytes_per_s: 1e6 }
SPEC

id=$(aq submit "$tmp/job.textproto" 2>"$tmp/err") || { echo "submit: $(cat "$tmp/err")"; exit 1; }
# Follow from the start, while the job runs.
aq logs "$id" --follow >"$tmp/follow.txt" 2>"$tmp/follow.err" &
follow=$!; pids+=("$follow")
ended() { ! kill -0 "$follow" 2>/dev/null; }
wait_until 90 ended || fail "aq logs --follow did not end with the job: $(aq status "$id")"
wait "$follow"; rc=$?
forget "$follow"
[ "$rc" -eq 0 ] || fail "aq logs --follow exited $rc: $(cat "$tmp/follow.err")"
aq status "$id" | grep -q SUCCEEDED || fail "$id did not succeed: $(aq status "$id")"

aq logs "$id" >"$tmp/logs-1.txt" 2>"$tmp/err" || fail "aq logs: $(cat "$tmp/err")"
echo "aq logs: $(wc -l <"$tmp/logs-1.txt") lines"
head -5 "$tmp/logs-1.txt"
grep -q " w[12] s0: job $id: stage 0 replica 0 (attempt 0) starting" "$tmp/logs-1.txt" ||
  fail "no line from stage 0's worker"
grep -q " w[12] s1: job $id: stage 1 replica 0 (attempt 0) starting" "$tmp/logs-1.txt" ||
  fail "no line from stage 1's worker"
grep -q " info coordinator -: job RUNNING" "$tmp/logs-1.txt" || fail "no coordinator RUNNING line"
grep -q " info coordinator -: job SUCCEEDED" "$tmp/logs-1.txt" || fail "no coordinator SUCCEEDED line"
grep -q "job SUCCEEDED" "$tmp/follow.txt" || fail "the follow did not print the end"
# The follow printed what a later read prints (it ends after the last line).
cmp -s "$tmp/follow.txt" "$tmp/logs-1.txt" || fail "follow and read differ: $(diff "$tmp/follow.txt" "$tmp/logs-1.txt" | head)"
aq logs "$id" --stage 1 >"$tmp/stage1.txt" 2>&1 || fail "aq logs --stage 1"
grep -qv " s1: " "$tmp/stage1.txt" && fail "--stage 1 printed other stages: $(grep -v ' s1: ' "$tmp/stage1.txt" | head -3)"
[ -s "$tmp/stage1.txt" ] || fail "--stage 1 printed nothing"

aq trace "$id" -o "$tmp/trace-1.json" --svg "$tmp/trace-1.svg" >/dev/null 2>"$tmp/err" ||
  fail "aq trace: $(cat "$tmp/err")"
check_flows() {  # $1: Chrome trace JSON
  $PY - "$1" <<'PY'
import json, sys, collections
events = json.load(open(sys.argv[1]))["traceEvents"]
s = collections.Counter(e["id"] for e in events if e.get("ph") == "s")
f = collections.Counter(e["id"] for e in events if e.get("ph") == "f")
assert s and s == f, (len(s), len(f))
assert all(n == 1 for n in s.values())
assert all(e.get("bp") == "e" for e in events if e.get("ph") == "f")
print(f"{len(s)} flow pairs")
PY
}
check_flows "$tmp/trace-1.json" || fail "the trace's flows do not pair"
grep -q 'class="tick"' "$tmp/trace-1.svg" || fail "the SVG has no time axis"

# The coordinator dies and comes back on the same address and state.
kill -KILL "$cpid"; wait "$cpid" 2>/dev/null; forget "$cpid"
start_coordinator "$addr" "$tmp/coordinator-1.log" ||
  { fail "no restart: $(tail -5 "$tmp/coordinator-1.log")"; exit 1; }
aq logs "$id" >"$tmp/logs-2.txt" 2>"$tmp/err" || fail "aq logs after the restart: $(cat "$tmp/err")"
cmp -s "$tmp/logs-1.txt" "$tmp/logs-2.txt" ||
  fail "the log changed across the restart: $(diff "$tmp/logs-1.txt" "$tmp/logs-2.txt" | head)"
aq trace "$id" -o "$tmp/trace-2.json" >/dev/null 2>"$tmp/err" || fail "aq trace after the restart: $(cat "$tmp/err")"
cmp -s "$tmp/trace-1.json" "$tmp/trace-2.json" || fail "the trace changed across the restart"
aq logs "$id" --follow >/dev/null 2>&1 || fail "a follow of the SUCCEEDED job after the restart did not exit 0"

if [ "$fails" -gt 0 ]; then
  for f in "$tmp"/coordinator-*.log; do echo "== $f"; tail -15 "$f"; done
  echo "$fails failure(s)"; exit 1
fi
echo "PASS"
