#!/usr/bin/env bash
# Counts test cases in Bazel's test.xml files (gtest and sh_test results)
# under a testlogs directory and prints
#   tests: N passed, N failed, N skipped
#
# Usage: tests/summarize.sh [--labels FILE] [--no_runs] [DIR]
#   DIR        the testlogs directory (default bazel-testlogs)
#   --labels   count only these test targets (one label a line, as
#              `bazel query 'tests(//...)'` prints them), so that results
#              left behind by targets that no longer exist do not count
#   --no_runs  leave out run_N_of_M/ results of earlier --runs_per_test runs
set -uo pipefail
labels="" no_runs=0
while [ $# -gt 0 ]; do
  case "$1" in
    --labels) labels="$2"; shift 2 ;;
    --no_runs) no_runs=1; shift ;;
    *) break ;;
  esac
done
dir="${1:-bazel-testlogs}"

# The directories whose test.xml files count.
roots=()
if [ -n "$labels" ]; then
  while IFS= read -r label; do
    label="${label#//}"
    roots+=("$dir/${label/://}")
  done <"$labels"
else
  roots=("$dir")
fi

passed=0 failed=0 skipped=0
while IFS= read -r -d '' xml; do
  if [ "$no_runs" -eq 1 ] && [[ "$xml" == */run_*_of_*/* ]]; then continue; fi
  cases=$(grep -c '<testcase ' "$xml" || true)
  fails=$(grep -c -E '<failure|<error ' "$xml" || true)
  skips=$(grep -c '<skipped' "$xml" || true)
  # A test case counts once even with several failure messages.
  fails_cases=$(awk '/<testcase /{f=0} /<failure|<error /{if(!f){n++;f=1}} END{print n+0}' "$xml")
  [ "$fails_cases" -lt "$fails" ] && fails=$fails_cases
  passed=$((passed + cases - fails - skips))
  failed=$((failed + fails))
  skipped=$((skipped + skips))
done < <(for r in "${roots[@]}"; do
  [ -e "$r" ] && find -L "$r" -name test.xml -print0 2>/dev/null
done)
echo "tests: ${passed} passed, ${failed} failed, ${skipped} skipped"
