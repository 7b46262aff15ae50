#!/usr/bin/env bash
# aq tokenize as a user runs it: a SentencePiece model trained on a
# fortunes file with Debian's spm tools, token files that give the text
# back (decoded by Python's sentencepiece when present), a job training on
# them (aq train-local), aq generate decoding subwords, and bad input
# refused naming what is wrong.
set -uo pipefail
AQ="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
text=/usr/share/games/fortunes/cookie

"$AQ" tokenize "$text" --out_dir "$tmp/tok" --vocab_size 400 --output json \
  >"$tmp/out.json" 2>"$tmp/err" || fail "tokenize: exit $? ($(cat "$tmp/err"))"
for f in train.bin val.bin tokenizer.model; do
  [ -s "$tmp/tok/$f" ] || fail "tokenize wrote no $f"
done
grep -q '"vocab_size":400' "$tmp/out.json" || fail "json: $(cat "$tmp/out.json")"
grep -q '"token_dtype":"uint16"' "$tmp/out.json" || fail "json dtype"
train=$(stat -c %s "$tmp/tok/train.bin")
[ $((train % 2)) -eq 0 ] || fail "train.bin holds $train bytes"
if /usr/bin/python3 -c "import sentencepiece, numpy" 2>/dev/null; then
  /usr/bin/python3 - "$tmp/tok" "$text" <<'PY' || fail "the ids do not decode to the text"
import sys, numpy as np, sentencepiece as spm
d = sys.argv[1]
ids = np.concatenate([np.fromfile(d + "/train.bin", dtype="<u2"),
                      np.fromfile(d + "/val.bin", dtype="<u2")]).tolist()
sp = spm.SentencePieceProcessor(model_file=d + "/tokenizer.model")
sys.exit(0 if sp.decode(ids) == open(sys.argv[2], encoding="utf-8").read() else 1)
PY
fi

cat >"$tmp/job.textproto" <<SPEC
model {
  layers { token_embedding { vocab_size: 400 dim: 32 } }
  layers { llama_block { dim: 32 heads: 4 kv_heads: 2 hidden: 64 } }
  layers { rms_norm { dim: 32 } }
  layers { linear { in_features: 32 out_features: 400 bias: false } }
}
data { text { files: "$tmp/tok/train.bin" val_file: "$tmp/tok/val.bin"
              token_dtype: "uint16" vocab_size: 400 tokenizer: "sentencepiece"
              tokenizer_model: "$tmp/tok/tokenizer.model" context: 32
              val_windows: 8 } }
optimizer { adamw { lr: 0.003 weight_decay: 0.1 } clip_grad_norm: 1.0 }
batch_size: 8
grad_accumulation: 2
max_steps: 30
seed: 1
SPEC
"$AQ" train-local "$tmp/job.textproto" --threads 1 --save_weights "$tmp/w.safetensors" \
  --output json >"$tmp/train.json" 2>"$tmp/err" || fail "train-local: $(cat "$tmp/err")"
/usr/bin/python3 - "$tmp/train.json" <<'PY' || fail "training did not lower the loss"
import json, sys
loss = json.load(open(sys.argv[1]))["loss"]
sys.exit(0 if len(loss) == 30 and loss[-1] < loss[0] - 0.5 else 1)
PY
"$AQ" generate --spec "$tmp/job.textproto" --weights "$tmp/w.safetensors" \
  --prompt "Q: " --tokens 12 --seed 3 >"$tmp/gen" 2>"$tmp/err" ||
  fail "generate: $(cat "$tmp/err")"
head -c 3 "$tmp/gen" | grep -q "Q: " || fail "generate: $(cat "$tmp/gen")"

# Bad input: an id past vocab_size, a missing model, a bad vocab size.
sed 's/vocab_size: 400 tokenizer/vocab_size: 100 tokenizer/' "$tmp/job.textproto" \
  | sed 's/vocab_size: 400 dim/vocab_size: 100 dim/; s/out_features: 400/out_features: 100/' \
  >"$tmp/small.textproto"
"$AQ" train-local "$tmp/small.textproto" --max_steps 1 >/dev/null 2>"$tmp/err" &&
  fail "ids past vocab_size were accepted"
grep -q "outside the vocabulary \[0, 100)" "$tmp/err" || fail "vocab error: $(cat "$tmp/err")"
"$AQ" tokenize "$text" --out_dir "$tmp/x" --model "$tmp/none.model" >/dev/null 2>"$tmp/err" &&
  fail "a missing --model was accepted"
grep -q "none.model" "$tmp/err" || fail "missing model: $(cat "$tmp/err")"
"$AQ" tokenize "$text" --out_dir "$tmp/y" --vocab_size 10 >/dev/null 2>"$tmp/err" &&
  fail "--vocab_size 10 was accepted"
grep -q "vocab_size=10" "$tmp/err" || fail "vocab size: $(cat "$tmp/err")"

[ "$fails" -eq 0 ] && echo "PASS" || exit 1
