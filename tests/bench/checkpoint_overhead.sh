#!/usr/bin/env bash
# Checkpoint overhead on the Fashion-MNIST pipeline (opt build): the job
# (examples/fmnist_mlp_pipeline.textproto, 4 workers, EPOCHS epochs, default
# 2) run without checkpoints and with a checkpoint every ~SECONDS s of
# training (default 30: every_steps set from the first run's step rate),
# alternating twice on the same cluster; prints the throughputs (the jobs'
# samples/s), their ratio, and the checkpoints committed.
#   tests/bench/checkpoint_overhead.sh [SECONDS] [EPOCHS]
set -euo pipefail
cd "$(dirname "$0")/../.."
every_s="${1:-30}"
epochs="${2:-2}"
deploy/setup.sh
bazel build --config=opt //client:aq //coordinator:coordinator //worker:worker \
  >/dev/null 2>&1 ||
  bazel build --config=opt //client:aq //coordinator:coordinator //worker:worker
bin="$(bazel info --config=opt bazel-bin 2>/dev/null)"
state=$(mktemp -d /tmp/aqueduct-ckpt-bench.XXXXXX)
threads=1
. tests/bench/cluster_lib.sh
trap stop_cluster EXIT
start_coordinator 127.0.0.1:0
for i in 1 2 3 4; do start_worker "$i"; done
wait_healthy 4
spec="$state/job.textproto"
sed -e "s/^epochs: 2/epochs: $epochs/" examples/fmnist_mlp_pipeline.textproto >"$spec"

run() {
  local job
  job=$("$bin/client/aq" submit "$spec" --coordinator "$address" "$@" | head -1)
  "$bin/client/aq" watch "$job" --coordinator "$address" >/dev/null || true
  [ "$(job_field "$job" state)" = JOB_SUCCEEDED ] || { echo "job $job did not succeed" >&2; exit 1; }
  echo "$job"
}
# Alternating, twice: plain, checkpointed, plain, checkpointed.
plain=$(run)
rate=$(job_field "$plain" samples_per_second)
every=$(python3 -c "print(max(1, round($rate / 64 * $every_s)))")
checked=$(run --checkpoint_dir "$state/checkpoints" --checkpoint_every "$every")
rate2=$(job_field "$checked" samples_per_second)
plain_b=$(run)
rate3=$(job_field "$plain_b" samples_per_second)
checked_b=$(run --checkpoint_dir "$state/checkpoints" --checkpoint_every "$every")
rate4=$(job_field "$checked_b" samples_per_second)
echo "no checkpoints:  $rate, $rate3 samples/s ($plain, $plain_b)"
echo "a checkpoint every $every steps (~${every_s} s): $rate2, $rate4 samples/s ($checked, $checked_b)"
python3 -c "print(f'ratio (sum over both pairs): {($rate2 + $rate4) / ($rate + $rate3):.4f}')"
for j in "$checked" "$checked_b"; do
  echo "$j: $(grep -c "job $j: checkpoint version .* committed" "$state/coordinator.log") checkpoints committed"
done
"$bin/client/aq" checkpoints "$checked_b" --coordinator "$address"
