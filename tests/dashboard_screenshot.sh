#!/usr/bin/env bash
# Makes the dashboard's screenshot for the docs (docs/images/dashboard.png,
# 1400x1000): builds the daemons, then runs tests/dashboard_test.sh, whose
# checks must pass, with --screenshot while its 2-stage job trains.
#
#   tests/dashboard_screenshot.sh [PNG]     (default docs/images/dashboard.png)
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-docs/images/dashboard.png}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
mkdir -p "$(dirname "$out")"
bazel build //client:aq //coordinator:coordinator //worker:worker
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
TEST_TMPDIR="$tmp" tests/dashboard_test.sh bazel-bin/client/aq \
  bazel-bin/coordinator/coordinator bazel-bin/worker/worker \
  deploy/tls/make-dev-ca.sh --screenshot "$out"
