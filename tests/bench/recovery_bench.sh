#!/usr/bin/env bash
# Recovery time from SIGKILL of a worker to the next committed step, on
# one host (opt build): the Fashion-MNIST pipeline (examples/fmnist_mlp_pipeline.textproto,
# 4 workers, 1F1B with weight stashing) with a spare worker and a
# checkpoint every 50 steps; a random worker of the job is killed ROUNDS
# times (default 5), ~15 s apart (the spare takes its place), and started
# again once the job has recovered, to be the next spare. Each recovery's parts come from the
# coordinator's log: detection (kill -> restart decided), re-plan and
# assignment (-> the new attempt running), restore and warm-up (-> the
# output stage's first committed step). Prints each round and the medians.
#   tests/bench/recovery_bench.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-5}"
deploy/setup.sh
bazel build --config=opt //client:aq //coordinator:coordinator //worker:worker \
  >/dev/null 2>&1 ||
  bazel build --config=opt //client:aq //coordinator:coordinator //worker:worker
bin="$(bazel info --config=opt bazel-bin 2>/dev/null)"
state=$(mktemp -d /tmp/aqueduct-recovery.XXXXXX)
threads=1
. tests/bench/cluster_lib.sh
trap stop_cluster EXIT

start_coordinator 127.0.0.1:0
for i in 1 2 3 4 5; do start_worker "$i"; done
wait_healthy 5
spec="$state/job.textproto"
sed -e 's/^epochs: 2/epochs: 20/' examples/fmnist_mlp_pipeline.textproto >"$spec"
echo 'fault_tolerance { max_restarts: 100 }' >>"$spec"
job=$("$bin/client/aq" submit "$spec" --coordinator "$address" \
  --checkpoint_dir "$state/checkpoints" --checkpoint_every 50 | head -1)
echo "job $job on $address (logs in $state)"
wait_step "$job" 100 300

median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
: >"$state/rounds"
for round in $(seq "$rounds"); do
  sleep 15
  victim=$(job_workers "$job" | shuf -n 1)
  [ -n "$victim" ] || { echo "no worker runs $job" >&2; exit 1; }
  n="${victim#local-}"
  attempt=$(job_field "$job" attempt)
  attempt=$((${attempt:-0} + 1))
  t_kill=$(date +%s.%N)
  kill -KILL "$(cat "$state/worker-$n.pid")"
  line_first=""
  for _ in $(seq 600); do
    line_first=$(grep "job $job attempt $attempt: first step after the restart" "$state/coordinator.log" || true)
    [ -n "$line_first" ] && break
    sleep 0.1
  done
  [ -n "$line_first" ] || { echo "round $round: no step after the restart in 60 s" >&2; exit 1; }
  start_worker "$n"  # Back (as a supervisor would restart it): the next spare.
  line_restart=$(grep "job $job: restart $attempt of" "$state/coordinator.log")
  line_running=$(grep "job $job attempt $attempt running on" "$state/coordinator.log")
  t_restart=$(log_time "$line_restart")
  t_running=$(log_time "$line_running")
  t_first=$(log_time "$line_first")
  python3 - "$round" "$victim" "$t_kill" "$t_restart" "$t_running" "$t_first" <<'PY' | tee -a "$state/rounds"
import sys
r, victim, kill, restart, running, first = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:])
print(f"{r} {victim} total {first - kill:.3f} detection {restart - kill:.3f} "
      f"replan {running - restart:.3f} restore+warmup {first - running:.3f}")
PY
done
for part in total detection replan restore+warmup; do
  m=$(awk -v p="$part" '{ for (i = 1; i < NF; i++) if ($i == p) print $(i + 1) }' "$state/rounds" | median)
  echo "median $part: $m s"
done
"$bin/client/aq" cancel "$job" --coordinator "$address" >/dev/null || true
"$bin/client/aq" status "$job" --coordinator "$address" | grep -E "^restart" | head -"$rounds"
