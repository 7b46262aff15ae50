#!/usr/bin/env bash
# Checkpoint overhead on the main job (opt build): the main job
# (examples/fmnist_mlp_pipeline.textproto, 4 workers) run without
# checkpoints, then with a checkpoint every ~SECONDS s of training (default
# 30: every_steps set from the first run's step rate), side by side on the
# same cluster; prints both throughputs (the job's samples/s) and their
# ratio, and the checkpoints the second run committed.
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
plain=$(run)
rate=$(job_field "$plain" samples_per_second)
steps_per_s=$(python3 -c "print($rate / 64)")
every=$(python3 -c "print(max(1, round($steps_per_s * $every_s)))")
checked=$(run --checkpoint_dir "$state/checkpoints" --checkpoint_every "$every")
rate2=$(job_field "$checked" samples_per_second)
echo "no checkpoints:               $rate samples/s ($plain)"
echo "a checkpoint every $every steps (~${every_s} s): $rate2 samples/s ($checked)"
python3 -c "print(f'ratio: {$rate2 / $rate:.4f}')"
grep -c "job $checked: checkpoint version .* committed" "$state/coordinator.log" |
  sed 's/^/checkpoints committed: /'
"$bin/client/aq" checkpoints "$checked" --coordinator "$address"
