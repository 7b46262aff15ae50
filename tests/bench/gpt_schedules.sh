#!/usr/bin/env bash
# The main job's GPT (examples/gpt_fortunes.textproto) through 4 worker
# daemons under each flushing schedule, one after the other on the same
# daemons: tokens/s side by side, the loss at the last step, and what
# `auto` picks. One profile for every job (so the one-chunk schedules get
# the same plan), a planner bandwidth of 1e8 B/s (straight pipelines), 4
# microbatches.
#
#   tests/bench/gpt_schedules.sh            # STEPS=100 THREADS=1
#   SCHEDULES="zb_h1 zb_v" STEPS=50 tests/bench/gpt_schedules.sh
#
# BIN: a bazel-bin with coordinator/coordinator, worker/worker and
# client/aq (default: `bazel build --config=opt` them).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${STEPS:-100}
THREADS=${THREADS:-1}
SCHEDULES=${SCHEDULES:-1f1b_flush zb_h1 zb_h2 interleaved_1f1b zb_v auto}
# shellcheck source=tests/bench/bench_lib.sh
source tests/bench/bench_lib.sh
"$BIN/coordinator/coordinator" --listen 127.0.0.1:0 --port_file "$tmp/port" \
  --state_dir "$tmp/state" >"$tmp/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.2; done
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$BIN/client/aq" "$@" --coordinator "$addr"; }
for n in 1 2 3 4; do
  "$BIN/worker/worker" --coordinator "$addr" --worker_id "g$n" --listen 127.0.0.1:0 \
    --threads "$THREADS" >"$tmp/w$n.log" 2>&1 &
  pids+=($!)
done
sed -e 's/^max_steps: 4000/max_steps: 10/' examples/gpt_fortunes.textproto >"$tmp/profile.textproto"
"$BIN/client/aq" profile "$tmp/profile.textproto" --threads "$THREADS" -o "$tmp/profile.json" >/dev/null
wait_healthy "$addr" 4 || true
printf '%-18s %-16s %8s %10s %14s %s\n' schedule ran stages tokens/s "loss@$STEPS" "plan"
for s in $SCHEDULES; do
  sed -e "s/^max_steps: 4000/max_steps: $STEPS/" -e "s/^eval_every: 1000/eval_every: $STEPS/" \
    -e "s/^  schedule: \"1f1b_flush\"/  schedule: \"$s\" microbatches: 4 bandwidth_bytes_per_s: 1e8/" \
    examples/gpt_fortunes.textproto >"$tmp/$s.textproto"
  timeout 1800 "$BIN/client/aq" submit "$tmp/$s.textproto" --profile "$tmp/profile.json" \
    --wait --coordinator "$addr" >"$tmp/$s.out" 2>&1 || true
  id=$(grep -o 'job-[0-9a-f-]*' "$tmp/$s.out" | head -1)
  aq status "$id" --output json >"$tmp/$s.json"
  aq plan "$id" >"$tmp/$s.plan" 2>&1 || true
  python3 - "$tmp/$s.json" "$s" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
spec_context = 64  # examples/gpt_fortunes.textproto: context (tokens per sample)
curve = sorted(d.get("loss_curve", []), key=lambda p: int(p.get("minibatch", 0)))
# Tokens/s from the job's wall time: total steps x batch x context.
t = (int(d.get("finished_ms", 0)) - int(d.get("started_ms", 0))) / 1000.0
steps = int(d.get("total_steps", 0))
tokens = steps * 16 * spec_context / t if t > 0 else 0
stages = len(d.get("plan", {}).get("stages", []))
layers = " ".join(f"[{s.get('first_layer', 0)},{s.get('end_layer', 0)})" for s in d["plan"]["stages"])
print(f"{sys.argv[2]:<18} {d.get('schedule', '?'):<16} {stages:>8} {tokens:>10.0f} "
      f"{curve[-1]['loss'] if curve else float('nan'):>14.10f} {layers} {d.get('state')}")
PY
  grep '^auto chose' "$tmp/$s.plan" || true
done
