#!/usr/bin/env bash
# Runs the whole test suite: installs what is missing, then `bazel test //...`
# and prints a one-line summary of the test cases. Extra arguments go to
# bazel test (e.g. ./test.sh --test_filter=LayerGradTest.*).
set -uo pipefail
cd "$(dirname "$0")"
deploy/setup.sh || exit 1

bazel test //... "$@"
status=$?
# Only the tests that exist now count (not results left by removed
# targets), and earlier --runs_per_test runs only when this one asked.
labels=$(mktemp)
bazel query 'tests(//...)' 2>/dev/null >"$labels"
runs="--no_runs"
case " $* " in *--runs_per_test*) runs="" ;; esac
tests/summarize.sh --labels "$labels" $runs bazel-testlogs
rm -f "$labels"
exit "$status"
