#!/usr/bin/env bash
# The GPU run as one command: every GPU test and GPU benchmark, each under
# its own timeout (about 8 minutes in all), and one report.
#
#   tests/gpu/run_on_device.sh [OUT_DIR]      (default $OUT, else /tmp/aq-gpu-report)
#
# On a lent GPU machine (the device tool), from the repository root, with
# .gpu/aq-gpu.tar.xz carried (tools/gpu_pack.sh builds it here): runs
# tools/gpu_device_run.sh's steps: the GPU tests (CUDA kernels, the CUDA
# device, CPU/GPU parity, the pipeline on cuda:0, NCCL), the 2-worker
# daemons test, GEMM against cuBLAS's peak (fp32, tf32, bf16) and PyTorch's,
# NCCL point-to-point against raw NCCL, the GPT step on one GPU against
# PyTorch on the same GPU, the GPT through two workers (gloo, then NCCL).
# Anywhere without a GPU (this machine): every case is reported skipped,
# with the reason, and the script exits 0.
#
# The report (docs/gpu.md, "The report"): OUT_DIR/report.jsonl, one JSON
# object per case: {"case", "status": "passed" | "failed" | "skipped",
# "rc", "seconds", "result": the case's last JSON line or null, "reason"
# when skipped}; OUT_DIR/report.txt, the same as a table and a last line
# "gpu run: P passed, F failed, S skipped"; the logs in
# OUT_DIR/gpu-logs.tar.gz. Exit 1 if a case failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:-${OUT:-/tmp/aq-gpu-report}}"
mkdir -p "$OUT"
export OUT REPORT="$OUT/report.jsonl"
: >"$REPORT"
: >"$OUT/summary.txt"

# Every case a GPU run reports, in order (tools/gpu_device_run.sh's steps).
cases=(kernels_test cuda_device_test device_parity_test pipeline_test nccl_test
  gpu_daemons_test mlp_bench_cuda_fp32 mlp_bench_cuda_tf32 mlp_bench_cuda_bf16
  mlp_bench_cpu16 torch_gemm_peak nccl_bench gpt_one_cuda0 torch_gpt_cuda0
  gpt_cuda0 gpt_nccl_cuda0)

# Why there is no GPU run here ("" when there can be one).
no_gpu_reason() {
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    echo "no GPU: nvidia-smi is not installed (no NVIDIA driver)"
  elif [ "$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU')" -eq 0 ]; then
    echo "no GPU: nvidia-smi lists none ($(nvidia-smi -L 2>&1 | head -1 | tr -d '"\\'))"
  elif [ ! -f .gpu/aq-gpu.tar.xz ]; then
    echo "no binaries: .gpu/aq-gpu.tar.xz is missing (run tools/gpu_pack.sh where they build, and carry .gpu)"
  fi
}

reason=$(no_gpu_reason)
if [ -n "$reason" ]; then
  for c in "${cases[@]}"; do
    printf '{"case":"%s","status":"skipped","rc":0,"seconds":0,"result":null,"reason":"%s"}\n' \
      "$c" "$reason" >>"$REPORT"
  done
else
  timeout -k 10 480 bash tools/gpu_device_run.sh tests daemons bench gpt_one_gpu \
    gpt_gpu gpt_nccl
  cp /tmp/aq-out/gpu-logs.tar.gz "$OUT/" 2>/dev/null
  # A case the time ran out before: reported as not run.
  for c in "${cases[@]}"; do
    grep -q "\"case\":\"$c\"" "$REPORT" ||
      printf '{"case":"%s","status":"failed","rc":124,"seconds":0,"result":null,"reason":"not run: the 480 s budget ran out"}\n' \
        "$c" >>"$REPORT"
  done
fi

python3 - "$REPORT" "$OUT/report.txt" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
counts = {s: sum(r["status"] == s for r in rows) for s in ("passed", "failed", "skipped")}
with open(sys.argv[2], "w") as out:
    for r in rows:
        note = r.get("reason") or (json.dumps(r["result"]) if r.get("result") else "")
        out.write("%-22s %-8s %7.1fs  %s\n" % (r["case"], r["status"], r["seconds"], note[:150]))
    out.write("gpu run: %(passed)d passed, %(failed)d failed, %(skipped)d skipped\n" % counts)
PY
cat "$OUT/report.txt"
! grep -q '"status":"failed"' "$REPORT"
