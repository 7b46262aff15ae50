#!/usr/bin/env bash
# Prometheus metrics of both daemons, scraped as Prometheus would: a
# coordinator and two workers with TLS, bearer tokens and --http_listen
# (HTTPS, ephemeral ports found in their logs), a short 2-stage pipeline job;
# /metrics refuses a request without a token or with a wrong one (401) and
# serves one with a token (200); scrapes while the job runs and after it
# SUCCEEDED are parsed with Debian's prometheus_client parser
# (tests/metrics_check.py): families and types, cumulative histogram
# buckets, Heartbeat in the RPC histogram, each stage's compute seconds > 0;
# at the end the job's steps, each stage's minibatches equal to them, bytes
# > 0 (workers report them when a stage ends its run) and the bytes stage 0
# sent equal to those stage 1 received (and back). Skips, saying why, without python3-prometheus-client or curl.
#
#   metrics_test.sh AQ COORDINATOR WORKER MAKE_CA CHECKER
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3" MAKE_CA="$4" CHECKER="$5"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"
PY=/usr/bin/python3  # Debian's, whatever python3 is first on PATH

skip() {
  echo "SKIPPED: $1"
  if [ -n "${XML_OUTPUT_FILE:-}" ]; then
    cat >"$XML_OUTPUT_FILE" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="metrics_test" tests="1" failures="0" skipped="1">
<testcase name="ScrapeBothDaemons"><skipped message="$1"/></testcase>
</testsuite></testsuites>
XML
  fi
  exit 0
}
[ -x "$PY" ] && "$PY" -c 'import prometheus_client.parser' 2>/dev/null ||
  skip "no python3-prometheus-client for $PY (apt-get install python3-prometheus-client); nothing was scraped"
command -v curl >/dev/null || skip "no curl to scrape with"

ca="$tmp/ca"
"$MAKE_CA" "$ca" --workers 2 --users admin >/dev/null || { echo "make-dev-ca failed"; exit 1; }
token=$(cat "$ca/token.admin")
"$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" --state_dir "$tmp/state" \
  --tls_ca "$ca/ca.pem" --tls_cert "$ca/coordinator.pem" --tls_key "$ca/coordinator.key" \
  --tokens_file "$ca/tokens" --http_listen 127.0.0.1:0 \
  --heartbeat_interval_ms 200 >"$tmp/coordinator.log" 2>&1 &
pids+=("$!")
wait_until 20 test -s "$tmp/port" || { echo "coordinator did not start"; cat "$tmp/coordinator.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { AQ_TOKEN_FILE="$ca/token.admin" "$AQ" "$@" --coordinator "$addr" --tls_ca "$ca/ca.pem"; }
for i in 0 1; do
  "$WORKER" --coordinator "$addr" --worker_id "worker-$i" --listen 127.0.0.1:0 \
    --threads 1 --measure_gemm=false --token_file "$ca/token.worker-$i" \
    --tls_ca "$ca/ca.pem" --tls_cert "$ca/worker.pem" --tls_key "$ca/worker.key" \
    --http_listen 127.0.0.1:0 --http_tokens_file "$ca/tokens" \
    >"$tmp/worker-$i.log" 2>&1 &
  pids+=("$!")
done
# The HTTPS port a daemon picked, from its log ("metrics on https://HOST:PORT/metrics").
http_port() { grep -oE 'metrics on https://127\.0\.0\.1:[0-9]+/' "$tmp/$1.log" | grep -oE '[0-9]+/$' | tr -d /; }
for d in coordinator worker-0 worker-1; do
  wait_until 20 http_port "$d" >/dev/null || { echo "no HTTPS metrics in $d's log"; cat "$tmp/$d.log"; exit 1; }
done
two_healthy() { [ "$(healthy_count)" -eq 2 ]; }
wait_until 30 two_healthy || { echo "workers not HEALTHY: $(aq workers)"; exit 1; }

# scrape DAEMON OUT [curl args...]: prints the HTTP status.
scrape() {
  local d=$1 out=$2; shift 2
  curl -s --max-time 10 --cacert "$ca/ca.pem" -o "$out" -w '%{http_code}' "$@" \
    "https://127.0.0.1:$(http_port "$d")/metrics"
}
for d in coordinator worker-0; do
  code=$(scrape "$d" "$tmp/noauth")
  [ "$code" = 401 ] || fail "$d /metrics without a token: HTTP $code"
  code=$(scrape "$d" "$tmp/noauth" -H "Authorization: Bearer not-a-token-of-the-file-at-all-0000")
  [ "$code" = 401 ] || fail "$d /metrics with a wrong token: HTTP $code"
  code=$(scrape "$d" "$tmp/$d.metrics" -H "Authorization: Bearer $token")
  [ "$code" = 200 ] || fail "$d /metrics with the token: HTTP $code"
done
# Plain HTTP to the HTTPS port is no scrape.
code=$(curl -s --max-time 5 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$(http_port coordinator)/metrics")
[ "$code" != 200 ] || fail "plain HTTP served metrics on the HTTPS port"

# Two stages with known compute (Delay: 4 ms forward, 8 ms backward per
# stage and microbatch): about 10 steps a second, 150 steps.
steps=150
cat >"$tmp/job.textproto" <<SPEC
name: "metrics-demo"
model { layers { flatten {} }
  layers { linear { in_features: 32 out_features: 512 } } layers { relu {} }
  layers { linear { in_features: 512 out_features: 16 } }
  layers { delay { forward_ms: 4 backward_ms: 8 } }
  layers { linear { in_features: 16 out_features: 512 } } layers { relu {} }
  layers { linear { in_features: 512 out_features: 10 } }
  layers { delay { forward_ms: 4 backward_ms: 8 } } }
data { synthetic { sample_shape: [32] num_classes: 10 train_samples: 8192 test_samples: 256 seed: 5 } }
optimizer { sgd { lr: 0.05 momentum: 0.9 } }
batch_size: 32
max_steps: $steps
pipeline { workers: 2 schedule: "1f1b_flush" microbatches: 4 bandwidth_bytes_per_s: 1e7 }
SPEC
aq submit "$tmp/job.textproto" --output json >"$tmp/submit.json" 2>"$tmp/submit.err" ||
  { echo "submit failed: $(cat "$tmp/submit.err")"; exit 1; }
job=$(json 'd["job_id"]' <"$tmp/submit.json")
field() { aq status "$job" --output json 2>/dev/null | json "$1"; }
running_a_while() { [ "$(field 'd["state"]')" = JOB_RUNNING ] && [ "$(field 'd.get("step", 0)')" -ge 30 ]; }
wait_until 60 running_a_while || { echo "job never trained 30 steps: $(aq status "$job")"; exit 1; }
stages=$(field 'len(d["stages"])')
[ "$stages" = 2 ] || echo "note: the planner chose $stages stages"

# During the job.
scrape coordinator "$tmp/during.metrics" -H "Authorization: Bearer $token" >/dev/null
"$PY" "$CHECKER" coordinator "$tmp/during.metrics" "$job" "$stages" ||
  fail "coordinator scrape during the job"
for i in 0 1; do
  scrape "worker-$i" "$tmp/w$i-during.metrics" -H "Authorization: Bearer $token" >/dev/null
  "$PY" "$CHECKER" worker "$tmp/w$i-during.metrics" "$job" || fail "worker-$i scrape during the job"
done

# After it.
done_ok() { [ "$(field 'd["state"]')" = JOB_SUCCEEDED ]; }
wait_until 90 done_ok || { echo "job did not succeed: $(aq status "$job")"; exit 1; }
sleep 1  # the workers' last reports, already applied, and a heartbeat more
scrape coordinator "$tmp/after.metrics" -H "Authorization: Bearer $token" >/dev/null
"$PY" "$CHECKER" coordinator "$tmp/after.metrics" "$job" "$stages" --final "$steps" ||
  fail "coordinator scrape after the job"
for i in 0 1; do
  scrape "worker-$i" "$tmp/w$i-after.metrics" -H "Authorization: Bearer $token" >/dev/null
  "$PY" "$CHECKER" worker "$tmp/w$i-after.metrics" "$job" --final "$steps" ||
    fail "worker-$i scrape after the job"
done
grep -E '^aqueduct_stage_(sent|received)_bytes_total|^aqueduct_coordinator_rpc_duration_seconds_count\{method="(Heartbeat|ReportProgress)"' \
  "$tmp/after.metrics"

if [ "${fails:-0}" -gt 0 ]; then echo "$fails failure(s)"; exit 1; fi
echo "PASS"
