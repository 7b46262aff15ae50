#!/usr/bin/env bash
# The periodic evaluation's stall: the main job's GPT
# (examples/gpt_fortunes.textproto, 4 one-thread worker daemons) for STEPS
# steps with an evaluation every EVERY steps, run with the evaluation on the
# output stage's thread (--evaluate_in_background=false: every stage waits
# for it), on a thread of its own (the default), and without evaluations;
# ROUNDS rounds, alternating. Prints each run's training time (first report
# to finish), and the evaluations' own time from the trace (background).
#
#   tests/bench/eval_stall.sh            # STEPS=100 EVERY=20 ROUNDS=2
#
# BIN: a bazel-bin with coordinator/coordinator, worker/worker and
# client/aq (default: `bazel build --config=opt` them).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${STEPS:-100}
EVERY=${EVERY:-20}
ROUNDS=${ROUNDS:-2}
# shellcheck source=tests/bench/bench_lib.sh
source tests/bench/bench_lib.sh
"$BIN/coordinator/coordinator" --listen 127.0.0.1:0 --port_file "$tmp/port" \
  --state_dir "$tmp/state" >"$tmp/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.2; done
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$BIN/client/aq" "$@" --coordinator "$addr"; }
printf '%-12s %10s %8s %s\n' mode train_s evals "eval spans (s, background)"
for round in $(seq "$ROUNDS"); do
  for mode in inline background none; do
    wpids=()
    for n in 1 2 3 4; do
      "$BIN/worker/worker" --coordinator "$addr" --worker_id "v$n" --listen 127.0.0.1:0 \
        --threads 1 --evaluate_in_background="$([ "$mode" = inline ] && echo false || echo true)" \
        >"$tmp/w$n.log" 2>&1 &
      wpids+=($!)
    done
    wait_healthy "$addr" 4 || true
    every=$EVERY
    [ "$mode" = none ] && every=0
    id=$(aq submit examples/gpt_fortunes.textproto --set max_steps="$STEPS" \
      --set eval_every="$every" --wait 2>&1 | grep -o 'job-[0-9a-f-]*' | head -1)
    aq status "$id" --output json >"$tmp/job.json"
    aq trace "$id" -o "$tmp/trace.json" >/dev/null 2>&1 || true
    python3 - "$tmp/job.json" "$tmp/trace.json" "$mode" <<'PY'
import json, sys
job = json.load(open(sys.argv[1]))
t = (int(job["finished_ms"]) - int(job["started_ms"])) / 1000.0
try:
    events = json.load(open(sys.argv[2]))["traceEvents"]
except Exception:
    events = []
spans = [e["dur"] / 1e6 for e in events if e.get("name", "").startswith("eval v=")]
print(f"{sys.argv[3]:<12} {t:>10.2f} {len(job.get('evals', [])):>8} "
      f"{' '.join(f'{s:.2f}' for s in spans)}")
PY
    kill "${wpids[@]}" 2>/dev/null || true
    wait "${wpids[@]}" 2>/dev/null || true
    # The coordinator forgets nothing it needs: new workers, new ids.
    for _ in $(seq 100); do
      [ "$(aq workers --output json | grep -o '"WORKER_HEALTHY"' | wc -l)" -eq 0 ] && break
      sleep 0.2
    done
  done
done
