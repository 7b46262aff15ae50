#!/usr/bin/env bash
# grpc.health.v1 on the real daemons, with TLS and tokens as deployed: the
# plaintext --health_listen server (what Kubernetes' gRPC probe reaches)
# and the daemons' own TLS ports, readiness ("") and liveness ("liveness")
# for the coordinator, a registered worker and one that cannot register.
# Bounded in time; everything is cleaned up.
set -uo pipefail
COORDINATOR="$1" WORKER="$2" PROBE="$3" MAKE_CA="$4"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

"$MAKE_CA" "$tmp/tls" --workers 1 --worker-prefix h --first 1 >/dev/null ||
  { echo "make-dev-ca failed"; exit 1; }
tls="$tmp/tls"
# probe ADDRESS [ARGS...]: the status line health_probe prints.
probe() { "$PROBE" "$@" --timeout_ms 2000; }
# The port a daemon's log says its plaintext health server took.
health_port() { grep -o 'grpc.health.v1 alone, in plaintext, on port [0-9]*' "$1" | grep -o '[0-9]*$'; }
# Whether that line is in the log yet (a port file may come first: under
# a sanitizer the log line can land later).
logged_port() { [ -n "$(health_port "$1")" ]; }

"$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" --state_dir "$tmp/cstate" \
  --health_listen 127.0.0.1:0 --tls_ca "$tls/ca.pem" --tls_cert "$tls/coordinator.pem" \
  --tls_key "$tls/coordinator.key" --tokens_file "$tls/tokens" \
  --heartbeat_interval_ms 100 >"$tmp/coordinator.log" 2>&1 &
pids+=("$!")
wait_until 10 test -s "$tmp/port" || { echo "coordinator did not start"; cat "$tmp/coordinator.log"; exit 1; }
wait_until 10 logged_port "$tmp/coordinator.log" || true
addr="127.0.0.1:$(cat "$tmp/port")"
chp=$(health_port "$tmp/coordinator.log")
[ -n "$chp" ] || { echo "no health port in the coordinator's log"; cat "$tmp/coordinator.log"; exit 1; }

# The coordinator: ready and live on the plaintext port, with no token.
out=$(probe "127.0.0.1:$chp"); rc=$?
[ "$rc" -eq 0 ] && [ "$out" = SERVING ] || fail "coordinator readiness (plaintext): rc $rc: $out"
out=$(probe "127.0.0.1:$chp" --service liveness); rc=$?
[ "$rc" -eq 0 ] && [ "$out" = SERVING ] || fail "coordinator liveness (plaintext): rc $rc: $out"
# Nothing but health there: an unknown service name is refused.
out=$(probe "127.0.0.1:$chp" --service aqueduct.v1.Coordinator); rc=$?
[ "$rc" -eq 3 ] || fail "the health port knows aqueduct.v1.Coordinator: rc $rc: $out"
# On --listen: TLS with the CA alone (no token, no certificate) is enough.
out=$(probe "$addr" --tls_ca "$tls/ca.pem"); rc=$?
[ "$rc" -eq 0 ] && [ "$out" = SERVING ] || fail "coordinator readiness over TLS without a token: rc $rc: $out"
# ... and a plaintext probe of the TLS port fails: why --health_listen exists.
out=$(probe "$addr"); rc=$?
[ "$rc" -eq 3 ] || fail "a plaintext probe of the coordinator's TLS port answered: rc $rc: $out"

# A bad --health_listen is refused, naming the flag.
"$COORDINATOR" --listen 127.0.0.1:0 --health_listen "256.1.1.1:1" >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 1 ] || fail "bad --health_listen: exit $rc"
grep -q -- "--health_listen: cannot listen on '256.1.1.1:1'" "$tmp/err" ||
  fail "bad --health_listen message: $(cat "$tmp/err")"

# start_worker NAME TOKEN_FILE: a TLS worker with a plaintext health port.
start_worker() {
  "$WORKER" --coordinator "$addr" --worker_id "$1" --listen 127.0.0.1:0 \
    --port_file "$tmp/$1.port" --health_listen 127.0.0.1:0 --threads 1 \
    --measure_gemm=false --tls_ca "$tls/ca.pem" --tls_cert "$tls/worker.pem" \
    --tls_key "$tls/worker.key" --token_file "$2" >"$tmp/$1.log" 2>&1 &
  pids+=("$!"); eval "pid_$1=$!"
}
start_worker h1 "$tls/token.h1"
# h2's token is not in the coordinator's table: it never registers.
echo "0000000000000000000000000000000000000000000000000000000000000000" >"$tmp/bad.token"
chmod 600 "$tmp/bad.token"
start_worker h2 "$tmp/bad.token"
wait_until 10 test -s "$tmp/h1.port" -a -s "$tmp/h2.port" || fail "workers did not start"
wait_until 10 logged_port "$tmp/h1.log" || true
wait_until 10 logged_port "$tmp/h2.log" || true
h1hp=$(health_port "$tmp/h1.log") h2hp=$(health_port "$tmp/h2.log")
ready() { [ "$(probe "127.0.0.1:$1")" = SERVING ]; }
wait_until 15 ready "$h1hp" || fail "registered worker h1 never ready: $(probe "127.0.0.1:$h1hp"); $(tail -3 "$tmp/h1.log")"
out=$(probe "127.0.0.1:$h1hp" --service liveness); rc=$?
[ "$rc" -eq 0 ] && [ "$out" = SERVING ] || fail "h1 liveness: rc $rc: $out"
out=$(probe "127.0.0.1:$h2hp"); rc=$?
[ "$rc" -eq 1 ] && [ "$out" = NOT_SERVING ] || fail "unregistered h2 readiness: rc $rc: $out"
grep -q "UNAUTHENTICATED" "$tmp/h2.log" || fail "h2 was not refused for its token: $(tail -3 "$tmp/h2.log")"
out=$(probe "127.0.0.1:$h2hp" --service liveness); rc=$?
[ "$rc" -eq 0 ] && [ "$out" = SERVING ] || fail "unregistered h2 liveness: rc $rc: $out"
# The worker's own port needs a client certificate (mutual TLS).
h1addr="127.0.0.1:$(cat "$tmp/h1.port")"
out=$(probe "$h1addr" --tls_ca "$tls/ca.pem"); rc=$?
[ "$rc" -eq 3 ] || fail "h1's TLS port answered without a client certificate: rc $rc: $out"
out=$(probe "$h1addr" --tls_ca "$tls/ca.pem" --tls_cert "$tls/coordinator.pem" --tls_key "$tls/coordinator.key"); rc=$?
[ "$rc" -eq 0 ] && [ "$out" = SERVING ] || fail "h1 readiness over mutual TLS: rc $rc: $out"

# SIGTERM: the worker exits 0 and its health port closes.
kill -TERM "$pid_h1"
exited() { ! kill -0 "$pid_h1" 2>/dev/null; }
wait_until 15 exited || fail "h1 did not exit after SIGTERM"
wait "$pid_h1"; rc=$?
[ "$rc" -eq 0 ] || fail "h1 exit $rc after SIGTERM"
forget "$pid_h1"
out=$(probe "127.0.0.1:$h1hp"); rc=$?
[ "$rc" -eq 3 ] || fail "h1's health port still answers after it stopped: rc $rc: $out"

if [ "$fails" -gt 0 ]; then
  echo "$fails check(s) failed; logs:" >&2
  tail -n 20 "$tmp"/*.log >&2
  exit 1
fi
echo "all health checks passed"
