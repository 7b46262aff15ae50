#!/usr/bin/env bash
# Process-level test of the coordinator's queue (coordinator/jobs/queue.h)
# with the real daemons, as the attacks of issue 14 tried it: a spec with a
# 100 KB name is refused naming the field; a job asking for 100,000 workers
# with a week's wait does not block a 1-worker job submitted after it (which
# succeeds) and fails when --max_wait_for_workers_ms ends; one user's
# unfinished jobs are capped; aq jobs and aq workers keep answering, the
# JSON as one document. Bounded in time; everything is cleaned up.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

"$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" \
  --max_jobs_per_user 3 --max_pending_jobs 10 --max_wait_for_workers_ms 8000 \
  --checkpoint_root "$tmp" >"$tmp/coordinator.log" 2>&1 &
pids+=("$!")
wait_until 10 test -s "$tmp/port" || { echo "coordinator did not start"; cat "$tmp/coordinator.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }
one_json() { python3 -c 'import json,sys; json.load(sys.stdin)' 2>/dev/null; }
"$WORKER" --coordinator "$addr" --worker_id w1 --listen 127.0.0.1:0 --threads 1 \
  --measure_gemm=false --checkpoint_root "$tmp" >"$tmp/w1.log" 2>&1 &
pids+=("$!")
one_healthy() { [ "$(healthy_count)" -eq 1 ]; }
wait_until 15 one_healthy || fail "the worker never HEALTHY: $(aq workers)"

cat >"$tmp/one.textproto" <<'SPEC'
name: "one"
model { layers { flatten {} } layers { linear { in_features: 8 out_features: 2 } } }
data { synthetic { sample_shape: [8] num_classes: 2 train_samples: 64 seed: 1 } }
optimizer { sgd { lr: 0.1 } }
batch_size: 16
max_steps: 4
SPEC

# Field limits: 100 KB of name.
python3 -c 'import sys; print("name: \"%s\"" % ("n" * 102400))' >"$tmp/big.textproto"
grep -v '^name:' "$tmp/one.textproto" >>"$tmp/big.textproto"
aq submit "$tmp/big.textproto" >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "a 100 KB name: exit $rc"
grep -q "invalid job spec: name is 102400 bytes, more than the 256 allowed" "$tmp/err" ||
  fail "a 100 KB name: $(head -c 300 "$tmp/err")"

# Backfill: the huge job waits, the small one behind it runs.
sed -e 's/^name: "one"/name: "huge"/' "$tmp/one.textproto" >"$tmp/huge.textproto"
echo 'pipeline { workers: 100000 wait_for_workers_ms: 604800000 }' >>"$tmp/huge.textproto"
huge=$(aq submit "$tmp/huge.textproto" 2>"$tmp/err") || fail "huge submit: $(cat "$tmp/err")"
[[ "$huge" =~ ^job-[0-9a-f]+-[0-9]+-[0-9a-f]{16}$ ]] || fail "job id form: $huge"
aq submit "$tmp/one.textproto" --wait >"$tmp/one.out" 2>&1 ||
  fail "the 1-worker job behind the 100,000-worker one: $(cat "$tmp/one.out")"
grep -q "SUCCEEDED step 4/4" "$tmp/one.out" || fail "the 1-worker job: $(cat "$tmp/one.out")"
aq status "$huge" | grep -q "PENDING" || fail "the huge job: $(aq status "$huge")"

# Per-user limit: the huge job and two more are this caller's 3.
aq submit "$tmp/huge.textproto" >/dev/null || fail "second huge submit"
aq submit "$tmp/huge.textproto" >/dev/null || fail "third huge submit"
aq submit "$tmp/one.textproto" >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "a fourth unfinished job: exit $rc"
grep -q "unauthenticated callers have 3 unfinished jobs.*(--max_jobs_per_user)" "$tmp/err" ||
  fail "a fourth unfinished job: $(cat "$tmp/err")"

# Listings answer, the JSON as one document.
[ "$(aq jobs | wc -l)" -eq 5 ] || fail "aq jobs (a header and 4 rows): $(aq jobs)"
aq jobs --output json >"$tmp/jobs.json" || fail "aq jobs --output json"
one_json <"$tmp/jobs.json" || fail "aq jobs --output json: $(head -c 300 "$tmp/jobs.json")"
[ "$(grep -o '"job_id"' "$tmp/jobs.json" | wc -l)" -eq 4 ] || fail "aq jobs --output json: $(cat "$tmp/jobs.json")"
aq workers | grep -q "^w1 " || fail "aq workers: $(aq workers)"

# The week's wait is capped: the huge job fails within the 8 s cap.
huge_failed() { aq status "$huge" | grep -q "FAILED"; }
wait_until 15 huge_failed || fail "the huge job's wait was not capped: $(aq status "$huge")"
aq status "$huge" | grep -q "timed out after 8.0 s waiting for 100000 healthy idle worker(s)" ||
  fail "the huge job's reason: $(aq status "$huge")"

if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed; the coordinator's log:" >&2
  tail -n 30 "$tmp/coordinator.log" >&2
  exit 1
fi
echo "PASS"
