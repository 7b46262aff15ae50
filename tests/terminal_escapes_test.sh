#!/usr/bin/env bash
# Process-level test of issue 22, items 11 and 10, with the real
# coordinator and aq, and two forged workers (tests/forged_worker.cc) that
# report a log line and then an error full of terminal control sequences
# (ESC[2J, an OSC title, CR/LF, BEL, a C1 CSI).
#   11: a job named with control characters is refused at submit, naming
#       the field; what aq prints in text mode (jobs, status, watch,
#       submit --wait, logs) holds no control character: the forged log
#       line and the error that became the job's reason are kept escaped
#       by the coordinator (its JSON shows the escape; its own log holds no
#       control character either), and aq prints them so.
#   10: with --max_waiting_calls 2 (one watch, one log follow at a time),
#       `aq submit --wait` and `aq logs --follow` whose waiting call is
#       refused poll instead, show the job's progress and end with it.
# Loopback without TLS or tokens. Bounded in time; cleaned up.
set -uo pipefail
AQ="$1" COORDINATOR="$2" FORGED="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

"$COORDINATOR" --listen 127.0.0.1:0 --http_listen "" --port_file "$tmp/port" \
  --max_waiting_calls 2 --heartbeat_interval_ms 100 \
  >"$tmp/coordinator.log" 2>&1 &
pids+=("$!")
wait_until 10 test -s "$tmp/port" || { cat "$tmp/coordinator.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }

# The number of bytes of file $1 a terminal would act on: C0 controls but
# tab and newline, DEL, C1 controls (UTF-8 or lone), ESC included.
controls() {
  python3 - "$1" <<'PY'
import re, sys
d = open(sys.argv[1], "rb").read()
print(len(re.findall(rb"[\x00-\x08\x0b-\x1f\x7f]|\xc2[\x80-\x9f]", d)) +
      len(re.findall(rb"(?<![\xc0-\xdf])[\x80-\x9f](?![\x80-\xbf])", d)))
PY
}
# The summary and the exit status; early when what follows depends on a
# check that failed.
finish() {
  if [ "$fails" -gt 0 ]; then
    echo "== coordinator"; tail -20 "$tmp/coordinator.log"
    echo "$fails failure(s)"; exit 1
  fi
  echo "PASS"; exit 0
}
no_controls() {  # $1 file, $2 what it is
  local n; n=$(controls "$1")
  [ "$n" = 0 ] || fail "$2 printed $n raw control bytes: $(head -c 400 "$1" | od -c | head -8)"
}

spec() {  # $1 name
  cat <<SPEC
name: "$1"
model { layers { flatten {} } layers { linear { in_features: 8 out_features: 2 } } }
data { synthetic { sample_shape: [8] num_classes: 2 train_samples: 64 } }
optimizer { sgd { lr: 0.1 } }
batch_size: 8
max_steps: 4
pipeline { workers: 1 }
SPEC
}

# ---- 11: a hostile job name is refused at submit.
spec 'evil\x1b[2J\x1b[H\r\nINFO forged' >"$tmp/hostile.textproto"
aq submit "$tmp/hostile.textproto" >"$tmp/hostile.out" 2>"$tmp/hostile.err"
rc=$?
if [ "$rc" -ne 1 ]; then
  fail "the hostile name was not refused (exit $rc): $(cat "$tmp/hostile.out")"
  # It would take a worker from the jobs below.
  [ "$rc" -eq 0 ] && aq cancel "$(cat "$tmp/hostile.out")" >/dev/null 2>&1
fi
grep -qF "invalid job spec: name='evil\\x1b[2J\\x1b[H\\r\\nINFO forged' holds a control character" "$tmp/hostile.err" ||
  fail "the refusal does not name the field: $(cat "$tmp/hostile.err")"
no_controls "$tmp/hostile.err" "the refusal"
aq jobs >"$tmp/jobs-0.txt" 2>&1
grep -qx "no jobs" "$tmp/jobs-0.txt" || fail "a refused job is listed: $(cat "$tmp/jobs-0.txt")"

# ---- Two forged workers.
log_text='step 1\tok\x1b[2J\x1b[H\302\23331m\r\n2026-01-01T00:00:00.000Z info coordinator -: job SUCCEEDED\x07'
error_text='boom\x1b]0;owned\x07\r\nreason forged\x1b[0m'
for w in w1 w2; do
  "$FORGED" --coordinator "$addr" --worker_id "$w" --log_text "$log_text" \
    --error_text "$error_text" --go_file "$tmp/go" >"$tmp/$w.out" 2>"$tmp/$w.err" &
  pids+=("$!")
done
healthy() { [ "$(healthy_count)" -eq 2 ]; }
wait_until 15 healthy || { echo "forged workers never HEALTHY: $(aq workers)"; exit 1; }

spec "plain" >"$tmp/job.textproto"
j1=$(aq submit "$tmp/job.textproto" 2>"$tmp/err") || { echo "submit: $(cat "$tmp/err")"; exit 1; }
reported() { grep -qsx "reported $1" "$tmp"/w[12].out; }
wait_until 30 reported "$j1" ||
  { fail "$j1's forged line was not reported: $(aq status "$j1"; cat "$tmp"/w[12].err)"; finish; }

# ---- 11: the forged line reaches no terminal raw. The coordinator keeps
# it escaped (JSON would show a raw ESC as \u001b), aq prints it so.
escaped_line='step 1	ok\x1b[2J\x1b[H\xc2\x9b31m\x0d\x0a2026-01-01T00:00:00.000Z info coordinator -: job SUCCEEDED\x07'
aq logs "$j1" --output json >"$tmp/logs-running.json" 2>&1 || fail "aq logs --output json"
grep -qF '"text":"step 1\tok\\x1b[2J' "$tmp/logs-running.json" ||
  fail "the coordinator did not keep the line escaped: $(grep -F step "$tmp/logs-running.json")"
aq logs "$j1" >"$tmp/logs-running.txt" 2>&1 || fail "aq logs"
no_controls "$tmp/logs-running.txt" "aq logs"
grep -qE " info w[12] s0: " "$tmp/logs-running.txt" &&
  grep -qF "$escaped_line" "$tmp/logs-running.txt" ||
  fail "aq logs: the forged line is not shown escaped: $(cat -v "$tmp/logs-running.txt")"
grep -q "^2026-01-01T00:00:00.000Z" "$tmp/logs-running.txt" && fail "aq logs printed a forged line of its own"

# ---- 10: one watch and one log follow take the coordinator's slots...
aq watch "$j1" >"$tmp/watch1.out" 2>"$tmp/watch1.err" &
watch1=$!; pids+=("$watch1")
wait_until 15 test -s "$tmp/watch1.out" || { fail "aq watch $j1 showed nothing"; finish; }
# ...and aq submit --wait, refused a watch, polls: it sees its job run.
aq submit --wait "$tmp/job.textproto" >"$tmp/submit2.out" 2>"$tmp/submit2.err" &
submit2=$!; pids+=("$submit2")
polling() { grep -qs "refused a watch of .*polling it every 1s" "$tmp/submit2.err"; }
wait_until 15 polling || { fail "aq submit --wait did not poll: $(cat "$tmp/submit2.err")"; finish; }
j2=$(head -1 "$tmp/submit2.out")
wait_until 30 reported "$j2" || { fail "$j2's forged line was not reported"; finish; }
kill -0 "$submit2" 2>/dev/null || fail "aq submit --wait ended before its job: $(cat "$tmp/submit2.err")"

# Two log follows: one holds the slot, the other reads every second and
# still prints its job's lines while the first holds it.
aq logs "$j1" --follow >"$tmp/follow1.out" 2>"$tmp/follow1.err" &
follow1=$!; pids+=("$follow1")
aq logs "$j2" --follow >"$tmp/follow2.out" 2>"$tmp/follow2.err" &
follow2=$!; pids+=("$follow2")
refused_follow() {
  for i in 1 2; do
    grep -qs "refused to follow the log of" "$tmp/follow$i.err" &&
      grep -qF "$escaped_line" "$tmp/follow$i.out" && return 0
  done
  return 1
}
wait_until 15 refused_follow ||
  fail "no refused log follow printed its lines: $(cat "$tmp"/follow[12].err)"

# The jobs end (the forged workers report their errors); every client ends
# with its job: exit 1, the job FAILED.
touch "$tmp/go"
clients=("$watch1" "$submit2" "$follow1" "$follow2")
all_ended() {
  local p
  for p in "${clients[@]}"; do kill -0 "$p" 2>/dev/null && return 1; done
  return 0
}
wait_until 30 all_ended || { fail "the aq clients did not end with their jobs"; finish; }
for p in "${clients[@]}"; do
  wait "$p"; rc=$?; forget "$p"
  [ "$rc" -eq 1 ] || fail "aq (pid $p) exited $rc, not 1 (its job FAILED)"
done
escaped_reason='boom\x1b]0;owned\x07\x0d\x0areason forged\x1b[0m'
grep -q "^$j2 plain FAILED: " "$tmp/submit2.out" ||
  fail "aq submit --wait did not show the end: $(cat "$tmp/submit2.out")"
grep -qF "$escaped_reason" "$tmp/submit2.out" || fail "aq submit --wait: no escaped reason"
grep -q "too many waiting calls" "$tmp/submit2.out" && fail "aq submit --wait printed a refusal"

# ---- 11: nothing aq printed in text mode holds a control character.
aq jobs >"$tmp/jobs.txt" 2>&1 || fail "aq jobs"
aq status "$j1" >"$tmp/status.txt" 2>&1 || fail "aq status"
aq logs "$j1" >"$tmp/logs.txt" 2>&1 || fail "aq logs"
for f in jobs.txt status.txt logs.txt watch1.out watch1.err submit2.out \
  submit2.err follow1.out follow1.err follow2.out follow2.err; do
  no_controls "$tmp/$f" "$f"
done
grep -qF "$escaped_reason" "$tmp/status.txt" || fail "aq status: no escaped reason"
grep -F "coordinator -: job FAILED: " "$tmp/logs.txt" | grep -qF "$escaped_reason" ||
  fail "aq logs: the coordinator's line does not quote the error escaped: $(cat -v "$tmp/logs.txt")"
no_controls "$tmp/coordinator.log" "the coordinator's log"

finish
