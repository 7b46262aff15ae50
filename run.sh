#!/usr/bin/env bash
# The main job: starts a local coordinator and as many workers as the job
# asks for (deploy/local), submits examples/gpt_fortunes.textproto (a small
# GPT on Debian's fortunes, a 4-stage 1F1B pipeline with a flush over 4
# worker daemons, its head tied to its token embedding across the first and
# last stage) with `aq submit --wait`, checkpointing every 500 steps into
# the state directory, which shows its progress and prints the final status
# with the validation loss; then fetches the trained model with `aq
# weights` and ends with text sampled from it (`aq generate`), says where
# the model is, and stops the daemons. Another job spec may be given:
#   ./run.sh examples/fmnist_mlp_pipeline.textproto  (Fashion-MNIST MLP)
#   ./run.sh examples/fmnist_mlp.textproto           (one worker)
# For an image job the fetched model is evaluated on its own instead
# (`aq train-local --max_steps 0 --init_weights`).
# (For quick experiments in one process: aq train-local JOB --epochs N.)
set -euo pipefail
cd "$(dirname "$0")"
deploy/setup.sh
bazel build --config=opt //client:aq //coordinator:coordinator //worker:worker \
  >/dev/null 2>&1 ||
  bazel build --config=opt //client:aq //coordinator:coordinator //worker:worker
bin="$(bazel info --config=opt bazel-bin 2>/dev/null)"
job="${1:-examples/gpt_fortunes.textproto}"
state="${AQ_STATE_DIR:-$(mktemp -d /tmp/aqueduct-run.XXXXXX)}"
mkdir -p "$state" && state="$(cd "$state" && pwd)"  # Absolute: workers write there.
workers=$(sed -n 's/^ *workers: *\([0-9]*\).*/\1/p' "$job" | head -1)
workers="${workers:-1}"
# One thread per worker when they share the machine's cores.
threads=1
[ "$workers" -eq 1 ] && threads="$(nproc)"

# Token files (data.text.token_dtype, written by aq tokenize): the workers
# may read their directories.
roots=()
for f in $(sed -n 's/^ *\(files\|val_file\|tokenizer_model\): *"\(\/[^"]*\)".*/\2/p' "$job"); do
  case "$f" in /usr/share/*) continue ;; esac
  if [ ! -e "$f" ]; then
    echo "run.sh: $f does not exist; $job's header says how to write it" \
      "(aq tokenize)" >&2
    exit 1
  fi
  roots+=(--data-root "$(dirname "$f")")
done
address=$(deploy/local/aqueduct-local.sh start --workers "$workers" \
  --threads "$threads" --state-dir "$state" --bin "$bin" ${roots[@]+"${roots[@]}"})
trap 'deploy/local/aqueduct-local.sh stop --state-dir "$state" --bin "$bin"' EXIT
# TLS and the admin token for aq (the local cluster runs with them).
# shellcheck source=/dev/null
source "$state/aq.env"
echo "coordinator at $address (logs in $state)"
if [ -s "$state/dashboard.url" ]; then
  echo "dashboard: $(cat "$state/dashboard.url") (open it once with" \
    "?token=<the token in $state/tls/token.admin>; its certificate is" \
    "signed by the development CA $state/tls/ca.pem)"
fi
"$bin/client/aq" workers --coordinator "$address"
set +e
"$bin/client/aq" submit "$job" --wait --coordinator "$address" \
  --checkpoint_dir "$state/checkpoints" --checkpoint_every 500
rc=$?
set -e
"$bin/client/aq" jobs --coordinator "$address"
[ "$rc" -eq 0 ] || exit "$rc"
id=$("$bin/client/aq" jobs --coordinator "$address" | awk 'END { print $1 }')
"$bin/client/aq" weights "$id" -o "$state/model.safetensors" \
  --coordinator "$address"
if grep -q "^ *text *{" "$job"; then
  "$bin/client/aq" status "$id" --coordinator "$address" | grep -i "validation" || true
  echo "a sample from the trained model (aq generate --seed 1):"
  "$bin/client/aq" generate --spec "$job" --weights "$state/model.safetensors" \
    --prompt "Q:" --tokens 400 --temperature 0.8 --top_k 20 --seed 1
else
  echo "the trained model, evaluated from the file alone:"
  "$bin/client/aq" train-local "$job" --max_steps 0 \
    --init_weights "$state/model.safetensors" | grep "test accuracy"
fi
echo "trained model: $state/model.safetensors"
