#!/usr/bin/env bash
# Aqueduct's GPT against the same GPT in PyTorch (tests/bench/torch_gpt.py,
# CPU eager, float32):
#  (a) equivalence: tests/bench/specs/gpt_equivalence.textproto (2 blocks,
#      tied head, Adam + warm-up/cosine) trained 50 steps from the same
#      initial weights (Aqueduct's, saved with --max_steps 0); every step's
#      loss is compared and the maximum relative difference printed (fails
#      above 1e-4);
#  (b) speed: the main job's GPT (examples/gpt_fortunes.textproto, batch
#      16, context 64) trained STEPS timed steps after 5 warm-up steps by
#      aq train-local (samples_per_second * context = tokens/s) and by
#      torch_gpt.py speed, alternating, ROUNDS rounds; medians and the
#      ratio. PyTorch is run with the same threads and with torch's
#      intra-op pool at 1 thread (as mlp_vs_torch.sh: on Debian's build its
#      OpenMP pool and OpenBLAS's threads otherwise oversubscribe the
#      cores);
#  (c) accuracy, only when ACCURACY_STEPS is given (long: the main job is
#      2000 steps): both train the main job's GPT ACCURACY_STEPS steps from
#      the same initial weights and report the validation loss (the spec's
#      256 validation windows).
#
#   tests/bench/gpt_vs_torch.sh [ROUNDS=3] [THREADS=2] [STEPS=50]
#                               [ACCURACY_STEPS]
#
# Aqueduct is also timed on 1 thread; with AQ_BASELINE=PATH (an aq binary
# of an earlier commit) that binary is timed in the same rounds too, for a
# before-and-after measured side by side.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-3}"
threads="${2:-2}"
steps="${3:-50}"
accuracy_steps="${4:-}"
warmup=5 # aq train-local leaves its first 5 steps out of samples_per_second
equivalence_spec=tests/bench/specs/gpt_equivalence.textproto
speed_spec=examples/gpt_fortunes.textproto
py=/usr/bin/python3
torch_gpt=tests/bench/torch_gpt.py

deploy/setup.sh
extra=()
[ -r /usr/share/games/fortunes/cookie ] || extra+=(fortunes)
$py -c 'import torch' 2>/dev/null || extra+=(python3-torch)
if [ "${#extra[@]}" -gt 0 ]; then
  echo "installing Debian's ${extra[*]}" >&2
  AQ_SETUP_EXTRA="${extra[*]}" deploy/setup.sh || true
fi
if ! $py -c 'import torch' 2>/dev/null; then
  echo "PyTorch is NOT available (python3-torch): nothing to compare." >&2
  exit 1
fi
$py "$torch_gpt" selftest

bazel build --config=opt //client:aq >/dev/null 2>&1 ||
  bazel build --config=opt //client:aq
out=$(mktemp -d)
# A copy: bazel-bin follows whichever configuration was built last.
cp "$(bazel info --config=opt bazel-bin 2>/dev/null)/client/aq" "$out/aq"
aq="$out/aq"

# The value of a numeric JSON field of one line.
field() { $py -c 'import json,sys; print(json.loads(sys.stdin.read())[sys.argv[1]])' "$1"; }
# A samples_per_second JSON document on stdin as a tokens/s line.
sps_line() {
  local sps
  sps=$(field samples_per_second)
  awk -v s="$sps" -v c="$context" -v t="$1" 'BEGIN {
    printf "{\"impl\": \"aqueduct\", \"threads\": %d, \"samples_per_second\": %.2f, \"tokens_per_second\": %.1f}\n", t, s, s * c }'
}
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

echo "== (a) equivalence: $equivalence_spec, 50 steps, threads $threads"
"$aq" train-local "$equivalence_spec" --max_steps 0 \
  --save_weights "$out/eq_init.safetensors" >/dev/null
"$aq" train-local "$equivalence_spec" --init_weights "$out/eq_init.safetensors" \
  --max_steps 50 --threads "$threads" --output json >"$out/eq_aq.json"
equivalence=0
$py "$torch_gpt" equivalence --spec "$equivalence_spec" \
  --init "$out/eq_init.safetensors" --aq_losses "$out/eq_aq.json" --steps 50 \
  --threads "$threads" | tee "$out/eq_torch.txt" || equivalence=$?

context=$(sed -nE 's/^ *context: *([0-9]+).*/\1/p' "$speed_spec" | head -1)
echo
echo "== (b) speed: $speed_spec (context $context), $steps steps after" \
  "$warmup warm-up steps, threads $threads, $rounds rounds"
for r in $(seq "$rounds"); do
  "$aq" train-local "$speed_spec" --max_steps $((warmup + steps)) \
    --threads "$threads" --output json >"$out/aq_speed.json"
  sps=$(field samples_per_second <"$out/aq_speed.json")
  awk -v s="$sps" -v c="$context" -v t="$threads" 'BEGIN {
    printf "{\"impl\": \"aqueduct\", \"threads\": %d, \"samples_per_second\": %.2f, \"tokens_per_second\": %.1f}\n", t, s, s * c }' |
    tee -a "$out/aq.jsonl"
  "$aq" train-local "$speed_spec" --max_steps $((warmup + steps)) \
    --threads 1 --output json | sps_line 1 | tee -a "$out/aq1.jsonl"
  if [ -n "${AQ_BASELINE:-}" ]; then
    "$AQ_BASELINE" train-local "$speed_spec" --max_steps $((warmup + steps)) \
      --threads "$threads" --output json | sps_line "$threads" |
      tee -a "$out/baseline.jsonl"
  fi
  $py "$torch_gpt" speed --spec "$speed_spec" --threads "$threads" \
    --warmup "$warmup" --steps "$steps" | tee -a "$out/torch.jsonl"
  $py "$torch_gpt" speed --spec "$speed_spec" --threads 1 \
    --warmup "$warmup" --steps "$steps" | tee -a "$out/torch1.jsonl"
done

tokens() { while read -r l; do field tokens_per_second <<<"$l"; done <"$1" | median; }
aq_med=$(tokens "$out/aq.jsonl")
t_med=$(tokens "$out/torch.jsonl")
t1_med=$(tokens "$out/torch1.jsonl")
echo
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"
echo "pytorch: $($py -c 'import torch; print(torch.__version__)')"
aq1_med=$(tokens "$out/aq1.jsonl")
echo "aqueduct           median ${aq_med} tokens/s (threads=${threads})"
echo "aqueduct           median ${aq1_med} tokens/s (threads=1)"
if [ -n "${AQ_BASELINE:-}" ]; then
  base_med=$(tokens "$out/baseline.jsonl")
  echo "aqueduct baseline  median ${base_med} tokens/s (threads=${threads}, $AQ_BASELINE)"
  awk -v a="$base_med" -v t="$t_med" -v t1="$t1_med" 'BEGIN {
    printf "ratio baseline/pytorch at its best:        %.2fx\n", a / (t > t1 ? t : t1) }'
fi
echo "pytorch            median ${t_med} tokens/s (torch threads=${threads})"
echo "pytorch            median ${t1_med} tokens/s (torch threads=1, OpenBLAS default)"
awk -v a="$aq_med" -v t="$t_med" -v t1="$t1_med" 'BEGIN {
  printf "ratio aqueduct/pytorch, same threads:       %.2fx\n", a / t
  printf "ratio aqueduct/pytorch, torch 1 thread:     %.2fx\n", a / t1
  printf "ratio aqueduct/pytorch at its best:        %.2fx\n", a / (t > t1 ? t : t1) }'
echo "equivalence: $(tail -1 "$out/eq_torch.txt")"

if [ -n "$accuracy_steps" ]; then
  echo
  echo "== (c) accuracy: $speed_spec, $accuracy_steps steps from the same" \
    "initial weights, threads $threads"
  "$aq" train-local "$speed_spec" --max_steps 0 \
    --save_weights "$out/acc_init.safetensors" >/dev/null
  "$aq" train-local "$speed_spec" --init_weights "$out/acc_init.safetensors" \
    --max_steps "$accuracy_steps" --threads "$threads" --output json \
    >"$out/acc_aq.json"
  $py "$torch_gpt" accuracy --spec "$speed_spec" --steps "$accuracy_steps" \
    --init "$out/acc_init.safetensors" --threads 1 | tee "$out/acc_torch.json"
  aq_val=$(field test_loss <"$out/acc_aq.json")
  t_val=$(field val_loss <"$out/acc_torch.json")
  awk -v a="$aq_val" -v t="$t_val" 'BEGIN {
    printf "validation loss: aqueduct %.4f (perplexity %.2f), pytorch %.4f (perplexity %.2f)\n", a, exp(a), t, exp(t) }'
fi
echo "(files in $out)"
exit "$equivalence"
