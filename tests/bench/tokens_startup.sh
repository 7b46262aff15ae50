#!/usr/bin/env bash
# Subword token files against text (issue 27): for the main job's six
# fortunes files (1.2 MB) and for a larger corpus (every fortunes file,
# concatenated REPEAT times), the time `aq tokenize` takes once (a 2,048-
# piece SentencePiece BPE model trained and the text encoded), and a job's
# start-up on each: `aq train-local SPEC --max_steps 0` (the data loaded,
# the model built, 8 validation windows evaluated), the text with today's
# chars tokenizer against the memory-mapped token files, the median of
# RUNS runs each, with the start-up's peak memory (max RSS).
#
#   tests/bench/tokens_startup.sh [REPEAT=40] [RUNS=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
repeat="${1:-40}"
runs="${2:-3}"
if [ -z "${BIN:-}" ]; then
  bazel build --config=opt //client:aq >/dev/null 2>&1
  BIN=bazel-bin
fi
aq="$BIN/client/aq"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
F=/usr/share/games/fortunes
main=("$F/cookie" "$F/computers" "$F/songs-poems" "$F/definitions" "$F/people" "$F/science")
all=()
for f in "$F"/*; do
  case "$f" in *.dat | *.u8) continue ;; esac
  [ -f "$f" ] && [ ! -L "$f" ] && all+=("$f")
done
for _ in $(seq "$repeat"); do cat "${all[@]}"; done >"$tmp/big.txt"

# spec NAME DATA VOCAB: a small GPT over DATA (a data.text body).
spec() {
  cat >"$tmp/$1.textproto" <<SPEC
model {
  layers { token_embedding { vocab_size: $3 dim: 64 } }
  layers { position_embedding { context: 64 dim: 64 } }
  layers { transformer_block { dim: 64 heads: 4 } }
  layers { layer_norm { normalized_shape: 64 } }
  layers { linear { in_features: 64 out_features: $3 bias: false } }
}
data { text { $2 context: 64 val_windows: 8 } }
optimizer { adam { lr: 0.001 } }
batch_size: 16
max_steps: 100
SPEC
}

# startup SPEC: the median wall seconds of `aq train-local SPEC
# --max_steps 0`, and the peak RSS (MB) of the last run.
startup() {
  local times=()
  for _ in $(seq "$runs"); do
    /usr/bin/time -f "%e %M" -o "$tmp/time" "$aq" train-local "$1" --max_steps 0 \
      --threads 1 >/dev/null
    times+=("$(cut -d' ' -f1 "$tmp/time")")
  done
  printf '%s\n' "${times[@]}" | sort -g | awk -v rss="$(cut -d' ' -f2 "$tmp/time")" \
    '{v[NR]=$1} END {printf "%.2f s (peak RSS %.0f MB)", v[int((NR+1)/2)], rss/1024}'
}

echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p')"
for corpus in main big; do
  if [ "$corpus" = main ]; then files=("${main[@]}"); else files=("$tmp/big.txt"); fi
  bytes=$(cat "${files[@]}" | wc -c)
  start=$(date +%s.%N)
  "$aq" tokenize "${files[@]}" --out_dir "$tmp/$corpus" --vocab_size 2048 \
    --output json >"$tmp/$corpus.json"
  took=$(echo "$(date +%s.%N) - $start" | bc)
  tokens=$(python3 -c "import json; d=json.load(open('$tmp/$corpus.json')); print(d['train_tokens'] + d['val_tokens'])")
  text_files=$(printf 'files: "%s" ' "${files[@]}")
  spec "$corpus-chars" "$text_files tokenizer: \"chars\"" 256
  spec "$corpus-tokens" "files: \"$tmp/$corpus/train.bin\" val_file: \"$tmp/$corpus/val.bin\" token_dtype: \"uint16\" vocab_size: 2048" 2048
  echo "== $corpus corpus: $bytes bytes of text in ${#files[@]} file(s)"
  printf "aq tokenize (once):     %.2f s -> %d tokens (%.2f bytes/token), train.bin + val.bin %d bytes\n" \
    "$took" "$tokens" "$(echo "$bytes / $tokens" | bc -l)" \
    "$(cat "$tmp/$corpus/train.bin" "$tmp/$corpus/val.bin" | wc -c)"
  echo "start-up, text (chars):    $(startup "$tmp/$corpus-chars.textproto")"
  echo "start-up, token files:     $(startup "$tmp/$corpus-tokens.textproto")"
done
