#!/usr/bin/env bash
# The main job: starts a local coordinator and worker (deploy/local), submits
# the Fashion-MNIST MLP of examples/fmnist_mlp.textproto through `aq submit
# --wait`, prints the job's progress and final status with its test
# accuracy, and stops the daemons. Another job spec may be given:
#   ./run.sh examples/fmnist_cnn.textproto
# (For quick experiments in one process: aq train-local JOB --epochs N.)
set -euo pipefail
cd "$(dirname "$0")"
deploy/setup.sh
bazel build --config=opt //client:aq //coordinator:coordinator //worker:worker \
  >/dev/null 2>&1 ||
  bazel build --config=opt //client:aq //coordinator:coordinator //worker:worker
bin="$(bazel info --config=opt bazel-bin 2>/dev/null)"
job="${1:-examples/fmnist_mlp.textproto}"
state="${AQ_STATE_DIR:-$(mktemp -d /tmp/aqueduct-run.XXXXXX)}"
threads="$(nproc)"

address=$(deploy/local/aqueduct-local.sh start --workers 1 --threads "$threads" \
  --state-dir "$state" --bin "$bin")
trap 'deploy/local/aqueduct-local.sh stop --state-dir "$state" --bin "$bin"' EXIT
echo "coordinator at $address (logs in $state)"
"$bin/client/aq" workers --coordinator "$address"
set +e
"$bin/client/aq" submit "$job" --wait --coordinator "$address"
rc=$?
set -e
"$bin/client/aq" jobs --coordinator "$address"
exit "$rc"
