#!/usr/bin/env bash
# Counts test cases in Bazel's test.xml files (gtest and sh_test results)
# under the given testlogs directory and prints
#   tests: N passed, N failed, N skipped
set -uo pipefail
dir="${1:-bazel-testlogs}"
passed=0 failed=0 skipped=0
while IFS= read -r -d '' xml; do
  cases=$(grep -c '<testcase ' "$xml" || true)
  fails=$(grep -c -E '<failure|<error ' "$xml" || true)
  skips=$(grep -c '<skipped' "$xml" || true)
  # A test case counts once even with several failure messages.
  fails_cases=$(awk '/<testcase /{f=0} /<failure|<error /{if(!f){n++;f=1}} END{print n+0}' "$xml")
  [ "$fails_cases" -lt "$fails" ] && fails=$fails_cases
  passed=$((passed + cases - fails - skips))
  failed=$((failed + fails))
  skipped=$((skipped + skips))
done < <(find -L "$dir" -name test.xml -print0 2>/dev/null)
echo "tests: ${passed} passed, ${failed} failed, ${skipped} skipped"
