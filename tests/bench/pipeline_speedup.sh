#!/usr/bin/env bash
# Real compute through the daemons: a model (default the MLP
# 784-1024-1024-1024-10, batch 128) on one worker process with one thread,
# then as a 2-stage 1F1B pipeline on two worker processes with one thread
# each, on this machine. Throughput is the coordinator's samples/s for the
# job (steady state from the output stage's reports). Alternates ROUNDS
# times.
#   tests/bench/pipeline_speedup.sh [ROUNDS=2] [SPEC=tests/bench/specs/mlp_speedup.textproto]
set -euo pipefail
cd "$(dirname "$0")/../.."
deploy/setup.sh
bazel build --config=opt //client:aq //coordinator:coordinator //worker:worker \
  >/dev/null 2>&1
bin="$(bazel info --config=opt bazel-bin 2>/dev/null)"
spec="${2:-tests/bench/specs/mlp_speedup.textproto}"
state=$(mktemp -d)
address=$(deploy/local/aqueduct-local.sh start --workers 2 --threads 1 \
  --state-dir "$state" --bin "$bin")
trap 'deploy/local/aqueduct-local.sh stop --state-dir "$state" --bin "$bin"' EXIT
rate() {
  local workers=$1
  sed "s/^seed: 1$/seed: 1\npipeline { workers: $workers schedule: \"1f1b_stashed\" }/" \
    "$spec" >"$state/job-$workers.textproto"
  local id
  id=$("$bin/client/aq" submit "$state/job-$workers.textproto" --coordinator "$address")
  "$bin/client/aq" watch "$id" --coordinator "$address" >/dev/null
  "$bin/client/aq" status "$id" --coordinator "$address" --output json |
    sed -E 's/.*"samples_per_second":([0-9.]+),"stages".*/\1/'
}
ratios=()
for r in $(seq "${1:-2}"); do
  one=$(rate 1)
  two=$(rate 2)
  awk -v a="$one" -v b="$two" 'BEGIN { printf "one worker: %.1f samples/s, 2-stage pipeline: %.1f samples/s, speed-up %.2fx\n", a, b, b / a }'
  ratios+=("$(awk -v a="$one" -v b="$two" 'BEGIN { printf "%.4f", b / a }')")
done
printf '%s\n' "${ratios[@]}" | sort -n |
  awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
         printf "speed-up over %d rounds: median %.2fx, min %.2fx, max %.2fx\n", NR, m, v[1], v[NR] }'
