#!/usr/bin/env bash
# Training-step throughput of the MLP 784-1024-1024-1024-10 (batch 128, fp32,
# SGD momentum) in Aqueduct (mlp_bench) and in PyTorch CPU eager
# (torch_mlp.py), side by side: the runs alternate, ROUNDS times, and the
# medians are compared. PyTorch is run twice per round: with the same thread
# setting (torch.set_num_threads(THREADS)) and with torch's intra-op pool at
# 1 thread, which on Debian's build is faster, since its OpenMP pool and
# OpenBLAS's threads otherwise oversubscribe the cores.
#
#   tests/bench/mlp_vs_torch.sh [ROUNDS=5] [THREADS=2] [STEPS=200]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds="${1:-5}"
threads="${2:-2}"
steps="${3:-200}"

deploy/setup.sh
bazel build --config=opt //tests/bench:mlp_bench >/dev/null 2>&1 ||
  bazel build --config=opt //tests/bench:mlp_bench
aq=bazel-bin/tests/bench/mlp_bench

have_torch=1
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "PyTorch is absent: installing Debian's python3-torch" >&2
  AQ_SETUP_EXTRA=python3-torch deploy/setup.sh ||
    true
  /usr/bin/python3 -c 'import torch' 2>/dev/null || have_torch=0
fi
if [ "$have_torch" -eq 0 ]; then
  echo "PyTorch is NOT available: only Aqueduct's figure is measured." >&2
fi

median() { sort -n | awk '{v[NR]=$1} END {print (NR%2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }
field() { sed -E "s/.*\"$1\": ?([0-9.]+).*/\1/"; }

out=$(mktemp -d)
for r in $(seq "$rounds"); do
  "$aq" --threads "$threads" --steps "$steps" | tee -a "$out/aq.jsonl"
  if [ "$have_torch" -eq 1 ]; then
    /usr/bin/python3 tests/bench/torch_mlp.py --threads "$threads" \
      --steps "$steps" | tee -a "$out/torch.jsonl"
    /usr/bin/python3 tests/bench/torch_mlp.py --threads 1 \
      --steps "$steps" | tee -a "$out/torch1.jsonl"
  fi
done

aq_med=$(field samples_per_second <"$out/aq.jsonl" | median)
echo
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"
echo "aqueduct           median ${aq_med} samples/s (threads=${threads})"
if [ "$have_torch" -eq 1 ]; then
  t_med=$(field samples_per_second <"$out/torch.jsonl" | median)
  t1_med=$(field samples_per_second <"$out/torch1.jsonl" | median)
  echo "pytorch            median ${t_med} samples/s (torch threads=${threads})"
  echo "pytorch            median ${t1_med} samples/s (torch threads=1, OpenBLAS default)"
  awk -v a="$aq_med" -v t="$t_med" -v t1="$t1_med" 'BEGIN {
    printf "ratio aqueduct/pytorch, same threads:       %.2fx\n", a / t
    printf "ratio aqueduct/pytorch, torch best config:  %.2fx\n", a / t1 }'
fi
