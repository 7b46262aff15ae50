#!/usr/bin/env bash
# The LLaMA example (examples/llama_fortunes.textproto: RMSNorm, rotary
# embeddings, SwiGLU, grouped-query attention; AdamW with parameter groups,
# clipping at 1.0 across the stages, 2 accumulated passes per step) through
# 4 worker daemons (a coordinator and 4 workers of one thread on this
# machine, the spec's 1f1b_flush pipeline) against PyTorch
# (tests/bench/torch_gpt.py, the same model, data, optimizer and initial
# weights):
#  (a) STEPS (50) steps: every step's loss from the daemons (the job's loss
#      curve) and from aq train-local, each against PyTorch's; exits 1 when
#      either differs by more than 1e-4 (relative);
#  (b) with FULL steps (FULL=2000 for the whole job; empty: skip): the
#      validation loss of the daemons' job and of PyTorch, from the same
#      initial weights, on the spec's 256 validation windows.
# Another spec: SPEC=FILE WORKERS=N (a spec without a pipeline block runs
# as a 1f1b_flush pipeline of N workers) TOL=1e-5, e.g. the GPT with
# AdamW, parameter groups, clipping and accumulation on 2 stages:
#   SPEC=tests/bench/specs/gpt_train_features.textproto WORKERS=2 TOL=1e-5 \
#     tests/bench/llama_vs_torch.sh
#
#   tests/bench/llama_vs_torch.sh [STEPS=50] [FULL=]
set -euo pipefail
cd "$(dirname "$0")/../.."
steps="${1:-50}"
full="${2:-}"
spec="${SPEC:-examples/llama_fortunes.textproto}"
workers="${WORKERS:-4}"
tolerance="${TOL:-1e-4}"
# shellcheck source=tests/bench/bench_lib.sh
source tests/bench/bench_lib.sh
aq="$BIN/client/aq"
py=/usr/bin/python3
torch_gpt=tests/bench/torch_gpt.py

"$BIN/coordinator/coordinator" --listen 127.0.0.1:0 --port_file "$tmp/port" \
  --state_dir "$tmp/state" >"$tmp/coordinator.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.1; done
addr="127.0.0.1:$(cat "$tmp/port")"
for w in $(seq "$workers"); do
  "$BIN/worker/worker" --coordinator "$addr" --worker_id "w$w" \
    --listen 127.0.0.1:0 --threads 1 --data_root "/usr/share/games/fortunes,$tmp" \
    >"$tmp/w$w.log" 2>&1 &
  pids+=($!)
done
wait_healthy "$addr" "$workers" || { echo "workers never healthy" >&2; exit 1; }

# daemons SPEC OUT: runs SPEC from the saved initial weights on the 4
# workers; its status (JSON) into OUT.
daemons() {
  local id
  id=$("$aq" submit "$1" --coordinator "$addr" \
    --set "init_weights=$tmp/init.safetensors")
  "$aq" watch "$id" --coordinator "$addr" >/dev/null 2>&1 || true
  "$aq" status "$id" --coordinator "$addr" --output json >"$2"
  grep -q JOB_SUCCEEDED "$2" || { "$aq" status "$id" --coordinator "$addr" >&2; exit 1; }
}

# The job cut to `steps` steps (its schedule over those steps), on the
# workers.
sed -e "s/^max_steps: .*/max_steps: $steps/" -e "s/^eval_every: .*/eval_every: 0/" \
  "$spec" >"$tmp/short.textproto"
grep -q "^pipeline {" "$spec" ||
  printf 'pipeline {\n  workers: %d\n  schedule: "1f1b_flush"\n}\n' "$workers" \
    >>"$tmp/short.textproto"
"$aq" train-local "$spec" --max_steps 0 --save_weights "$tmp/init.safetensors" >/dev/null
daemons "$tmp/short.textproto" "$tmp/short-status.json"
$py - "$tmp/short-status.json" >"$tmp/daemon-losses.json" <<'PY'
import json, sys
status = json.load(open(sys.argv[1]))
if status.get("state") != "JOB_SUCCEEDED":
    sys.exit("the job did not succeed: %s" % status.get("state"))
curve = sorted(status["loss_curve"], key=lambda p: int(p.get("minibatch", 0)))
print(json.dumps({"loss": [float(p["loss"]) for p in curve]}))
PY
"$aq" train-local "$tmp/short.textproto" --init_weights "$tmp/init.safetensors" \
  --threads 2 --output json >"$tmp/local-losses.json"
status=0
for who in daemon local; do
  echo "== $who ($([ $who = daemon ] && echo "$workers worker daemons" || echo "aq train-local")) against PyTorch, $steps steps"
  $py "$torch_gpt" equivalence --spec "$tmp/short.textproto" --init "$tmp/init.safetensors" \
    --aq_losses "$tmp/$who-losses.json" --steps "$steps" --threads 2 \
    --tolerance "$tolerance" >"$tmp/eq-$who.txt" || status=1
  tail -1 "$tmp/eq-$who.txt"
done

if [ -n "$full" ]; then
  sed -e "s/^max_steps: .*/max_steps: $full/" -e "s/^eval_every: .*/eval_every: 0/" \
    "$spec" >"$tmp/full.textproto"
  daemons "$tmp/full.textproto" "$tmp/full-status.json"
  $py "$torch_gpt" accuracy --spec "$tmp/full.textproto" --steps "$full" \
    --init "$tmp/init.safetensors" --threads 2 >"$tmp/torch-full.json"
  $py - "$tmp/full-status.json" "$tmp/torch-full.json" "$full" <<'PY'
import json, math, sys
aq = json.load(open(sys.argv[1]))
torch = json.load(open(sys.argv[2]))
a, t = float(aq["test_loss"]), float(torch["val_loss"])
print("validation loss after %s steps: 4 daemons %.4f (perplexity %.2f, %.1f samples/s), "
      "pytorch %.4f (perplexity %.2f, %.0f s); difference %+.4f" % (
          sys.argv[3], a, math.exp(a), float(aq.get("samples_per_second", 0)), t,
          math.exp(t), torch["train_seconds"], a - t))
PY
fi
exit "$status"
