#!/usr/bin/env bash
# Starts a coordinator (opt build) on loopback and runs control_plane_load
# against it: simulated workers registering all at once, then heartbeating
# at 1 Hz for a while as a client pages through ListWorkers and polls GetJob.
#
#   tests/bench/control_plane_load.sh [--secure] [WORKERS=1000] [SECONDS=20]
#                                     [CLIENT_THREADS=4] [CONNECTIONS=THREADS]
#
# --secure: TLS and bearer tokens, as docs/security.md sets them up. A
# development CA and certificates from deploy/tls/make-dev-ca.sh, and a
# token file with one worker credential per simulated worker (worker-0 ...
# worker-N-1, 256-bit random tokens) and a user; the coordinator runs with
# --tls_ca/--tls_cert/--tls_key and --tokens_file, each simulated worker
# calls with its own token and the worker certificate (mutual TLS).
# Without it: plaintext and no authentication (the coordinator's loopback
# development mode).
set -euo pipefail
cd "$(dirname "$0")/../.."
secure=0
if [ "${1:-}" = "--secure" ]; then secure=1; shift; fi
workers="${1:-1000}" seconds="${2:-20}" threads="${3:-4}"
connections="${4:-$threads}"
deploy/setup.sh
targets=(//coordinator:coordinator //tests/bench:control_plane_load)
bazel build --config=opt "${targets[@]}" >/dev/null 2>&1 ||
  bazel build --config=opt "${targets[@]}"
bin="$(bazel info --config=opt bazel-bin 2>/dev/null)"
dir=$(mktemp -d)
coordinator_flags=() load_flags=()
if [ "$secure" = 1 ]; then
  tls="$dir/tls"
  deploy/tls/make-dev-ca.sh "$tls" --workers 0 --users bench >/dev/null
  # One credential per simulated worker: make-dev-ca.sh would run openssl
  # once per token, so the worker tokens are cut from one random draw.
  openssl rand -hex $((32 * workers)) | fold -w 64 |
    awk '{ printf "%s worker worker-%d\n", $1, NR - 1 }' >>"$tls/tokens"
  coordinator_flags=(--tls_ca "$tls/ca.pem" --tls_cert "$tls/coordinator.pem"
    --tls_key "$tls/coordinator.key" --tokens_file "$tls/tokens")
  load_flags=(--tls_ca "$tls/ca.pem" --tls_cert "$tls/worker.pem"
    --tls_key "$tls/worker.key" --tokens_file "$tls/tokens")
fi
"$bin/coordinator/coordinator" --listen 127.0.0.1:0 --port_file "$dir/port" \
  --log_level warn "${coordinator_flags[@]}" >"$dir/coordinator.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -rf "$dir"' EXIT
for _ in $(seq 100); do [ -s "$dir/port" ] && break; sleep 0.1; done
[ -s "$dir/port" ] || { cat "$dir/coordinator.log" >&2; exit 1; }
"$bin/tests/bench/control_plane_load" --coordinator "127.0.0.1:$(cat "$dir/port")" \
  --pid "$pid" --workers "$workers" --seconds "$seconds" --threads "$threads" \
  --connections "$connections" "${load_flags[@]}"
