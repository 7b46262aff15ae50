#!/usr/bin/env bash
# The joint planner's choice against hand-fixed configurations: the main
# job's GPT (examples/gpt_fortunes.textproto, 1f1b_flush, 4 microbatches)
# through 4 worker daemons as every tensor degree (1, 2, 4) and
# recomputation mode the spec can fix, and as the planner chooses (both
# left unset), one after the other on the same daemons with one profile:
# the plan's predicted step and memory per worker next to the measured
# tokens/s.
#
#   tests/bench/planner_choice.sh             # STEPS=60 THREADS=1
#   CONFIGS="planner 2:none" STEPS=30 tests/bench/planner_choice.sh
#   SPEC=examples/gpt_wide.textproto MEMORY_LIMIT=9500000 \
#     CONFIGS="planner 0:full" tests/bench/planner_choice.sh
#
# SPEC: a spec with "max_steps: 4000", "eval_every: 1000" and a
# `  schedule: "1f1b_flush"` line, batch 16 of context 64; MEMORY_LIMIT:
# the workers' --memory_limit (default none). A degree of 0 leaves it to
# the planner; a third field "sp" turns sequence parallelism on
# (2:none:sp).
#
# BIN: a bazel-bin with coordinator/coordinator, worker/worker and
# client/aq (default: `bazel build --config=opt` them).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${STEPS:-60}
THREADS=${THREADS:-1}
CONFIGS=${CONFIGS:-planner 1:none 2:none 4:none 1:selective 1:full 2:full}
SPEC=${SPEC:-examples/gpt_fortunes.textproto}
limit=()
[ -n "${MEMORY_LIMIT:-}" ] && limit=(--memory_limit "$MEMORY_LIMIT")
# shellcheck source=tests/bench/bench_lib.sh
source tests/bench/bench_lib.sh
"$BIN/coordinator/coordinator" --listen 127.0.0.1:0 --port_file "$tmp/port" \
  --state_dir "$tmp/state" >"$tmp/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.2; done
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$BIN/client/aq" "$@" --coordinator "$addr"; }
for n in 1 2 3 4; do
  "$BIN/worker/worker" --coordinator "$addr" --worker_id "p$n" --listen 127.0.0.1:0 \
    --threads "$THREADS" "${limit[@]}" >"$tmp/w$n.log" 2>&1 &
  pids+=($!)
done
sed -e 's/^max_steps: 4000/max_steps: 10/' "$SPEC" >"$tmp/profile.textproto"
"$BIN/client/aq" profile "$tmp/profile.textproto" --threads "$THREADS" -o "$tmp/profile.json" >/dev/null
wait_healthy "$addr" 4 || true
printf '%-14s %-22s %12s %14s %10s %12s\n' config chose predicted_s "memory/worker" tokens/s "loss@$STEPS"
for c in $CONFIGS; do
  how="microbatches: 4"
  if [ "$c" != planner ]; then
    IFS=: read -r degree mode sp <<<"$c"
    how="$how tensor_parallel: $degree recompute: \"$mode\""
    [ "${sp:-}" = sp ] && how="$how sequence_parallel: true"
  fi
  name=${c//:/_}
  sed -e "s/^max_steps: 4000/max_steps: $STEPS/" -e "s/^eval_every: 1000/eval_every: $STEPS/" \
    -e "s/^  schedule: \"1f1b_flush\"/  schedule: \"1f1b_flush\" $how/" \
    "$SPEC" >"$tmp/$name.textproto"
  timeout 1800 "$BIN/client/aq" submit "$tmp/$name.textproto" --profile "$tmp/profile.json" \
    --wait --coordinator "$addr" >"$tmp/$name.out" 2>&1 || true
  id=$(grep -o 'job-[0-9a-f-]*' "$tmp/$name.out" | head -1)
  aq status "$id" --output json >"$tmp/$name.json"
  python3 - "$tmp/$name.json" "$c" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
plan = d.get("plan", {})
dec = plan.get("pipeline", {})
curve = sorted(d.get("loss_curve", []), key=lambda p: int(p.get("minibatch", 0)))
t = (int(d.get("finished_ms", 0)) - int(d.get("started_ms", 0))) / 1000.0
steps = int(d.get("total_steps", 0))
tokens = steps * 16 * 64 / t if t > 0 else 0
stages = plan.get("stages", [])
chose = f"{len(stages)} st x tp{dec.get('tensor_parallel', 1)} {dec.get('recompute', 'none')}"
mem = max((float(s.get("predicted_memory_bytes", 0)) for s in stages), default=0)
print(f"{sys.argv[2]:<14} {chose:<22} {float(dec.get('predicted_step_s', 0)):>12.4f} "
      f"{mem / 1e6:>11.1f} MB {tokens:>10.0f} "
      f"{curve[-1]['loss'] if curve else float('nan'):>12.6f} {d.get('state')}")
for cand in dec.get("candidates", []):
    print(f"    candidate tp{cand.get('tensor_parallel', 1)} {cand.get('recompute')}: "
          f"{float(cand.get('predicted_step_s', 0)):.4f} s, "
          f"{float(cand.get('predicted_memory_bytes', 0)) / 1e6:.1f} MB "
          f"{cand.get('rejected', 'CHOSEN')}")
PY
done
