#!/usr/bin/env bash
# Starts a coordinator (opt build) on loopback and runs control_plane_load
# against it: 1,000 simulated workers registering, then heartbeating at 1 Hz
# for 20 s while a client polls ListWorkers and GetJob.
#   tests/bench/control_plane_load.sh [WORKERS=1000] [SECONDS=20] [CLIENT_THREADS=4]
set -euo pipefail
cd "$(dirname "$0")/../.."
deploy/setup.sh
bazel build --config=opt //coordinator:coordinator //tests/bench:control_plane_load \
  >/dev/null 2>&1 ||
  bazel build --config=opt //coordinator:coordinator //tests/bench:control_plane_load
bin="$(bazel info --config=opt bazel-bin 2>/dev/null)"
dir=$(mktemp -d)
"$bin/coordinator/coordinator" --listen 127.0.0.1:0 --port_file "$dir/port" \
  --log_level warn >"$dir/coordinator.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.1; done
"$bin/tests/bench/control_plane_load" --coordinator "127.0.0.1:$(cat "$dir/port")" \
  --pid "$pid" --workers "${1:-1000}" --seconds "${2:-20}" --threads "${3:-4}"
