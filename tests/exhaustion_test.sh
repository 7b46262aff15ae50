#!/usr/bin/env bash
# Issue 14's exhaustion attempts against the real daemons while a pipeline
# job trains (docs/benchmarks.md, "Exhaustion"). A coordinator with TLS and
# bearer tokens (deploy/tls/make-dev-ca.sh), three workers (two train a
# 2-stage 1F1B pipeline, one is spare), and tests/hostile_client making, as
# a user (mallory), as 500 other worker credentials and as one of the
# job's own workers (a compromised host):
#   - a job asking for 100,000 workers that waits a week, then a 1-worker
#     job, which must start on the spare worker (no head-of-line blocking);
#   - 3,000 registrations with a 4 KB field each (refused);
#   - 750 jobs with 100 KB names (refused);
#   - 1,500 store values of 1 MiB into the job's keys, then to the brim
#     (capped by the store's byte limit);
#   - 150 waiting StoreGet and 150 WatchJob at once (at most
#     --max_waiting_calls wait; the others are refused, and the server's
#     threads do not stay pinned);
#   - StoreAdd past INT64_MAX (refused, not wrapped) and forged progress:
#     for another worker, another stage, a wrong incarnation, step 2^63-1,
#     utilisation -inf (all refused).
# Throughout, `aq workers` and `aq jobs` must answer (exit 0) and the
# coordinator's thread count is sampled; at the end the pipeline job must
# have SUCCEEDED with every step, the coordinator must be alive, its peak
# RSS (VmHWM) under $max_rss_kb and its peak thread count under
# $max_threads.
#
# Arguments: aq coordinator worker make-dev-ca.sh hostile_client
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3" MAKE_CA="$4" HOSTILE="$5"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

# Bounds, from measurement with margin (docs/benchmarks.md, "Exhaustion"):
# the peaks measured were 364-404 MiB (the store's 256 MiB cap full, plus
# the floods in flight) and 85-201 threads (during the burst of 300
# waiting calls, before the refused ones return: gRPC's synchronous server
# starts a thread per call in flight, up to --max_server_threads, 512 by
# default, so this peak follows the attacker's concurrency; 400 is above
# the ~20 threads before plus one per call of the burst).
max_rss_kb=$((1024 * 1024))
# Under the sanitizer configurations (.bazelrc sets their options for
# tests) memory grows by their shadow memory and quarantines.
if [ -n "${ASAN_OPTIONS:-}${TSAN_OPTIONS:-}" ]; then max_rss_kb=$((3 * 1024 * 1024)); fi
max_threads=400
# While the waits hold: the coordinator's threads before the attacks, plus
# one per waiting call (the default --max_waiting_calls, 64), plus slack
# for the pollers and the other calls in flight.
max_waiting_calls=64
wait_slack=24

# Credentials: 3 workers, 2 users, and 500 more worker credentials that
# no daemon holds (the attacker's). make-dev-ca.sh runs openssl once per
# token, so the attacker's tokens are cut from one random draw.
ca="$tmp/ca"
"$MAKE_CA" "$ca" --workers 3 --users admin,mallory >/dev/null || { echo "make-dev-ca failed"; exit 1; }
openssl rand -hex $((32 * 500)) | fold -w 64 |
  awk '{ printf "%s worker attacker-%d\n", $1, NR - 1 }' >>"$ca/tokens"

"$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" --state_dir "$tmp/state" \
  --tls_ca "$ca/ca.pem" --tls_cert "$ca/coordinator.pem" --tls_key "$ca/coordinator.key" \
  --tokens_file "$ca/tokens" >"$tmp/coordinator.log" 2>&1 &
cpid=$!; pids+=("$cpid")
wait_until 20 test -s "$tmp/port" || { echo "coordinator did not start"; cat "$tmp/coordinator.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { AQ_TLS_CA="$ca/ca.pem" AQ_TOKEN_FILE="$ca/token.admin" "$AQ" "$@" --coordinator "$addr"; }
hostile() { "$HOSTILE" --coordinator "$addr" --tls_ca "$ca/ca.pem" "$@"; }
as_user=(--token_file "$ca/token.mallory")
worker_tls=(--tls_cert "$ca/worker.pem" --tls_key "$ca/worker.key")
for i in 0 1 2; do
  "$WORKER" --coordinator "$addr" --worker_id "worker-$i" --threads 1 --measure_gemm=false \
    --tls_ca "$ca/ca.pem" "${worker_tls[@]}" --token_file "$ca/token.worker-$i" \
    >"$tmp/worker-$i.log" 2>&1 &
  pids+=("$!")
done
all_healthy() { [ "$(healthy_count)" -eq 3 ]; }
wait_until 30 all_healthy || { echo "workers not HEALTHY: $(aq workers)"; exit 1; }

# The pipeline job: an MLP with a 1 ms Delay (sleep) in each pass of each
# stage, so that its 5,000 steps take at least 40 s however fast the
# machine (4 microbatches x 2 ms a step), longer than the attacks, whose
# waits alone take 12 s.
cat >"$tmp/pipeline.textproto" <<'SPEC'
name: "under-attack"
model { layers { linear { in_features: 64 out_features: 256 } }
  layers { relu {} } layers { delay { forward_ms: 1 backward_ms: 1 } }
  layers { linear { in_features: 256 out_features: 10 } }
  layers { delay { forward_ms: 1 backward_ms: 1 } } }
data { synthetic { sample_shape: [64] num_classes: 10 train_samples: 16000 test_samples: 64 seed: 3 } }
optimizer { sgd { lr: 0.05 } }
batch_size: 16
max_steps: 5000
pipeline { workers: 2 schedule: "1f1b_flush" microbatches: 4 }
SPEC
aq submit "$tmp/pipeline.textproto" --output json >"$tmp/submit.json" 2>"$tmp/submit.err" ||
  { echo "submit failed: $(cat "$tmp/submit.err")"; exit 1; }
job=$(json 'd["job_id"]' <"$tmp/submit.json")
status() { aq status "$1" --output json 2>/dev/null | json "$2"; }
job_running() { [ "$(status "$job" 'd["state"]')" = JOB_RUNNING ]; }
job_final() {
  case "$(status "$job" 'd["state"]')" in JOB_RUNNING | JOB_PLANNING | JOB_PENDING) false ;; *) true ;; esac
}
wait_until 60 job_running ||
  { echo "pipeline job never RUNNING: $(aq status "$job")"; exit 1; }
# The compromised worker: the job's stage-0 worker.
insider=$(status "$job" 'd["stages"][0]["workers"][0]')
as_insider=("${worker_tls[@]}" --token_file "$ca/token.$insider" --worker_id "$insider")
threads_now() { awk '/^Threads:/ { print $2 }' "/proc/$cpid/status"; }
threads_before=$(threads_now)
echo "pipeline job $job on $(status "$job" '[s["workers"] for s in d["stages"]]'); coordinator threads $threads_before"

# Throughout: aq workers and aq jobs every half second (failures counted),
# and the coordinator's thread count every 50 ms (the peak kept).
monitor() {
  while [ ! -e "$tmp/stop" ]; do
    for cmd in workers jobs; do
      if aq "$cmd" --output json >/dev/null 2>"$tmp/monitor.err"; then
        echo ok >>"$tmp/monitor.$cmd"
      else
        echo "aq $cmd: exit $?: $(head -c 300 "$tmp/monitor.err")" >>"$tmp/monitor.fail"
      fi
    done
    sleep 0.5
  done
}
sample_threads() {
  local peak=0 key value rest
  while [ ! -e "$tmp/stop" ] && [ -r "/proc/$cpid/status" ]; do
    while read -r key value rest; do
      [ "$key" = Threads: ] || continue
      [ "$value" -gt "$peak" ] && { peak=$value; echo "$peak" >"$tmp/threads.peak"; }
      break
    done <"/proc/$cpid/status"
    sleep 0.05
  done
}
monitor & pids+=("$!")
sample_threads & pids+=("$!")

# Runs attack $1 with the rest as its flags; its JSON line goes to
# $tmp/$1.json (and the log). Returns 1 when the attack did not run (the
# failure is counted here in the foreground; run in the background, the
# caller counts it from `wait`). `result NAME EXPR` evaluates EXPR over it.
run_attack() {
  local name="$1"; shift
  if ! hostile --attack "$name" "$@" >"$tmp/$name.json" 2>"$tmp/$name.err"; then
    fail "attack $name did not run: $(cat "$tmp/$name.err")"
    return 1
  fi
  cat "$tmp/$name.json"
}
# Waits for the background attacks named by the pairs NAME PID; a failure
# of each that did not run is counted here (the subshell's count is lost).
wait_attacks() {
  while [ $# -ge 2 ]; do
    wait "$2" || fail "attack $1 did not run: $(cat "$tmp/$1.err" 2>/dev/null)"
    shift 2
  done
}
result() { json "$2" <"$tmp/$1.json"; }
# Fails unless attack $1's status codes are all among the rest.
codes_among() {
  local name="$1"; shift
  local allowed
  allowed=$(printf '"%s",' "$@")
  [ "$(result "$name" "set(d['codes']) <= {${allowed}}")" = True ] ||
    fail "$name: codes $(result "$name" 'd["codes"]'), expected only $*"
}

# A job no cluster can serve, then a 1-worker job: the second starts on
# the spare worker while the first waits (no head-of-line blocking).
attack_queue() {
  run_attack huge_job "${as_user[@]}" --wait_ms 604800000
  huge=$(result huge_job 'd["job_id"]')
  [ -n "$huge" ] || echo "note: the 100,000-worker job was refused at submission: $(result huge_job 'd["first_refusal"]')"
  cat >"$tmp/small.textproto" <<'SPEC'
name: "after-huge"
model { layers { linear { in_features: 8 out_features: 2 } } }
data { synthetic { sample_shape: [8] num_classes: 2 train_samples: 256 seed: 1 } }
optimizer { sgd { lr: 0.1 } }
batch_size: 16
max_steps: 20
SPEC
  timeout 60 "$AQ" submit "$tmp/small.textproto" --wait --coordinator "$addr" --tls_ca "$ca/ca.pem" \
    --token_file "$ca/token.admin" >"$tmp/small.out" 2>&1 ||
    fail "the 1-worker job submitted after the 100,000-worker one: $(tail -3 "$tmp/small.out")"
  grep -q "SUCCEEDED step 20/20" "$tmp/small.out" || fail "1-worker job: $(tail -3 "$tmp/small.out")"
  if [ -n "$huge" ]; then
    [ "$(status "$huge" 'd["state"]')" = JOB_PENDING ] || fail "100,000-worker job: $(aq status "$huge")"
  fi
}

# Registrations with 4 KB fields, jobs with 100 KB names and the store
# flood, at once.
attack_floods() {
  local floods=()
  run_attack fat_registrations --count 3000 "${worker_tls[@]}" --tokens_file "$ca/tokens" \
    --identities attacker- & floods+=(fat_registrations "$!")
  run_attack long_names --count 750 "${as_user[@]}" & floods+=(long_names "$!")
  run_attack store_flood --count 1500 "${as_insider[@]}" --job "$job" & floods+=(store_flood "$!")
  wait_attacks "${floods[@]}"
  [ "$(result fat_registrations 'd["ok"]')" = 0 ] || fail "fat registrations accepted: $(cat "$tmp/fat_registrations.json")"
  codes_among fat_registrations INVALID_ARGUMENT PERMISSION_DENIED
  aq workers --output json | grep -q attacker- && fail "aq workers lists an attacker's worker"
  [ "$(result long_names 'd["ok"]')" = 0 ] || fail "100 KB job names accepted: $(cat "$tmp/long_names.json")"
  codes_among long_names INVALID_ARGUMENT
  codes_among store_flood OK RESOURCE_EXHAUSTED
  [ "$(result store_flood '(d["mib_values_stored"] << 20) + d["topped_up_bytes"] <= 256 << 20')" = True ] ||
    fail "the store took more than its 256 MiB: $(cat "$tmp/store_flood.json")"
  [ "$(result store_flood 'd["codes"].get("RESOURCE_EXHAUSTED", 0) > 0')" = True ] ||
    fail "the store flood was never capped: $(cat "$tmp/store_flood.json")"
}

# The coordinator's thread count every 50 ms, as "MILLISECONDS THREADS"
# lines in $1, until $tmp/stop.$2 appears.
sample_threads_to() {
  local key value rest
  while [ ! -e "$tmp/stop.$2" ] && [ -r "/proc/$cpid/status" ]; do
    while read -r key value rest; do
      [ "$key" = Threads: ] && { echo "$(date +%s%3N) $value" >>"$1"; break; }
    done <"/proc/$cpid/status"
    sleep 0.05
  done
}

# 150 StoreGet waits and 150 WatchJob at once, each asking for 12 s: at
# most --max_waiting_calls wait, the others are refused at once, and
# while the waits hold the coordinator has one thread per waiting call
# (not one per call made). The thread count is sampled throughout, and
# bounded over the whole of the hold: from 6 s after the attacks started
# (the refused calls long answered) to 2 s before the last wait ended.
attack_waits() {
  local a b sampler start end
  rm -f "$tmp/waits.threads" "$tmp/stop.waits"
  start=$(date +%s%3N)
  sample_threads_to "$tmp/waits.threads" waits & sampler=$!
  run_attack waiting_store --count 150 --wait_ms 12000 "${as_insider[@]}" --job "$job" & a=$!
  run_attack watch --count 150 --wait_ms 12000 "${as_user[@]}" --job "$job" & b=$!
  wait_attacks waiting_store "$a" watch "$b"
  end=$(date +%s%3N)
  touch "$tmp/stop.waits"
  wait "$sampler"
  local held_samples
  held_samples=$(awk -v from=$((start + 6000)) -v to=$((end - 2000)) \
    '$1 + 0 >= from + 0 && $1 + 0 <= to + 0' "$tmp/waits.threads" | wc -l)
  threads_held=$(awk -v from=$((start + 6000)) -v to=$((end - 2000)) \
    'BEGIN { peak = 0 } $1 + 0 >= from + 0 && $1 + 0 <= to + 0 && $2 + 0 > peak { peak = $2 + 0 } END { print peak }' \
    "$tmp/waits.threads")
  [ "$held_samples" -ge 20 ] ||
    fail "the waits held for too short a time to sample: $held_samples samples between 6 s after the start and 2 s before the end ($((end - start)) ms)"
  codes_among waiting_store DEADLINE_EXCEEDED RESOURCE_EXHAUSTED
  codes_among watch OK DEADLINE_EXCEEDED RESOURCE_EXHAUSTED
  local waited refused
  waited=$(( $(result waiting_store 'd["codes"].get("DEADLINE_EXCEEDED", 0)') +
             $(result watch 'd["calls"] - d["codes"].get("RESOURCE_EXHAUSTED", 0)') ))
  refused=$(( $(result waiting_store 'd["codes"].get("RESOURCE_EXHAUSTED", 0)') +
              $(result watch 'd["codes"].get("RESOURCE_EXHAUSTED", 0)') ))
  [ "$waited" -le "$max_waiting_calls" ] || fail "$waited calls waited at once (limit $max_waiting_calls)"
  [ "$refused" -ge $((300 - max_waiting_calls)) ] || fail "only $refused of 300 waiting calls refused"
  [ "$threads_held" -le $((threads_before + max_waiting_calls + wait_slack)) ] ||
    fail "coordinator threads while the waits held: peak $threads_held over $held_samples samples (before: $threads_before)"
}

# A counter past INT64_MAX, and progress forged five ways.
attack_counters_and_progress() {
  run_attack store_add_overflow "${as_insider[@]}" --job "$job"
  [ "$(result store_add_overflow 'd["values"]')" = "[9223372036854775807, None, -1, -1]" ] ||
    fail "StoreAdd past INT64_MAX: $(cat "$tmp/store_add_overflow.json")"
  run_attack forged_progress "${as_insider[@]}" --job "$job"
  [ "$(result forged_progress 'd["ok"]')" = 0 ] || fail "forged progress accepted: $(cat "$tmp/forged_progress.json")"
  [ "$(result forged_progress 'd["calls"]')" -ge 5 ] || fail "forged progress: $(cat "$tmp/forged_progress.json")"
}

# The coordinator alive and answering, aq answered throughout, memory and
# threads under their bounds.
check_coordinator_health() {
  kill -0 "$cpid" 2>/dev/null || fail "the coordinator died: $(tail -5 "$tmp/coordinator.log")"
  aq jobs >/dev/null 2>&1 || fail "aq jobs after the attacks"
  local hwm peak answered_workers answered_jobs
  hwm=$(awk '/^VmHWM:/ { print $2 }' "/proc/$cpid/status")
  peak=$(cat "$tmp/threads.peak" 2>/dev/null || echo 0)
  answered_workers=$(wc -l <"$tmp/monitor.workers" 2>/dev/null || echo 0)
  answered_jobs=$(wc -l <"$tmp/monitor.jobs" 2>/dev/null || echo 0)
  [ -s "$tmp/monitor.fail" ] && fail "aq did not answer: $(head -3 "$tmp/monitor.fail")"
  [ "$answered_workers" -ge 10 ] && [ "$answered_jobs" -ge 10 ] ||
    fail "aq answered only $answered_workers (workers) / $answered_jobs (jobs) times"
  [ "${hwm:-0}" -gt 0 ] && [ "$hwm" -le "$max_rss_kb" ] ||
    fail "coordinator peak RSS ${hwm:-?} kB (bound $max_rss_kb kB)"
  [ "$peak" -le "$max_threads" ] || fail "coordinator peak threads $peak (bound $max_threads)"
  echo "coordinator: peak RSS $((hwm / 1024)) MiB (bound $((max_rss_kb / 1024))), peak threads $peak" \
    "(bound $max_threads; $threads_before before, peak $threads_held while the waits held);" \
    "aq workers answered $answered_workers times, aq jobs $answered_jobs"
}

attack_queue
# Before the flood fills the store: the counter needs a key's room.
attack_counters_and_progress
attack_floods
attack_waits
state_after_attacks=$(status "$job" 'd["state"]')
[ "$state_after_attacks" = JOB_RUNNING ] ||
  fail "the pipeline job was $state_after_attacks when the attacks ended: they did not all run while it trained"

# The pipeline job finishes undisturbed.
wait_until 150 job_final
touch "$tmp/stop"
aq status "$job" --output json >"$tmp/final.json" 2>&1
[ "$(json 'd["state"]' <"$tmp/final.json")" = JOB_SUCCEEDED ] || fail "pipeline job: $(aq status "$job")"
[ "$(json 'd["step"]' <"$tmp/final.json")" = "$(json 'd["total_steps"]' <"$tmp/final.json")" ] ||
  fail "pipeline job did not run every step: $(aq status "$job")"
check_coordinator_health
if [ "$fails" -eq 0 ]; then
  echo "PASS"
else
  echo "$fails failure(s); coordinator log tail:"
  tail -20 "$tmp/coordinator.log"
fi
exit $((fails > 0))
