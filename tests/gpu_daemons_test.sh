#!/usr/bin/env bash
# A GPU pipeline through the real daemons: a coordinator and two workers
# on GPUs (cuda:0 and cuda:1, or both on cuda:0 with one GPU) train a small
# MLP as a 2-worker 1F1B-flush job; its per-step losses must match `aq
# train-local` on the CPU within 1e-4 relative. With two GPUs the job runs
# again with pipeline.transport "nccl". Where no GPU exists (nvidia-smi is
# absent or lists none, and the kernel driver shows none) the test reports
# itself skipped, saying why; on a machine with a GPU, a worker that cannot
# open it is a failure. AQ_GPU_TEST_DEVICE=cpu runs the same on CPU
# workers, which checks the harness.
set -uo pipefail
AQ="$1" COORDINATOR="$2" WORKER="$3"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
kind="${AQ_GPU_TEST_DEVICE:-cuda}"
# The harness (fail, pids/cleanup, wait_until): next to this script, or
# under the runfiles root Bazel runs tests from.
harness="$(dirname "$0")/daemon_harness.sh"
[ -f "$harness" ] || harness="tests/daemon_harness.sh"
# shellcheck source=tests/daemon_harness.sh
source "$harness"

skip() {
  echo "SKIPPED: $1"
  if [ -n "${XML_OUTPUT_FILE:-}" ]; then
    cat >"$XML_OUTPUT_FILE" <<XML
<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="gpu_daemons_test" tests="1" failures="0" skipped="1">
<testcase name="GpuPipelineThroughDaemons"><skipped message="$(echo "$1" | tr -d '<>&"')"/></testcase>
</testsuite></testsuites>
XML
  fi
  exit 0
}

# The GPUs nvidia-smi lists (0 when it is absent or cannot reach a driver),
# and whether the kernel driver shows any (a directory per GPU).
gpus_listed() { { nvidia-smi -L 2>/dev/null || true; } | grep -c '^GPU'; }
driver_shows_gpu() { [ -n "$(ls -A /proc/driver/nvidia/gpus 2>/dev/null)" ]; }

if [ "$kind" = cuda ]; then
  gpus=$(gpus_listed)
  if [ "$gpus" -eq 0 ]; then
    driver_shows_gpu &&
      { echo "FAIL: the kernel driver shows a GPU ($(ls /proc/driver/nvidia/gpus)) but nvidia-smi lists none: $(nvidia-smi -L 2>&1 | head -c 300)" >&2; exit 1; }
    skip "no GPU on this machine (nvidia-smi lists none, /proc/driver/nvidia/gpus is empty or absent); GPU pipeline through the daemons not run"
  fi
  # A GPU is here: the worker must open it (it opens its device before
  # anything else, and exits 2 when it cannot).
  timeout 10 "$WORKER" --coordinator 127.0.0.1:1 --device cuda:0 \
    --measure_gemm=false >/dev/null 2>"$tmp/probe"
  rc=$?
  if [ "$rc" -eq 2 ]; then
    echo "FAIL: $gpus GPU(s) listed, but the worker cannot open cuda:0: $(head -c 600 "$tmp/probe")" >&2
    exit 1
  fi
  dev0=cuda:0
  dev1=cuda:$([ "$gpus" -ge 2 ] && echo 1 || echo 0)
else
  gpus=0 dev0=cpu dev1=cpu
fi

"$COORDINATOR" --listen 127.0.0.1:0 --port_file "$tmp/port" \
  --heartbeat_interval_ms 100 >"$tmp/coordinator.log" 2>&1 &
pids+=("$!")
wait_until 10 test -s "$tmp/port" || { echo "coordinator did not start"; exit 1; }
addr="127.0.0.1:$(cat "$tmp/port")"
aq() { "$AQ" "$@" --coordinator "$addr"; }
n=0
for dev in "$dev0" "$dev1"; do
  n=$((n + 1))
  "$WORKER" --coordinator "$addr" --worker_id "g$n" --listen 127.0.0.1:0 \
    --device "$dev" --threads 1 --measure_gemm=false --peer_timeout_ms 30000 \
    >"$tmp/g$n.log" 2>&1 &
  pids+=("$!")
done
healthy() { [ "$(aq workers --output json | grep -o '"state":"WORKER_HEALTHY"' | wc -l)" -eq 2 ]; }
wait_until 30 healthy || { fail "workers never HEALTHY: $(aq workers)"; exit 1; }

cat >"$tmp/mlp.textproto" <<'SPEC'
name: "gpu-pipeline"
model {
  layers { flatten {} }
  layers { linear { in_features: 256 out_features: 512 } }
  layers { relu {} }
  layers { linear { in_features: 512 out_features: 512 } }
  layers { relu {} }
  layers { linear { in_features: 512 out_features: 10 } }
}
data { synthetic { sample_shape: [256] num_classes: 10 train_samples: 4096 seed: 3 } }
optimizer { sgd { lr: 0.05 momentum: 0.9 } }
batch_size: 64
max_steps: 30
seed: 7
SPEC
"$AQ" train-local "$tmp/mlp.textproto" --output json >"$tmp/local.json" 2>"$tmp/local.err" ||
  { fail "train-local: $(cat "$tmp/local.err")"; exit 1; }

# Runs the spec as a 2-worker flush pipeline with transport $1 and compares
# its per-step losses with train-local's.
run() {
  local transport=$1
  sed "s/^seed: 7$/seed: 7\npipeline { workers: 2 schedule: \"1f1b_flush\" transport: \"$transport\" }/" \
    "$tmp/mlp.textproto" >"$tmp/job-$transport.textproto"
  if ! aq submit "$tmp/job-$transport.textproto" --wait >"$tmp/$transport.out" 2>&1; then
    fail "$transport job: $(cat "$tmp/$transport.out")"
    return
  fi
  local id
  id=$(grep -o 'job-[0-9a-f-]*' "$tmp/$transport.out" | head -1)
  aq status "$id" --output json >"$tmp/$transport.json"
  python3 - "$tmp/local.json" "$tmp/$transport.json" "$transport" <<'PY' || fail "$transport losses differ from train-local"
import json, sys
local = json.load(open(sys.argv[1]))["loss"]
job = json.load(open(sys.argv[2]))
curve = sorted(job["loss_curve"], key=lambda p: int(p.get("minibatch", 0)))
got = [p["loss"] for p in curve]
print(f"{sys.argv[3]}: {job['workers']} workers, plan",
      [(s.get("first_layer", 0), s["end_layer"], s.get("replicas", 1))
       for s in job["plan"]["stages"]])
assert len(got) == len(local), (len(got), len(local))
worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(got, local))
print(f"{sys.argv[3]}: {len(got)} steps, worst relative difference {worst:.2e}")
sys.exit(0 if worst <= 1e-4 else 1)
PY
}
run gloo
if [ "$kind" = cuda ] && [ "$gpus" -ge 2 ]; then run nccl; fi

if [ "$fails" -ne 0 ]; then
  echo "$fails failure(s); logs in $tmp"
  exit 1
fi
echo "gpu_daemons_test: passed ($dev0, $dev1)"
