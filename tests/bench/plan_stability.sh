#!/usr/bin/env bash
# The main job's plan across repeated submissions on a loaded machine: the
# GPT of examples/gpt_fortunes.textproto submitted RUNS times (3 steps
# each) to 4 one-thread worker daemons while LOAD busy processes compete
# for the cores, once with the coordinator's --reuse_profiles (the
# default: the first job's profile plans the later ones) and once without
# (each job profiled anew); prints each plan (its stages' layer ranges and
# replicas) and how many distinct plans each mode gave.
#
#   tests/bench/plan_stability.sh            # RUNS=10 LOAD=2
#
# BIN: a bazel-bin with coordinator/coordinator, worker/worker and
# client/aq (default: `bazel build --config=opt` them).
set -euo pipefail
cd "$(dirname "$0")/../.."
RUNS=${RUNS:-10}
LOAD=${LOAD:-2}
# shellcheck source=tests/bench/bench_lib.sh
source tests/bench/bench_lib.sh
for _ in $(seq "$LOAD"); do
  (while :; do :; done) &
  pids+=($!)
done
cat >"$tmp/plan.py" <<'PY'
import json, sys
plan = json.load(sys.stdin)["plan"]
print(" ".join("[%s,%s)x%s" % (s.get("first_layer", 0), s["end_layer"],
                               s.get("replicas", 1)) for s in plan["stages"]))
PY
sed -e 's/^max_steps: 4000/max_steps: 3/' -e 's/^eval_every: 1000/eval_every: 0/' \
  examples/gpt_fortunes.textproto >"$tmp/job.textproto"
for reuse in true false; do
  "$BIN/coordinator/coordinator" --listen 127.0.0.1:0 --port_file "$tmp/port.$reuse" \
    --state_dir "$tmp/state.$reuse" --reuse_profiles="$reuse" >"$tmp/c.$reuse.log" 2>&1 &
  cpid=$!
  for _ in $(seq 50); do [ -s "$tmp/port.$reuse" ] && break; sleep 0.2; done
  addr="127.0.0.1:$(cat "$tmp/port.$reuse")"
  wpids=()
  for n in 1 2 3 4; do
    "$BIN/worker/worker" --coordinator "$addr" --worker_id "s$n" --listen 127.0.0.1:0 \
      --threads 1 >"$tmp/w$n.$reuse.log" 2>&1 &
    wpids+=($!)
  done
  wait_healthy "$addr" 4 || true
  : >"$tmp/plans.$reuse"
  for run in $(seq "$RUNS"); do
    id=$("$BIN/client/aq" submit "$tmp/job.textproto" --wait --coordinator "$addr" 2>&1 |
      grep -o 'job-[0-9a-f-]*' | head -1)
    "$BIN/client/aq" status "$id" --output json --coordinator "$addr" |
      python3 "$tmp/plan.py" >>"$tmp/plans.$reuse"
  done
  echo "--reuse_profiles=$reuse: $(sort -u "$tmp/plans.$reuse" | wc -l) distinct plan(s) in $RUNS submissions"
  sort "$tmp/plans.$reuse" | uniq -c | sed 's/^/  /'
  kill "${wpids[@]}" "$cpid" 2>/dev/null || true
  wait "${wpids[@]}" "$cpid" 2>/dev/null || true
done
