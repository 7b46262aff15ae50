#!/usr/bin/env bash
# Process-level test of checkpoints under crashes: a 2-stage pipeline (and
# a spare worker) checkpoints every 2 steps, keeping the last 3, while six
# rounds SIGKILL a worker, the coordinator, or both at once, at random
# points (two rounds of each, in random order). After each kill, with
# nothing left that commits or prunes (the coordinator dead, or stopped
# with SIGSTOP while the check runs), every version directory holding a
# manifest.json, the latest committed checkpoint first, must load and
# verify with `aq verify-checkpoint`: a crash never leaves a manifest that
# names a missing, short or corrupt file. Then the dead processes are
# started again (the coordinator on the same address and --state_dir, the
# worker under the same id) and the job must go on to commit a newer
# checkpoint. At the end the job is still alive and is cancelled.
# Bounded in time; everything is cleaned up.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

restarts=0
# Starts the coordinator on $1 (host:port); sets cpid.
start_coordinator() {
  rm -f "$tmp/port"
  "$COORDINATOR" --listen "$1" --port_file "$tmp/port" --state_dir "$tmp/cstate" \
    --heartbeat_interval_ms 100 --suspect_after_missed 3 --dead_after_ms 1500 \
    --checkpoint_root "$tmp" >"$tmp/coordinator-$restarts.log" 2>&1 &
  cpid=$!; pids+=("$cpid")
  restarts=$((restarts + 1))
  wait_until 10 test -s "$tmp/port"
}
declare -A wpid
start_worker() {
  "$WORKER" --coordinator "$addr" --worker_id "$1" --listen 127.0.0.1:0 \
    --threads 1 --measure_gemm=false --peer_timeout_ms 3000 \
    --checkpoint_root "$tmp" >>"$tmp/$1.log" 2>&1 &
  pids+=("$!"); wpid[$1]=$!
}
start_coordinator 127.0.0.1:0 || { cat "$tmp"/coordinator-0.log; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }
for w in w1 w2 w3; do start_worker "$w"; done
healthy() { [ "$(healthy_count)" -ge "$1" ]; }
wait_until 15 healthy 3 || { echo "workers never HEALTHY: $(aq workers)"; exit 1; }

# Stage files of ~0.5 MB (weights and momentum) every 2 steps of ~25 ms.
cat >"$tmp/job.textproto" <<SPEC
name: "checkpoint-crashes"
model {
  layers { flatten {} }
  layers { linear { in_features: 32 out_features: 256 } }
  layers { relu {} }
  layers { delay { forward_ms: 6 backward_ms: 6 } }
  layers { linear { in_features: 256 out_features: 256 } }
  layers { relu {} }
  layers { linear { in_features: 256 out_features: 4 } }
}
data { synthetic { sample_shape: [32] num_classes: 4 train_samples: 512 seed: 5 } }
optimizer { sgd { lr: 0.01 momentum: 0.9 } }
batch_size: 32
max_steps: 1000000
epochs: 100000
pipeline { workers: 2 schedule: "1f1b_stashed" bandwidth_bytes_per_s: 1e6 }
checkpoint { dir: "$tmp/ckpt" every_steps: 2 keep_last: 3 }
fault_tolerance { max_restarts: 100 }
SPEC

status_json() { aq status "$id" --output json 2>/dev/null; }
# The job's latest committed checkpoint while it is RUNNING, else -1.
ckpt_version() {
  status_json | json 'int(d.get("checkpoint_version", 0)) if d["state"] == "JOB_RUNNING" else -1' 2>/dev/null ||
    echo -1
}
committed_past() { [ "$(ckpt_version)" -gt "$1" ]; }
# The job's workers (every stage, every replica).
job_workers() { status_json | json '" ".join(w for s in d.get("stages", []) for w in s["workers"])'; }

verified=0 latest=0
# Every version directory of the job with a manifest, newest first, must
# verify; the newest is the latest committed checkpoint (its version goes
# to `latest`).
verify_all() {
  local dirs d o n=0
  dirs=$(for d in "$tmp/ckpt/$id"/v*; do [ -f "$d/manifest.json" ] && echo "$d"; done | sort -r)
  [ -n "$dirs" ] || { fail "round $1: no committed checkpoint under $tmp/ckpt/$id: $(ls "$tmp/ckpt/$id" 2>&1)"; return; }
  for d in $dirs; do
    if ! "$AQ" verify-checkpoint "$d" >"$tmp/verify" 2>&1; then
      fail "round $1: $(basename "$d") ($([ $n -eq 0 ] && echo latest || echo older)) does not verify: $(cat "$tmp/verify"); $(ls -l "$d")"
      cp -r "$d" "$tmp/bad-round$1-$(basename "$d")" 2>/dev/null
    fi
    if [ $n -eq 0 ]; then
      # What the crash caught in flight: version directories not (yet)
      # committed, temporary files of interrupted writes.
      local open tmps
      open=$(for o in "$tmp/ckpt/$id"/v*; do [ -f "$o/manifest.json" ] || echo "$o"; done | wc -l)
      tmps=$(find "$tmp/ckpt/$id" -name '.*.tmp.*' | wc -l)
      echo "round $1: latest $(cat "$tmp/verify") ($open uncommitted, $tmps temporary files)"
      latest=$((10#$(basename "$d" | tr -d v)))
    fi
    n=$((n + 1)) verified=$((verified + 1))
  done
}

id=$(aq submit "$tmp/job.textproto" 2>"$tmp/err") || { echo "submit: $(cat "$tmp/err")"; exit 1; }
wait_until 30 committed_past 0 || { echo "$id committed no checkpoint: $(aq status "$id")"; exit 1; }

# Two rounds of each kind, in random order.
kinds=$(printf '%s\n' worker worker coordinator coordinator both both |
  while read -r k; do echo "$RANDOM $k"; done | sort -n | cut -d' ' -f2)
round=0
for kind in $kinds; do
  round=$((round + 1))
  sleep "$((RANDOM % 2)).$((RANDOM % 10))"  # 0 to 1.9 s into the writes.
  read -r -a workers <<<"$(job_workers)"
  [ "${#workers[@]}" -gt 0 ] || { fail "round $round: the job has no workers: $(aq status "$id")"; break; }
  victim=${workers[$((RANDOM % ${#workers[@]}))]}
  case "$kind" in
    worker) kill -KILL "${wpid[$victim]}" ;;
    coordinator) kill -KILL "$cpid" ;;
    both) kill -KILL "${wpid[$victim]}" "$cpid" ;;
  esac
  who=$kind; [ "$kind" = coordinator ] || who="$kind ($victim)"
  echo "round $round: killed $who"
  if [ "$kind" = worker ]; then
    # The coordinator lives on: stop it (and its commits and pruning)
    # while the files are read.
    wait "${wpid[$victim]}" 2>/dev/null
    kill -STOP "$cpid"
    verify_all "$round"
    kill -CONT "$cpid"
  else
    wait "$cpid" 2>/dev/null; forget "$cpid"
    [ "$kind" = both ] && wait "${wpid[$victim]}" 2>/dev/null
    verify_all "$round"
    start_coordinator "$addr" || { fail "round $round: the coordinator did not restart: $(tail -5 "$tmp/coordinator-$((restarts - 1)).log")"; break; }
  fi
  if [ "$kind" != coordinator ]; then
    forget "${wpid[$victim]}"
    start_worker "$victim"
  fi
  # The job goes on: RUNNING again, and a newer checkpoint committed.
  wait_until 30 committed_past "$latest" ||
    { fail "round $round: no newer checkpoint committed: $(aq status "$id")"; break; }
done

aq status "$id" >"$tmp/status" 2>&1
grep -q "RUNNING" "$tmp/status" || fail "$id is not RUNNING after the rounds: $(cat "$tmp/status")"
aq cancel "$id" >/dev/null 2>&1 || fail "cancel $id"
cancelled() { status_json | grep -q '"state":"JOB_CANCELLED"'; }
wait_until 10 cancelled || fail "$id not CANCELLED: $(aq status "$id")"
# Every committed checkpoint verifies at the end too (the coordinator
# stopped: its committer may still be pruning).
kill -STOP "$cpid"
verify_all end
kill -CONT "$cpid"
echo "$round rounds, $verified checkpoint verifications; $(grep -c '^restart ' "$tmp/status") job restarts"

if [ "$fails" -gt 0 ]; then
  for f in "$tmp"/coordinator-*.log; do echo "== $f"; grep -E " [WE] " "$f" | tail -10; done
  echo "$fails failure(s)"; exit 1
fi
echo "PASS"
