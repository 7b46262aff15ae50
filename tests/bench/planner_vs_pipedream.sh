#!/usr/bin/env bash
# Time of Aqueduct's partitioner on seeded random chains (200 layers on 8, 16
# and 32 workers; 1,000 layers on 1,024 workers in two levels), and, when
# PIPEDREAM_OPTIMIZER_DIR points at a checkout of PipeDream's optimizer/
# directory (msr-fiddle/pipedream; not shipped with Aqueduct), PipeDream's
# own optimizer_graph_hierarchical.py on the very same profile files, side by
# side, with both objective values.
#
#   PIPEDREAM_OPTIMIZER_DIR=/path/to/pipedream/optimizer \
#     tests/bench/planner_vs_pipedream.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
deploy/setup.sh
bazel build --config=opt //tests/bench:planner_bench >/dev/null 2>&1 ||
  bazel build --config=opt //tests/bench:planner_bench
bin="$(bazel info --config=opt bazel-bin 2>/dev/null)/tests/bench/planner_bench"
dir=$(mktemp -d)
echo "== Aqueduct (tests/bench/planner_bench, median of 3)"
"$bin" --write-dir "$dir" --repeat 3 | tee "$dir/aqueduct.jsonl"

if [ -z "${PIPEDREAM_OPTIMIZER_DIR:-}" ]; then
  echo "PIPEDREAM_OPTIMIZER_DIR is not set: PipeDream's optimizer was not run."
  exit 0
fi
echo
echo "== PipeDream's optimizer_graph_hierarchical.py (wall time of the process)"
py_start=$( { /usr/bin/time -f %e /usr/bin/python3 -c 'import numpy' ; } 2>&1 )
echo "python3 start-up with numpy import alone: ${py_start} s"
for workers in 8 16 32; do
  out=$(cd "$PIPEDREAM_OPTIMIZER_DIR" &&
    { /usr/bin/time -f "wall %e" /usr/bin/python3 optimizer_graph_hierarchical.py \
      -n "$workers" -f "$dir/chain200.txt" ; } 2>&1)
  objective=$(echo "$out" | sed -n 's/^Time per stage in pipeline: //p')
  wall=$(echo "$out" | sed -n 's/^wall //p')
  ours=$(grep "\"layers\":200,\"workers\":\"$workers\"" "$dir/aqueduct.jsonl")
  our_s=$(echo "$ours" | sed -E 's/.*"seconds_median":([0-9.e-]+).*/\1/')
  our_obj=$(echo "$ours" | sed -E 's/.*"time_per_minibatch_s":([0-9.e+-]+).*/\1/')
  awk -v w="$workers" -v pw="$wall" -v po="$objective" -v as="$our_s" -v ao="$our_obj" 'BEGIN {
    d = po - ao; if (d < 0) d = -d
    printf "200 layers, %2d workers: PipeDream %.3f s, Aqueduct %.4f s, %.0fx; objective %s vs %s (rel. diff %.1e)\n",
      w, pw, as, pw / as, po, ao, d / po }'
done
