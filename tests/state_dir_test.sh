#!/usr/bin/env bash
# Issue 22, items 9 and 13, with the real daemons: one coordinator per
# --state_dir, and the state its user's alone.
#   - A coordinator started under umask 022 runs a job on a worker (journal,
#     job log, trained model written): nothing under its --state_dir is
#     readable or writable by group or others (find -perm /077 is empty).
#   - A second coordinator on that --state_dir exits 1 naming the first's
#     pid and the lock file, and the first keeps serving its jobs.
#   - Once the first is gone (SIGKILL: no clean-up of its own), a new
#     coordinator starts there and has the job back.
# Arguments: aq coordinator worker
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

umask 022
state="$tmp/state"
# Starts a coordinator on $state writing its port to $1; its pid in $cpid.
start_coordinator() {
  rm -f "$1"
  "$COORDINATOR" --listen 127.0.0.1:0 --http_listen "" --port_file "$1" \
    --state_dir "$state" >>"$tmp/coordinator.log" 2>&1 &
  cpid=$!; pids+=("$cpid")
}
start_coordinator "$tmp/port"
wait_until 10 test -s "$tmp/port" || { echo "coordinator did not start"; cat "$tmp/coordinator.log"; exit 1; }
first=$cpid
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }

"$WORKER" --coordinator "$addr" --worker_id w1 --listen 127.0.0.1:0 --threads 1 \
  --measure_gemm=false >"$tmp/w1.log" 2>&1 &
pids+=("$!")
one_healthy() { [ "$(healthy_count)" -ge 1 ]; }
wait_until 15 one_healthy || fail "the worker never became HEALTHY: $(aq workers 2>&1)"
printf '%s\n' 'name: "modes"' \
  'model { layers { flatten {} } layers { linear { in_features: 4 out_features: 2 } } }' \
  'data { synthetic { sample_shape: [4] num_classes: 2 train_samples: 32 seed: 1 } }' \
  'optimizer { sgd { lr: 0.1 } }' 'batch_size: 8' 'max_steps: 4' >"$tmp/job.textproto"
timeout 60 "$AQ" submit "$tmp/job.textproto" --wait --coordinator "$addr" >"$tmp/submit.out" 2>&1 ||
  fail "the job did not succeed: $(cat "$tmp/submit.out")"
job=$(head -1 "$tmp/submit.out")
model_written() { ls "$state"/models/*.safetensors >/dev/null 2>&1; }
wait_until 10 model_written || fail "no trained model in $state/models"
for f in jobs.journal coordinator.lock coordinator.port "logs/$job.log"; do
  [ -s "$state/$f" ] || fail "no $state/$f"
done

# Item 13: nothing under the state directory for group or others.
loose=$(find "$state" -perm /077 -printf '%m %p\n')
[ -z "$loose" ] || fail "files in --state_dir that others may use (want dirs 700, files 600):
$loose"

# Item 9: a second coordinator on the same directory is refused, naming
# the holder; the first goes on serving its job.
timeout 10 "$COORDINATOR" --listen 127.0.0.1:0 --http_listen "" --port_file "$tmp/port2" \
  --state_dir "$state" >"$tmp/second.log" 2>&1; rc=$?
[ "$rc" -eq 1 ] || fail "second coordinator on the same --state_dir: exit $rc, want 1 (124: it kept running)"
grep -q -- "--state_dir $state is in use by another coordinator: $state/coordinator.lock is held by pid $first" \
  "$tmp/second.log" || fail "second coordinator's message: $(tail -3 "$tmp/second.log")"
[ -s "$tmp/port2" ] && fail "the second coordinator served (port file written)"
aq status "$job" >"$tmp/out" 2>&1 || fail "aq status after the second coordinator: $(cat "$tmp/out")"
grep -q SUCCEEDED "$tmp/out" || fail "the first coordinator lost its job: $(cat "$tmp/out")"
[ "$(cat "$state/coordinator.lock")" = "$first" ] || fail "lock file: '$(cat "$state/coordinator.lock")', want $first"

# A lock dies with its holder: after a SIGKILL, the next coordinator
# starts on the directory and has the job back.
kill -KILL "$first"; wait "$first" 2>/dev/null; forget "$first"
start_coordinator "$tmp/port3"
wait_until 10 test -s "$tmp/port3" || fail "no coordinator after the first was killed: $(tail -3 "$tmp/coordinator.log")"
addr="127.0.0.1:$(cat "$tmp/port3")"
aq status "$job" >"$tmp/out" 2>&1 || fail "aq status after the restart: $(cat "$tmp/out")"
grep -q SUCCEEDED "$tmp/out" || fail "the job after the restart: $(cat "$tmp/out")"
[ "$(cat "$state/coordinator.lock")" = "$cpid" ] || fail "lock file after the restart: '$(cat "$state/coordinator.lock")', want $cpid"

if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed" >&2
  exit 1
fi
echo "state directory: private, and locked to one coordinator"
