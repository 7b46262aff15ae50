#!/usr/bin/env bash
# Runs the whole test suite: installs what is missing, then `bazel test //...`
# and prints a one-line summary of the test cases. Extra arguments go to
# bazel test (e.g. ./test.sh --test_filter=LayerGradTest.*).
set -uo pipefail
cd "$(dirname "$0")"
deploy/setup.sh || exit 1

bazel test //... "$@"
status=$?
tests/summarize.sh bazel-testlogs
exit "$status"
