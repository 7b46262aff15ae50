#!/usr/bin/env bash
# Periodic evaluation off the critical path (issue 25, item 3) through the
# real daemons: a GPT (head tied across the 2 stages) with eval_every 5 on
# 2 worker daemons; the output stage gathers and evaluates each version's
# weights on a thread of its own while training goes on. Every evaluation
# equals `aq train-local`'s at the same step within 1e-5 (the weights were
# taken at the right version), the trace labels each `eval v=N` on the
# output stage's `eval` track, and `aq logs` carries a line per evaluation.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

"$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" \
  --state_dir "$tmp/cstate" --checkpoint_root "$tmp" >"$tmp/coordinator.log" 2>&1 &
pids+=("$!")
wait_until 10 test -s "$tmp/port" || { cat "$tmp/coordinator.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }
for w in e1 e2; do
  "$WORKER" --coordinator "$addr" --worker_id "$w" --listen 127.0.0.1:0 \
    --threads 1 --measure_gemm=false --checkpoint_root "$tmp" >"$tmp/$w.log" 2>&1 &
  pids+=("$!")
done
wait_until 20 eval '[ "$(healthy_count)" -eq 2 ]' || { fail "workers: $(aq workers)"; exit 1; }

cat >"$tmp/gpt.textproto" <<'SPEC'
name: "periodic-eval"
model {
  layers { token_embedding { vocab_size: 128 dim: 16 } }
  layers { position_embedding { context: 8 dim: 16 } }
  layers { transformer_block { dim: 16 heads: 2 } }
  layers { transformer_block { dim: 16 heads: 2 } }
  layers { layer_norm { normalized_shape: 16 } }
  layers { linear { in_features: 16 out_features: 128 bias: false } tie_weight_to: 0 }
}
data { text { files: "/usr/share/games/fortunes/cookie" context: 8 tokenizer: "chars" val_windows: 64 } }
optimizer { adam { lr: 0.01 } }
batch_size: 8
max_steps: 20
eval_every: 5
seed: 2
pipeline { workers: 2 schedule: "1f1b_flush" microbatches: 2 straight: true }
SPEC
"$AQ" train-local "$tmp/gpt.textproto" --output json >"$tmp/local.json" 2>"$tmp/local.err" ||
  { fail "train-local: $(cat "$tmp/local.err")"; exit 1; }
id=$(aq submit "$tmp/gpt.textproto" --wait --output json 2>"$tmp/submit.err" |
  grep -o 'job-[0-9a-f-]*' | head -1)
[ -n "$id" ] || { fail "the job: $(cat "$tmp/submit.err")"; exit 1; }
aq status "$id" --output json >"$tmp/job.json"
# A unique prefix of the id serves as well as the id.
aq trace "${id:0:20}" -o "$tmp/trace.json" >/dev/null 2>&1 || fail "aq trace"
aq logs "${id:0:20}" >"$tmp/logs.txt" 2>&1 || fail "aq logs"
python3 - "$tmp/local.json" "$tmp/job.json" "$tmp/trace.json" <<'PY' || fail "the evaluations"
import json, sys
local = {int(e["step"]): e for e in json.load(open(sys.argv[1]))["evals"]}
job = json.load(open(sys.argv[2]))
assert job["state"] == "JOB_SUCCEEDED", job.get("reason")
got = {int(e.get("step", 0)): e for e in job["evals"]}
for step in (5, 10, 15):
    assert step in got, (step, sorted(got))
    a, b = float(got[step]["loss"]), float(local[step]["loss"])
    assert abs(a - b) <= 1e-5 * abs(b), (step, a, b)
    print(f"evaluation at step {step}: pipeline {a:.6f}, train-local {b:.6f}")
names = [e.get("name", "") for e in json.load(open(sys.argv[3]))["traceEvents"]]
evals = sorted(n for n in names if n.startswith("eval v="))
assert evals == ["eval v=10", "eval v=15", "eval v=5"], evals
PY
for step in 5 10 15; do
  grep -q "evaluation at step $step: validation loss" "$tmp/logs.txt" ||
    fail "aq logs has no line for the evaluation at step $step: $(cat "$tmp/logs.txt")"
done
[ "$fails" -eq 0 ] && echo "periodic_eval_test: passed"
exit $((fails > 0))
