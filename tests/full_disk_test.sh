#!/usr/bin/env bash
# Issue 22, item 6: a full state disk does not stop the coordinator. On a
# small tmpfs (mounted here: the test needs root, as in CI, and fails
# rather than skips without it), a coordinator records a job, stops, the
# disk is filled, and a coordinator started again with --state_dir there
# (and --port_file elsewhere) must come up: serve `aq jobs` and `aq status`
# of the job it recorded, refuse `aq submit` with a message naming the full
# disk and the journal, and keep running. With room again it writes its
# journal again within seconds and accepts submissions, without a restart.
# Arguments: aq coordinator
set -uo pipefail
AQ="$1" COORDINATOR="$2"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

disk="$tmp/disk"
mkdir -p "$disk"
if ! mount -t tmpfs -o size=1m,mode=0700 aq-full-disk-test "$disk" 2>"$tmp/mount.err"; then
  echo "FAIL: cannot mount a tmpfs on $disk (this test needs root or CAP_SYS_ADMIN, as in CI): $(cat "$tmp/mount.err")" >&2
  exit 1
fi
# The daemons first (the harness's cleanup), then the mount.
unmount_disk() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
  wait 2>/dev/null
  umount "$disk" 2>/dev/null || umount -l "$disk"
  cleanup
}
trap unmount_disk EXIT
state="$disk/state"

# Starts a coordinator on $state; its pid in $cpid, its address in $addr.
start_coordinator() {
  rm -f "$tmp/port"
  "$COORDINATOR" --listen 127.0.0.1:0 --http_listen "" --port_file "$tmp/port" \
    --state_dir "$state" >"$tmp/coordinator.log" 2>&1 &
  cpid=$!; pids+=("$cpid")
  wait_until 10 test -s "$tmp/port" || return 1
  addr="127.0.0.1:$(cat "$tmp/port")"
}
aq() { "$AQ" "$@" --coordinator "$addr"; }
printf '%s\n' 'name: "full-disk"' \
  'model { layers { flatten {} } layers { linear { in_features: 4 out_features: 2 } } }' \
  'data { synthetic { sample_shape: [4] num_classes: 2 train_samples: 32 seed: 1 } }' \
  'optimizer { sgd { lr: 0.1 } }' 'batch_size: 8' 'max_steps: 4' \
  'pipeline { wait_for_workers_ms: 600000 }' >"$tmp/job.textproto"

# With room: a job recorded (no workers: it waits, PENDING).
start_coordinator || { echo "coordinator did not start"; cat "$tmp/coordinator.log"; exit 1; }
aq submit "$tmp/job.textproto" >"$tmp/out" 2>&1 || { echo "submit with room: $(cat "$tmp/out")"; exit 1; }
job=$(head -1 "$tmp/out")
kill -TERM "$cpid"; wait "$cpid"; forget "$cpid"

# The disk filled to the last byte.
dd if=/dev/zero of="$disk/filler" bs=64k >/dev/null 2>&1
if echo x >"$disk/probe" 2>/dev/null; then
  echo "FAIL: $disk is not full: $(df "$disk" | tail -1)" >&2; exit 1
fi

start_coordinator || fail "no coordinator on a full disk: $(cat "$tmp/coordinator.log")"
aq jobs >"$tmp/out" 2>&1 || fail "aq jobs on a full disk: $(cat "$tmp/out")"
grep -q "$job" "$tmp/out" || fail "aq jobs on a full disk lacks $job: $(cat "$tmp/out")"
aq status "$job" >"$tmp/out" 2>&1 || fail "aq status on a full disk: $(cat "$tmp/out")"
aq submit "$tmp/job.textproto" >"$tmp/out" 2>"$tmp/err"; rc=$?
[ "$rc" -ne 0 ] || fail "aq submit on a full disk: accepted: $(cat "$tmp/out")"
grep -q "cannot record new jobs" "$tmp/err" || fail "aq submit on a full disk: $(cat "$tmp/err")"
grep -q "$state/jobs.journal.*No space left on device" "$tmp/err" ||
  fail "aq submit on a full disk does not name the journal and the full disk: $(cat "$tmp/err")"
kill -0 "$cpid" 2>/dev/null || fail "the coordinator on a full disk exited: $(tail -5 "$tmp/coordinator.log")"
grep -q "cannot write $state/coordinator.port" "$tmp/coordinator.log" ||
  fail "no warning about coordinator.port: $(cat "$tmp/coordinator.log")"
aq jobs >/dev/null 2>&1 || fail "aq jobs after the refused submission"

# Room again, without a restart: within the 5 s retry (and a margin) the
# coordinator writes its journal again and takes new jobs, which a restart
# then still knows.
rm -f "$disk/filler"
submitted() { aq submit "$tmp/job.textproto" >"$tmp/out" 2>"$tmp/err"; }
wait_until 15 submitted || fail "no submission within 15 s of room again: $(cat "$tmp/err")"
job2=$(head -1 "$tmp/out")
grep -q "written again" "$tmp/coordinator.log" || fail "the journal was not written again: $(tail -5 "$tmp/coordinator.log")"
kill -TERM "$cpid"; wait "$cpid"; forget "$cpid"
start_coordinator || fail "no coordinator with room again: $(cat "$tmp/coordinator.log")"
for j in "$job" "$job2"; do
  aq status "$j" >/dev/null 2>&1 || fail "$j forgotten after the restart: $(aq jobs)"
done

if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed" >&2
  exit 1
fi
echo "full state disk: the coordinator serves and refuses new jobs naming the disk"
