#!/usr/bin/env bash
# bf16 mixed precision against fp32 on the main job's GPT
# (examples/gpt_fortunes.textproto), in one process (aq train-local):
#  (a) accuracy: both train STEPS steps from the same initial weights; the
#      validation loss of each (the spec's 256 held-out windows) and their
#      difference;
#  (b) speed: tokens/s of 100 timed steps (after 5 warm-up steps), the two
#      alternating, ROUNDS rounds, medians and the ratio.
# bf16 GEMMs need AVX512-BF16 to be fast (lscpu's avx512_bf16); without it
# they are the rounded values through the fp32 GEMM (slower than fp32).
#
#   tests/bench/bf16_vs_fp32.sh [STEPS=1000] [ROUNDS=3] [THREADS=2]
set -euo pipefail
cd "$(dirname "$0")/../.."
steps="${1:-1000}"
rounds="${2:-3}"
threads="${3:-2}"
spec=examples/gpt_fortunes.textproto
deploy/setup.sh >/dev/null
bazel build --config=opt //client:aq >/dev/null 2>&1 || bazel build --config=opt //client:aq
out=$(mktemp -d)
cp "$(bazel info --config=opt bazel-bin 2>/dev/null)/client/aq" "$out/aq"
aq="$out/aq"
field() { python3 -c 'import json,sys; print(json.loads(sys.stdin.read())[sys.argv[1]])' "$1"; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

echo "== (a) accuracy: $spec, $steps steps from the same initial weights, threads $threads"
"$aq" train-local "$spec" --max_steps 0 --save_weights "$out/init.safetensors" >/dev/null
for p in fp32 bf16; do
  "$aq" train-local "$spec" --init_weights "$out/init.safetensors" --max_steps "$steps" \
    --threads "$threads" --set precision.compute=$p --output json >"$out/acc-$p.json"
  echo "$p validation loss $(field test_loss <"$out/acc-$p.json")"
done
fp32_val=$(field test_loss <"$out/acc-fp32.json")
bf16_val=$(field test_loss <"$out/acc-bf16.json")

echo "== (b) speed: 100 steps after 5 warm-up steps, threads $threads, $rounds rounds"
for r in $(seq "$rounds"); do
  for p in fp32 bf16; do
    sps=$("$aq" train-local "$spec" --max_steps 105 --threads "$threads" \
      --set precision.compute=$p --output json | field samples_per_second)
    context=64
    awk -v s="$sps" -v c="$context" -v p="$p" 'BEGIN { printf "%s %.1f\n", p, s * c }' |
      tee -a "$out/speed.txt"
  done
done
fp32_tps=$(awk '$1 == "fp32" {print $2}' "$out/speed.txt" | median)
bf16_tps=$(awk '$1 == "bf16" {print $2}' "$out/speed.txt" | median)
echo
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), avx512_bf16: $(grep -q avx512_bf16 /proc/cpuinfo && echo yes || echo no)"
awk -v a="$fp32_val" -v b="$bf16_val" -v s="$steps" 'BEGIN {
  printf "validation loss after %d steps: fp32 %.5f, bf16 %.5f (difference %+.5f, %.3f%%)\n", s, a, b, b - a, 100 * (b - a) / a }'
awk -v a="$fp32_tps" -v b="$bf16_tps" 'BEGIN {
  printf "tokens/s: fp32 %.0f, bf16 %.0f (bf16/fp32 %.2fx)\n", a, b, b / a }'
echo "(files in $out)"
