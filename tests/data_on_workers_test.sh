#!/usr/bin/env bash
# Process-level test: the coordinator opens no data file. A job names its
# data by a relative path that resolves only in the workers' working
# directory (as data that lives only on the workers' hosts): the coordinator
# accepts it and the 2-stage pipeline trains on it; a job whose data is on
# no worker fails, and the reason names the path and the worker.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"
AQ="$(realpath "$AQ")" COORDINATOR="$(realpath "$COORDINATOR")"
WORKER="$(realpath "$WORKER")"
fmnist=/usr/share/datasets/fashion-mnist
# deploy/setup.sh installs it (dataset-fashion-mnist): missing is a
# failure, not a skip.
[ -d "$fmnist" ] || {
  echo "FAIL: $fmnist missing (Debian's dataset-fashion-mnist; deploy/setup.sh installs it)" >&2
  exit 1
}

mkdir -p "$tmp/coordinator-host" "$tmp/worker-host"
ln -sfn "$fmnist" "$tmp/worker-host/fmnist"
(cd "$tmp/coordinator-host" &&
  exec "$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" \
    --state_dir "$tmp/coordinator-host/state") >"$tmp/coordinator.log" 2>&1 &
pids+=("$!")
wait_until 10 test -s "$tmp/port" || { cat "$tmp/coordinator.log"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }
for w in w1 w2; do
  (cd "$tmp/worker-host" &&
    exec "$WORKER" --coordinator "$addr" --worker_id "$w" \
      --listen 127.0.0.1:0 --threads 1 --measure_gemm=false) \
    >"$tmp/$w.log" 2>&1 &
  pids+=("$!")
done
healthy() { [ "$(aq workers --output json | grep -o WORKER_HEALTHY | wc -l)" -eq 2 ]; }
wait_until 15 healthy || fail "workers never HEALTHY: $(aq workers)"
[ -e "$tmp/coordinator-host/fmnist" ] && fail "the coordinator's host sees the data"

spec() {  # $1: the data directory
  cat <<SPEC
name: "data-on-workers"
model {
  layers { flatten {} }
  layers { linear { in_features: 784 out_features: 32 } }
  layers { relu {} }
  layers { linear { in_features: 32 out_features: 10 } }
}
data { fashion_mnist_dir: "$1" train_limit: 640 test_limit: 200 }
optimizer { sgd { lr: 0.1 } }
batch_size: 32
epochs: 1
pipeline { workers: 2 schedule: "1f1b_flush" }
SPEC
}
spec fmnist >"$tmp/ok.textproto"
aq submit "$tmp/ok.textproto" --wait --output json >"$tmp/ok.json" 2>"$tmp/ok.err"
rc=$?
[ "$rc" -eq 0 ] || fail "job on the workers' data: exit $rc: $(cat "$tmp/ok.err")"
grep -q '"state":"JOB_SUCCEEDED"' "$tmp/ok.json" || fail "not SUCCEEDED: $(cat "$tmp/ok.json")"
# 640 samples / 32 = 20 steps, counted by the workers from their data.
grep -q '"totalSteps":"20"' "$tmp/ok.json" ||
  grep -q '"total_steps":"20"' "$tmp/ok.json" || fail "total steps: $(cat "$tmp/ok.json")"
grep -q '"testAccuracy"\|"test_accuracy"' "$tmp/ok.json" || fail "no test accuracy: $(cat "$tmp/ok.json")"

spec missing-data >"$tmp/bad.textproto"
aq submit "$tmp/bad.textproto" --wait >"$tmp/bad.out" 2>&1
rc=$?
[ "$rc" -ne 0 ] || fail "a job whose data is on no worker succeeded"
grep -q "missing-data" "$tmp/bad.out" || fail "the reason does not name the path: $(cat "$tmp/bad.out")"
grep -q "worker w[12]" "$tmp/bad.out" || fail "the reason does not name the worker: $(cat "$tmp/bad.out")"
aq workers | grep -q HEALTHY || fail "workers not healthy after the failed job"

if [ "$fails" -gt 0 ]; then
  echo "coordinator log:"; tail -20 "$tmp/coordinator.log"
  echo "$fails failure(s)"; exit 1
fi
echo "PASS"
