#!/usr/bin/env bash
# Real compute through the daemons: a model (default the MLP
# 784-1024-1024-1024-10, batch 128) on one worker process with one thread,
# then as a 2-stage 1F1B pipeline on two worker processes with one thread
# each, on this machine. Throughput is the coordinator's samples/s for the
# job (steady state from the output stage's reports). Alternates ROUNDS
# times. Each job also reports the share of CPU time the hypervisor took
# from this VM while it ran (steal, from /proc/stat): on the shared VMs this
# was measured on it reached 16% when both cores were busy, and it slows
# the two-worker pipeline more than the one-worker job.
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
# TLS and the admin token for aq (the local cluster runs with them).
# shellcheck source=/dev/null
source "$state/aq.env"
# CPU jiffies "steal total" from /proc/stat's aggregate line.
jiffies() { awk '/^cpu / { t = 0; for (i = 2; i <= 9; i++) t += $i; print $9, t }' /proc/stat; }
steal_since() {
  local s0=$1 t0=$2 s1 t1
  read -r s1 t1 < <(jiffies)
  awk -v s="$((s1 - s0))" -v t="$((t1 - t0))" 'BEGIN { printf "%.1f", (t > 0 ? 100 * s / t : 0) }'
}
rate() {
  local workers=$1
  sed "s/^seed: 1$/seed: 1\npipeline { workers: $workers schedule: \"1f1b_stashed\" }/" \
    "$spec" >"$state/job-$workers.textproto"
  local id
  local s0 t0
  read -r s0 t0 < <(jiffies)
  id=$("$bin/client/aq" submit "$state/job-$workers.textproto" --coordinator "$address")
  "$bin/client/aq" watch "$id" --coordinator "$address" >/dev/null
  local sps
  sps=$("$bin/client/aq" status "$id" --coordinator "$address" --output json |
    sed -E 's/.*"samples_per_second":([0-9.]+),"stages".*/\1/')
  echo "$sps $(steal_since "$s0" "$t0")"
}
ratios=()
quiet=()
for r in $(seq "${1:-2}"); do
  read -r one steal1 < <(rate 1)
  read -r two steal2 < <(rate 2)
  awk -v a="$one" -v b="$two" -v s1="$steal1" -v s2="$steal2" 'BEGIN {
    printf "one worker: %.1f samples/s (steal %.1f%%), 2-stage pipeline: %.1f samples/s (steal %.1f%%), speed-up %.2fx\n",
      a, s1, b, s2, b / a }'
  ratio=$(awk -v a="$one" -v b="$two" 'BEGIN { printf "%.4f", b / a }')
  ratios+=("$ratio")
  if awk -v s1="$steal1" -v s2="$steal2" 'BEGIN { exit !(s1 < 2 && s2 < 2) }'; then
    quiet+=("$ratio")
  fi
done
summary() {
  sort -n | awk -v what="$1" '{ v[NR] = $1 } END {
    if (NR == 0) { printf "speed-up %s: no such rounds\n", what; exit }
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
    printf "speed-up %s over %d rounds: median %.2fx, min %.2fx, max %.2fx\n", what, NR, m, v[1], v[NR] }'
}
printf '%s\n' "${ratios[@]}" | summary "(all rounds)"
printf '%s\n' "${quiet[@]+"${quiet[@]}"}" | sed '/^$/d' | summary "(rounds with steal under 2% in both jobs)"
