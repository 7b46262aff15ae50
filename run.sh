#!/usr/bin/env bash
# The main job: starts a local coordinator and as many workers as the job
# asks for (deploy/local), submits examples/fmnist_mlp_pipeline.textproto (a
# 4-stage 1F1B pipeline with weight stashing over 4 worker daemons) with
# `aq submit --wait`, checkpointing every 200 steps into the state directory,
# which shows its progress and prints the final status with the test
# accuracy; then fetches the trained model with `aq weights`, evaluates the
# file on its own with `aq train-local --max_steps 0 --init_weights`, says
# where it is, and stops the daemons. Another job spec may be given:
#   ./run.sh examples/fmnist_mlp.textproto      (one worker)
# (For quick experiments in one process: aq train-local JOB --epochs N.)
set -euo pipefail
cd "$(dirname "$0")"
deploy/setup.sh
bazel build --config=opt //client:aq //coordinator:coordinator //worker:worker \
  >/dev/null 2>&1 ||
  bazel build --config=opt //client:aq //coordinator:coordinator //worker:worker
bin="$(bazel info --config=opt bazel-bin 2>/dev/null)"
job="${1:-examples/fmnist_mlp_pipeline.textproto}"
state="${AQ_STATE_DIR:-$(mktemp -d /tmp/aqueduct-run.XXXXXX)}"
mkdir -p "$state" && state="$(cd "$state" && pwd)"  # Absolute: workers write there.
workers=$(sed -n 's/^ *workers: *\([0-9]*\).*/\1/p' "$job" | head -1)
workers="${workers:-1}"
# One thread per worker when they share the machine's cores.
threads=1
[ "$workers" -eq 1 ] && threads="$(nproc)"

address=$(deploy/local/aqueduct-local.sh start --workers "$workers" \
  --threads "$threads" --state-dir "$state" --bin "$bin")
trap 'deploy/local/aqueduct-local.sh stop --state-dir "$state" --bin "$bin"' EXIT
echo "coordinator at $address (logs in $state)"
"$bin/client/aq" workers --coordinator "$address"
set +e
"$bin/client/aq" submit "$job" --wait --coordinator "$address" \
  --checkpoint_dir "$state/checkpoints" --checkpoint_every 200
rc=$?
set -e
"$bin/client/aq" jobs --coordinator "$address"
[ "$rc" -eq 0 ] || exit "$rc"
id=$("$bin/client/aq" jobs --coordinator "$address" | awk 'END { print $1 }')
"$bin/client/aq" weights "$id" -o "$state/model.safetensors" \
  --coordinator "$address"
echo "the trained model, evaluated from the file alone:"
"$bin/client/aq" train-local "$job" --max_steps 0 \
  --init_weights "$state/model.safetensors" | grep "test accuracy"
echo "trained model: $state/model.safetensors"
