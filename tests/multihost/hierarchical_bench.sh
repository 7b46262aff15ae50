#!/usr/bin/env bash
# The hierarchical plan against the flat plan on a shaped network (issue
# 15): four worker hosts in two racks, w1 w2 | w3 w4 (HB_RACK_A /
# HB_RACK_B), each pair of hosts across the racks limited to HB_RATE
# (default 100mbit, tc htb via mh_shape_between; this kernel has no netem,
# so no added delay), links inside a rack unlimited (veth). The same job
# (tests/multihost/specs/hierarchical_bench.textproto: wide activations
# everywhere but one narrow point off the middle) runs twice, with
# pipeline.topology "flat" and "measured"; both plans (aq plan JOB) and
# the measured throughput are printed side by side.
#
#   bazel build --config=opt //client:aq //coordinator:coordinator //worker:worker
#   sudo tests/multihost/hierarchical_bench.sh [BIN_DIR]   # default bazel-bin
#
# Throughput: samples/s from HB_WARMUP (default 20) to the last of
# HB_STEPS (default 200) minibatches, timed by polling aq status. Needs
# root and network namespaces (else prints SKIPPED and why). Exits 1 if a
# job fails, or if the measured plan is not faster than the flat one.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${1:-$root/bazel-bin}"
AQ="$bin/client/aq" COORDINATOR="$bin/coordinator/coordinator" WORKER="$bin/worker/worker"
MAKE_CA="$root/deploy/tls/make-dev-ca.sh"
SPEC="$here/specs/hierarchical_bench.textproto"
tmp="$(mktemp -d)"
# shellcheck source=tests/daemon_harness.sh
source "$root/tests/daemon_harness.sh"
# shellcheck source=tests/multihost/netns_lib.sh
source "$here/netns_lib.sh"
trap 'cleanup; [ "$fails" -ne 0 ] || rm -rf "$tmp"' EXIT

why=$(mh_can_run) || mh_skip "$why; the hierarchical benchmark not run"
for f in "$AQ" "$COORDINATOR" "$WORKER"; do
  [ -x "$f" ] || { echo "no $f: bazel build //client:aq //coordinator:coordinator //worker:worker"; exit 1; }
done
rate="${HB_RATE:-100mbit}" steps="${HB_STEPS:-200}" warmup="${HB_WARMUP:-20}"
rack_a="${HB_RACK_A:-w1 w2}" rack_b="${HB_RACK_B:-w3 w4}"

mh_up 4 || { echo "mh_up failed"; exit 1; }
caddr=$(mh_addr c)
hosts="$caddr"
for i in 1 2 3 4; do hosts="$hosts,$(mh_addr "w$i")"; done
"$MAKE_CA" "$tmp/tls" --hosts "$hosts" --workers 4 --worker-prefix w --first 1 \
  --users admin >/dev/null || { echo "make-dev-ca.sh failed"; exit 1; }
export AQ_TLS_CA="$tmp/tls/ca.pem" AQ_TOKEN_FILE="$tmp/tls/token.admin"
mh_shape_between "$rack_a" "$rack_b" "$rate" || { echo "shaping failed"; exit 1; }

mh_exec c "$COORDINATOR" --listen "$caddr:7070" --state_dir "$tmp/cstate" \
  --tls_ca "$tmp/tls/ca.pem" --tls_cert "$tmp/tls/coordinator.pem" \
  --tls_key "$tmp/tls/coordinator.key" --tokens_file "$tmp/tls/tokens" \
  >"$tmp/coordinator.log" 2>&1 &
pids+=("$!")
aq() { mh_exec c "$AQ" "$@" --coordinator "$caddr:7070"; }
coordinator_up() { aq workers >/dev/null 2>&1; }
wait_until 20 coordinator_up || { echo "the coordinator did not start:"; cat "$tmp/coordinator.log"; exit 1; }
healthy() { [ "$(healthy_count)" -ge "$1" ]; }
for i in 1 2 3 4; do
  w="w$i" addr=$(mh_addr "w$i")
  mh_exec "$w" "$WORKER" --coordinator "$caddr:7070" --worker_id "$w" \
    --advertise_host "$addr" --listen "$addr:7000" \
    --tls_ca "$tmp/tls/ca.pem" --tls_cert "$tmp/tls/worker.pem" \
    --tls_key "$tmp/tls/worker.key" --token_file "$tmp/tls/token.$w" \
    --threads 1 --measure_gemm=false >"$tmp/$w.log" 2>&1 &
  pids+=("$!")
  # One at a time: they register (and are reserved) in the order w1..w4.
  wait_until 20 healthy "$i" || { echo "$w never HEALTHY"; cat "$tmp/$w.log"; exit 1; }
done

status_json() { aq status "$1" --output json 2>/dev/null; }
now_ms() { date +%s%3N; }
declare -A rate_of
# Runs the job with topology $1; prints its plan; sets rate_of[$1].
run() {
  local topo=$1 id t0="" s0=0 step state t1
  sed -e "s/TOPOLOGY/$topo/" -e "s/STEPS/$steps/" "$SPEC" >"$tmp/$topo.textproto"
  id=$(aq submit "$tmp/$topo.textproto" 2>"$tmp/submit.err") ||
    { fail "submit $topo: $(cat "$tmp/submit.err")"; return; }
  local end=$((SECONDS + 600))
  while [ $SECONDS -lt $end ]; do
    status_json "$id" >"$tmp/$topo.json"
    state=$(json 'd["state"]' <"$tmp/$topo.json")
    step=$(json 'd.get("step", 0)' <"$tmp/$topo.json")
    if [ -z "$t0" ] && [ "$step" -ge "$warmup" ]; then t0=$(now_ms) s0=$step; fi
    case "$state" in JOB_SUCCEEDED | JOB_FAILED | JOB_CANCELLED) break ;; esac
    sleep 0.2
  done
  t1=$(json 'd.get("finished_ms", 0)' <"$tmp/$topo.json")
  [ "$state" = JOB_SUCCEEDED ] || { fail "$topo: $id ended $state: $(aq status "$id")"; return; }
  echo "=== topology $topo: job $id"
  aq plan "$id" | tee "$tmp/$topo.plan"
  rate_of[$topo]=$(awk -v n=$((steps - s0)) -v b=64 -v a="$t0" -v z="$t1" \
    'BEGIN { printf "%.1f", n * b * 1000 / (z - a) }')
  echo "$topo: steps $s0..$steps in $((t1 - t0)) ms: ${rate_of[$topo]} samples/s"
  local w
  for w in w1 w2 w3 w4; do echo "  $w eth0 sent $(mh_tx_bytes "$w") bytes so far"; done
}

echo "racks: [$rack_a] [$rack_b], $rate between them (each host pair), $steps steps"
run flat
run measured
grep -q "^topology measured" "$tmp/measured.plan" || fail "the measured plan shows no measured topology"
echo
printf '%-10s %14s\n' topology samples/s
for t in flat measured; do printf '%-10s %14s\n' "$t" "${rate_of[$t]:-?}"; done
if [ -n "${rate_of[flat]:-}" ] && [ -n "${rate_of[measured]:-}" ]; then
  speedup=$(awk -v a="${rate_of[measured]}" -v b="${rate_of[flat]}" 'BEGIN { printf "%.2f", a / b }')
  echo "measured / flat: ${speedup}x"
  # s + 0: numerically (awk compares "nan" or "inf" with "1" as text).
  awk -v s="$speedup" 'BEGIN { exit !(s + 0 > 1) }' || fail "the measured plan is not faster than the flat one"
fi
[ "$fails" -eq 0 ] || { echo "$fails failure(s); logs kept in $tmp" >&2; exit 1; }
