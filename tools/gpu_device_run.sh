#!/usr/bin/env bash
# Runs on a lent GPU machine (the device tool): unpacks what
# tools/gpu_pack.sh packed, then the GPU tests, the GPU benchmarks and the
# GPT example through the daemons on cuda:0, each under its own timeout.
# Every log goes into $OUT/gpu-logs.tar.gz (rewritten after each step, so
# a run cut short still returns what finished) and a one-line result per
# step into $OUT/summary.txt. docs/gpu.md records what ran.
#
# Usage (from the repository root there): bash tools/gpu_device_run.sh [STEP...]
#   STEP: tests daemons bench gpt_gpu gpt_cpu schedules (default: the first
#   five, in that order)
set -uo pipefail
OUT="${OUT:-/tmp/aq-out}"
mkdir -p "$OUT"
root=/tmp/aq logs=/tmp/aq-logs
mkdir -p "$root" "$logs"
[ -x "$root/bin/worker" ] || tar -xJf .gpu/aq-gpu.tar.xz -C "$root"

# CUDA's libraries from the machine itself (toolkit or PyTorch's wheels).
cuda_dirs=$(find /usr /opt /lib /lib64 /root /home \( -name 'libcublas.so.13*' -o -name 'libnccl.so.2*' \
  -o -name 'libcudart.so.13*' -o -name 'libcublasLt.so.13*' \) 2>/dev/null |
  xargs -r -n1 dirname | sort -u | paste -sd:)
export LD_LIBRARY_PATH="$root/lib:$cuda_dirs"
export TEST_TMPDIR=/tmp/aq-tmp
mkdir -p "$TEST_TMPDIR" /usr/share/games/fortunes
cp -n "$root"/fortunes/* /usr/share/games/fortunes/
bin="$root/bin"

note() { echo "$*" | tee -a "$OUT/summary.txt"; }
# One JSON line per step into $REPORT when set (tests/gpu/run_on_device.sh).
report() {
  [ -n "${REPORT:-}" ] || return 0
  local name=$1 rc=$2 ms=$3 status=passed line
  [ "$rc" -ne 0 ] && status=failed
  grep -qE '^SKIPPED|\[  SKIPPED \]' "$logs/$name.log" && [ "$rc" -eq 0 ] && status=skipped
  line=$(grep -hE '^\{' "$logs/$name.log" | tail -1)
  printf '{"case":"%s","status":"%s","rc":%d,"seconds":%.1f,"result":%s}\n' \
    "$name" "$status" "$rc" "$(awk -v m="$ms" 'BEGIN{print m/1000}')" \
    "${line:-null}" >>"$REPORT"
}
pack() { tar -C "$logs" -czf "$OUT/gpu-logs.tar.gz" . 2>/dev/null; }
# step NAME SECONDS CMD...: runs CMD with a timeout, its output in NAME.log.
step() {
  local name=$1 limit=$2 start rc
  shift 2
  start=$(date +%s%N)
  timeout -k 5 "$limit" "$@" >"$logs/$name.log" 2>&1
  rc=$?
  report "$name" "$rc" $((($(date +%s%N) - start) / 1000000))
  note "$(printf '%-28s rc=%-3s %6dms  %s' "$name" "$rc" \
    $((($(date +%s%N) - start) / 1000000)) \
    "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) |passed|SKIPPED:|SUCCEEDED|wall ms' "$logs/$name.log" |
      tail -3 | tr '\n' ' ' | cut -c1-200)")"
  pack
}

tests() {
  for t in kernels_test cuda_device_test device_parity_test pipeline_test nccl_test; do
    step "$t" 120 "$bin/$t" --gtest_output="xml:$logs/$t.xml"
  done
}

daemons() {
  step gpu_daemons_test 180 bash tests/gpu_daemons_test.sh \
    "$bin/aq" "$bin/coordinator" "$bin/worker"
}

bench() {
  step mlp_bench_cuda_fp32 90 "$bin/mlp_bench" --device cuda:0 --batch 1024 --gemm_peak 8192
  step mlp_bench_cuda_tf32 90 "$bin/mlp_bench" --device cuda:0 --batch 1024 \
    --gemm_peak 8192 --gemm_precision tf32
  step mlp_bench_cuda_bf16 90 "$bin/mlp_bench" --device cuda:0 --batch 1024 \
    --gemm_peak 8192 --gemm_precision bf16
  step mlp_bench_cpu16 90 "$bin/mlp_bench" --device cpu --threads 16 --batch 1024 \
    --steps 20 --warmup 3 --gemm_peak 2048
  step torch_gemm_peak 60 python3 -c '
import torch, time
for name, tf32 in (("fp32", False), ("tf32", True)):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a = torch.rand(8192, 8192, device="cuda") - 0.5
    b = torch.rand(8192, 8192, device="cuda") - 0.5
    a @ b; torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(20): a @ b
    torch.cuda.synchronize(); dt = time.perf_counter() - t
    print("{\"impl\":\"torch\",\"gemm\":\"%s\",\"gemm_peak_gflops\":%.1f}" % (name, 20 * 2 * 8192**3 / dt / 1e9))'
  grep -h '^{' "$logs"/mlp_bench_*.log "$logs"/torch_gemm_peak.log >>"$OUT/summary.txt"
  step nccl_bench 30 "$bin/nccl_bench" --iters 20
}

# The README's GPT (examples/gpt_fortunes.textproto) as a pipeline on device
# $1: by default 2 workers of 8 threads, 1f1b_flush, 500 steps ($GPT_WORKERS,
# $GPT_THREADS, $GPT_SCHEDULE, $GPT_STEPS, $GPT_MICROBATCHES change them);
# the job's status (loss, throughput) in gpt-$1[-schedule].json.
gpt_job() {
  local dev=$1 name=$1${GPT_SCHEDULE:+-$GPT_SCHEDULE}
  local workers=${GPT_WORKERS:-2} threads=${GPT_THREADS:-8}
  local steps=${GPT_STEPS:-500} schedule=${GPT_SCHEDULE:-1f1b_flush}
  local tmp="/tmp/aq-gpt-$name"
  rm -rf "$tmp" && mkdir -p "$tmp"
  "$bin/coordinator" --listen 127.0.0.1:0 --port_file "$tmp/port" \
    --state_dir "$tmp/state" >"$tmp/coordinator.log" 2>&1 &
  local pids=($!)
  for _ in $(seq 50); do [ -s "$tmp/port" ] && break; sleep 0.2; done
  local addr="127.0.0.1:$(cat "$tmp/port")"
  for n in $(seq "$workers"); do
    "$bin/worker" --coordinator "$addr" --worker_id "w$n" --listen 127.0.0.1:0 \
      --device "$dev" --threads "$threads" >"$tmp/w$n.log" 2>&1 &
    pids+=($!)
  done
  sed -e "s/^max_steps: 4000/max_steps: $steps/" -e "s/^eval_every: 1000/eval_every: $steps/" \
    -e "s/^  workers: 4/  workers: $workers${GPT_TRANSPORT:+ transport: \"$GPT_TRANSPORT\"}/" \
    -e "s/^  schedule: \"1f1b_flush\"/  schedule: \"$schedule\"${GPT_MICROBATCHES:+ microbatches: $GPT_MICROBATCHES}${GPT_BANDWIDTH:+ bandwidth_bytes_per_s: $GPT_BANDWIDTH}/" \
    examples/gpt_fortunes.textproto >"$tmp/gpt.textproto"
  sleep 3
  local t0=$(date +%s%N)
  "$bin/aq" submit "$tmp/gpt.textproto" --wait --coordinator "$addr" \
    ${GPT_PROFILE:+--profile "$GPT_PROFILE"}
  local rc=$?
  echo "wall ms: $((($(date +%s%N) - t0) / 1000000))"
  local id=$("$bin/aq" jobs --coordinator "$addr" --output json | grep -o 'job-[0-9a-f-]*' | head -1)
  "$bin/aq" status "$id" --coordinator "$addr" --output json >"$logs/gpt-$name.json"
  "$bin/aq" status "$id" --coordinator "$addr" | head -2
  kill "${pids[@]}" 2>/dev/null
  wait
  for f in "$tmp"/*.log; do cp "$f" "$logs/gpt-$name-$(basename "$f")"; done
  return $rc
}

gpt_gpu() { step gpt_cuda0 200 bash -c 'gpt_job cuda:0'; }
# The GPT step on one GPU: Aqueduct (one worker) against PyTorch, same GPU.
gpt_one_gpu() {
  step gpt_one_cuda0 120 env GPT_WORKERS=1 GPT_STEPS=300 bash -c 'gpt_job cuda:0'
  step torch_gpt_cuda0 90 python3 tests/bench/torch_gpt.py speed \
    --spec examples/gpt_fortunes.textproto --device cuda:0 --warmup 10 --steps 300
}
# Two workers on one GPU exchanging through NCCL.
gpt_nccl() {
  step gpt_nccl_cuda0 150 env GPT_TRANSPORT=nccl GPT_STEPS=300 bash -c 'gpt_job cuda:0'
}
gpt_cpu() { step gpt_cpu 200 bash -c 'gpt_job cpu'; }

# The schedules side by side on this machine's quiet CPUs: schedule_bench
# (Delay layers, F:I:W 1:1:1, p = 4, m = 8), then the GPT on 4 CPU workers
# of 4 threads under each flushing schedule: one profile for all (the same
# plan), a bandwidth of 1e8 B/s so that the plan is a straight 4-stage
# pipeline, 4 microbatches, $GPT_STEPS (default 200) steps.
schedules() {
  step schedule_bench 120 "$bin/schedule_bench"
  grep -h '^{' "$logs/schedule_bench.log" >>"$OUT/summary.txt"
  gpt_schedules
}

gpt_schedules() {
  local s profile=/tmp/aq-gpt-profile.json
  sed -e 's/^max_steps: 4000/max_steps: 10/' examples/gpt_fortunes.textproto >/tmp/aq-gpt-profile.textproto
  step gpt_profile 60 "$bin/aq" profile /tmp/aq-gpt-profile.textproto --threads 4 -o "$profile"
  for s in 1f1b_flush gpipe zb_h1 zb_h2; do
    step "gpt_cpu4_$s" 150 env GPT_WORKERS=4 GPT_THREADS=${GPT_THREADS:-4} GPT_STEPS=${GPT_STEPS:-200} \
      GPT_MICROBATCHES=4 GPT_BANDWIDTH=1e8 GPT_PROFILE=$profile GPT_SCHEDULE=$s \
      bash -c 'gpt_job cpu'
  done
}

export -f gpt_job
export bin logs
note "== $(date -u) $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)"
note "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
nvidia-smi >"$logs/nvidia-smi.txt" 2>&1
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests daemons bench gpt_gpu gpt_cpu)
for s in "${steps[@]}"; do "$s"; done
pack
cat "$OUT/summary.txt"
