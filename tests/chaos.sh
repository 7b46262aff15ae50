#!/usr/bin/env bash
# A bounded chaos run: a job on a local cluster (opt build unless
# AQ_CHAOS_BIN names binaries) while a random worker of the job is SIGKILLed
# every K steps (restarted at once, as a supervisor would, so it comes back
# as a new incarnation) and the coordinator is SIGKILLed and restarted on
# the same address. The job must SUCCEED; prints its restarts, checkpoints
# and test accuracy, and checks that no committed checkpoint version appears
# twice and the latest one verifies.
#   tests/chaos.sh [SPEC] [--every K] [--worker-kills N] [--coordinator-kills M]
# Defaults: the Fashion-MNIST pipeline (examples/fmnist_mlp_pipeline.textproto), K=300,
# N=3, M=2, a checkpoint every 100 steps.
set -euo pipefail
cd "$(dirname "$0")/.."
spec_in=examples/fmnist_mlp_pipeline.textproto
every=300 worker_kills=3 coordinator_kills=2 checkpoint_every=100
while [ $# -gt 0 ]; do
  case "$1" in
    --every) every="$2"; shift 2 ;;
    --worker-kills) worker_kills="$2"; shift 2 ;;
    --coordinator-kills) coordinator_kills="$2"; shift 2 ;;
    --checkpoint-every) checkpoint_every="$2"; shift 2 ;;
    -*) echo "chaos.sh: unknown flag $1" >&2; exit 2 ;;
    *) spec_in="$1"; shift ;;
  esac
done
if [ -n "${AQ_CHAOS_BIN:-}" ]; then
  bin="$AQ_CHAOS_BIN"
else
  deploy/setup.sh
  bazel build --config=opt //client:aq //coordinator:coordinator //worker:worker \
    >/dev/null 2>&1 ||
    bazel build --config=opt //client:aq //coordinator:coordinator //worker:worker
  bin="$(bazel info --config=opt bazel-bin 2>/dev/null)"
fi
state=$(mktemp -d "${TEST_TMPDIR:-/tmp}/aqueduct-chaos.XXXXXX")
threads=1
. tests/bench/cluster_lib.sh
trap stop_cluster EXIT
workers=$(sed -n 's/^ *workers: *\([0-9]*\).*/\1/p' "$spec_in" | head -1)
workers="${workers:-1}"
spec="$state/job.textproto"
cp "$spec_in" "$spec"
echo "fault_tolerance { max_restarts: $((worker_kills + 2)) }" >>"$spec"

start_coordinator 127.0.0.1:0
listen="$address"
for i in $(seq "$workers"); do start_worker "$i"; done
wait_healthy "$workers"
job=$("$bin/client/aq" submit "$spec" --coordinator "$address" \
  --checkpoint_dir "$state/checkpoints" --checkpoint_every "$checkpoint_every" | head -1)
echo "chaos: job $job on $address (logs in $state)"

kill_worker() {
  local victim n
  victim=$(job_workers "$job" | shuf -n 1)
  [ -n "$victim" ] || return 0
  n="${victim#local-}"
  echo "chaos: step $(job_step "$job"): SIGKILL worker $victim"
  kill -KILL "$(cat "$state/worker-$n.pid")"
  start_worker "$n"
}
kill_coordinator() {
  echo "chaos: step $(job_step "$job"): SIGKILL the coordinator"
  kill -KILL "$coordinator_pid"
  for _ in $(seq 50); do kill -0 "$coordinator_pid" 2>/dev/null || break; sleep 0.1; done
  sleep 1
  start_coordinator "$listen"
}

# The kills, interleaved: worker, coordinator, worker, coordinator, ...
order=()
w=0 c=0
while [ "$w" -lt "$worker_kills" ] || [ "$c" -lt "$coordinator_kills" ]; do
  [ "$w" -lt "$worker_kills" ] && order+=(worker) && w=$((w + 1))
  [ "$c" -lt "$coordinator_kills" ] && order+=(coordinator) && c=$((c + 1))
done
target=0
for event in "${order[@]}"; do
  target=$((target + every))
  # Steps count from the checkpoint a restart rolled back to.
  wait_step "$job" "$target" 600 || break
  if [ "$event" = worker ]; then kill_worker; else kill_coordinator; fi
  wait_healthy "$workers" || true
done
deadline=$((SECONDS + 1800))
while [ "$SECONDS" -lt "$deadline" ]; do
  state_now=$(job_field "$job" state)
  case "$state_now" in JOB_SUCCEEDED | JOB_FAILED | JOB_CANCELLED) break ;; esac
  sleep 1
done
"$bin/client/aq" status "$job" --coordinator "$address"
"$bin/client/aq" checkpoints "$job" --coordinator "$address" --output json >"$state/checkpoints.json"
python3 - "$state/checkpoints.json" <<'PY'
import json, sys
versions = [int(c["version"]) for c in json.load(open(sys.argv[1])).get("checkpoints", [])]
assert len(versions) == len(set(versions)), f"a version committed twice: {versions}"
assert versions == sorted(versions), f"versions out of order: {versions}"
print(f"chaos: committed checkpoints kept: {versions}")
PY
latest=$(ls -d "$state/checkpoints/$job"/v* 2>/dev/null | sort | while read -r d; do
  [ -f "$d/manifest.json" ] && echo "$d"; done | tail -1)
if [ -n "$latest" ]; then "$bin/client/aq" verify-checkpoint "$latest"; fi
[ "$(job_field "$job" state)" = JOB_SUCCEEDED ] || { echo "chaos: the job did not succeed" >&2; exit 1; }
echo "chaos: $job SUCCEEDED through $worker_kills worker kills and $coordinator_kills coordinator kills"
