#!/usr/bin/env bash
# The main job: trains the Fashion-MNIST MLP of examples/fmnist_mlp.textproto
# and prints its test accuracy. Until the coordinator and worker daemons
# exist this runs `aq train-local` (one process); arguments are passed to it
# (e.g. ./run.sh --epochs 5, or ./run.sh examples/fmnist_cnn.textproto).
set -euo pipefail
cd "$(dirname "$0")"
deploy/setup.sh
bazel build --config=opt //client:aq >/dev/null 2>&1 ||
  bazel build --config=opt //client:aq
job=examples/fmnist_mlp.textproto
if [ "$#" -gt 0 ] && [ "${1#-}" = "$1" ]; then
  job="$1"
  shift
fi
bin="$(bazel info --config=opt bazel-bin 2>/dev/null)"
exec "$bin/client/aq" train-local "$job" "$@"
