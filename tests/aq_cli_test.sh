#!/usr/bin/env bash
# Process-level test of `aq train-local` as a user runs it: exit codes, error
# messages naming the bad field or file, JSON output (exactly one document),
# both flag spellings, checked writes, and the safetensors round trip.
set -uo pipefail
AQ="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

cat >"$tmp/job.textproto" <<'SPEC'
name: "cli-test"
model {
  layers { flatten {} }
  layers { linear { in_features: 12 out_features: 16 } }
  layers { relu {} }
  layers { linear { in_features: 16 out_features: 3 } }
}
data { synthetic { sample_shape: [3, 4] num_classes: 3 train_samples: 256
                   test_samples: 64 seed: 2 } }
optimizer { sgd { lr: 0.1 momentum: 0.9 } }
batch_size: 16
epochs: 2
seed: 3
SPEC

# No arguments: usage, exit 2.
"$AQ" >/dev/null 2>"$tmp/err"; rc=$?
[ "$rc" -eq 2 ] || fail "no args: exit $rc, want 2"
grep -q "usage: aq" "$tmp/err" || fail "no args: no usage text"

# Unknown flag.
"$AQ" train-local "$tmp/job.textproto" --bogus 2>"$tmp/err" >/dev/null; rc=$?
[ "$rc" -eq 2 ] || fail "bad flag: exit $rc"
grep -q "aq train-local: unknown flag '--bogus'" "$tmp/err" || fail "bad flag message: $(cat "$tmp/err")"

# A flag without its value, and a malformed value, name the flag.
"$AQ" train-local "$tmp/job.textproto" --epochs 2>"$tmp/err" >/dev/null; rc=$?
[ "$rc" -eq 2 ] || fail "missing value: exit $rc"
grep -q "flag '--epochs' needs a value" "$tmp/err" || fail "missing value message: $(cat "$tmp/err")"
"$AQ" train-local "$tmp/job.textproto" --max-steps=abc 2>"$tmp/err" >/dev/null; rc=$?
[ "$rc" -eq 2 ] || fail "bad value: exit $rc"
grep -q "bad value 'abc' for --max-steps: want an integer" "$tmp/err" || fail "bad value message: $(cat "$tmp/err")"
"$AQ" train-local "$tmp/job.textproto" --max_steps -1 2>"$tmp/err" >/dev/null; rc=$?
[ "$rc" -eq 2 ] || fail "--max_steps -1: exit $rc"
# --max_steps 0 trains nothing: it evaluates the initial model.
"$AQ" train-local "$tmp/job.textproto" --max_steps 0 --output=json >"$tmp/eval.json" 2>"$tmp/err" ||
  fail "--max_steps 0: $(cat "$tmp/err")"
grep -q '"steps":0,' "$tmp/eval.json" || fail "--max_steps 0: $(cat "$tmp/eval.json")"

# Missing file.
"$AQ" train-local "$tmp/nope.textproto" 2>"$tmp/err" >/dev/null; rc=$?
[ "$rc" -eq 1 ] || fail "missing file: exit $rc"
grep -q "nope.textproto: cannot open" "$tmp/err" || fail "missing file message: $(cat "$tmp/err")"

# A spec whose layer does not fit names the field.
sed 's/in_features: 16 out_features: 3/in_features: 15 out_features: 3/' \
  "$tmp/job.textproto" >"$tmp/bad.textproto"
"$AQ" train-local "$tmp/bad.textproto" 2>"$tmp/err" >/dev/null; rc=$?
[ "$rc" -eq 1 ] || fail "bad spec: exit $rc"
grep -q "model.layers\[3\].linear.in_features=15 does not match the previous layer's output 16" \
  "$tmp/err" || fail "bad spec message: $(cat "$tmp/err")"

# JSON output with the documented keys; weights saved.
"$AQ" train-local "$tmp/job.textproto" --output json --threads 1 \
  --save-weights "$tmp/w.safetensors" >"$tmp/out.json" 2>"$tmp/err"; rc=$?
[ "$rc" -eq 0 ] || fail "train: exit $rc: $(cat "$tmp/err")"
for key in steps samples_per_second loss test_accuracy wall_seconds; do
  grep -q "\"$key\":" "$tmp/out.json" || fail "json lacks $key: $(cat "$tmp/out.json")"
done
grep -q '"steps":32,' "$tmp/out.json" || fail "json steps: $(cat "$tmp/out.json")"
python3 -c 'import json,sys; json.load(sys.stdin)' <"$tmp/out.json" ||
  fail "train-local --output json is not one JSON document: $(cat "$tmp/out.json")"
[ -s "$tmp/w.safetensors" ] || fail "no weights file"
# A number (not null, NaN or a string: awk would compare those as text, and
# "null" > 0.5), finite and above 0.5.
python3 - "$tmp/out.json" <<'PY' || fail "test accuracy not a finite number above 0.5: $(cat "$tmp/out.json")"
import json, math, sys
a = json.load(open(sys.argv[1])).get("test_accuracy")
ok = type(a) in (int, float) and math.isfinite(a) and a > 0.5
sys.exit(0 if ok else 1)
PY

# --max-steps overrides; init from the saved weights.
"$AQ" train-local "$tmp/job.textproto" --output json --max-steps 3 \
  --init-weights "$tmp/w.safetensors" >"$tmp/out2.json" 2>"$tmp/err"; rc=$?
[ "$rc" -eq 0 ] || fail "resume: exit $rc: $(cat "$tmp/err")"
grep -q '"steps":3,' "$tmp/out2.json" || fail "max-steps: $(cat "$tmp/out2.json")"
# The same with the underscore spellings (the documented ones).
"$AQ" train-local "$tmp/job.textproto" --output=json --max_steps=2 \
  --init_weights "$tmp/w.safetensors" >"$tmp/out3.json" 2>"$tmp/err"; rc=$?
[ "$rc" -eq 0 ] || fail "underscore spellings: exit $rc: $(cat "$tmp/err")"
grep -q '"steps":2,' "$tmp/out3.json" || fail "max_steps: $(cat "$tmp/out3.json")"

# Weights to a directory that does not exist: refused before training,
# naming the path.
"$AQ" train-local "$tmp/job.textproto" --max-steps 2 \
  --save-weights "$tmp/nonexistent/dir/w.safetensors" >"$tmp/out" 2>"$tmp/err"; rc=$?
[ "$rc" -ne 0 ] || fail "save-weights to a missing directory: exit 0"
grep -q "$tmp/nonexistent/dir/w.safetensors" "$tmp/err" ||
  fail "save-weights message does not name the path: $(cat "$tmp/err")"
grep -q "saved" "$tmp/out" && fail "claims to have saved weights: $(cat "$tmp/out")"

# A corrupt weights file is refused with the path.
printf 'garbage!' >"$tmp/bad.safetensors"
"$AQ" train-local "$tmp/job.textproto" --init-weights "$tmp/bad.safetensors" \
  2>"$tmp/err" >/dev/null; rc=$?
[ "$rc" -ne 0 ] || fail "bad weights accepted"
grep -q "bad.safetensors" "$tmp/err" || fail "bad weights message: $(cat "$tmp/err")"

# Text output ends with the test accuracy line.
"$AQ" train-local "$tmp/job.textproto" --max-steps 4 >"$tmp/out.txt" 2>&1; rc=$?
[ "$rc" -eq 0 ] || fail "text: exit $rc"
grep -q "^test accuracy " "$tmp/out.txt" || fail "text output: $(cat "$tmp/out.txt")"

# Checkpoints: a run resumed from its checkpoint at step 2 ends with the
# same weights, byte for byte, as the run that went through.
"$AQ" train-local "$tmp/job.textproto" --max_steps 4 --checkpoint_dir "$tmp/ck" \
  --checkpoint_every 2 --save_weights "$tmp/through.safetensors" >/dev/null 2>"$tmp/err" ||
  fail "checkpointing: $(cat "$tmp/err")"
[ -f "$tmp/ck/train-local/v00000002/manifest.json" ] || fail "no committed checkpoint at v2"
"$AQ" train-local "$tmp/job.textproto" --max_steps 4 \
  --resume "$tmp/ck/train-local/v00000002" --save_weights "$tmp/resumed.safetensors" \
  >/dev/null 2>"$tmp/err" || fail "resume: $(cat "$tmp/err")"
cmp -s "$tmp/through.safetensors" "$tmp/resumed.safetensors" ||
  fail "the resumed run's weights differ from the uninterrupted run's"
"$AQ" train-local "$tmp/job.textproto" --resume "$tmp/nope" 2>"$tmp/err" >/dev/null; rc=$?
[ "$rc" -eq 1 ] || fail "resume from nothing: exit $rc"
grep -q "resume $tmp/nope" "$tmp/err" || fail "resume error: $(cat "$tmp/err")"

# A small GPT: trained for a few steps with validation, then aq generate
# from its weights (deterministic per seed, JSON on request, unknown prompt
# characters named).
for _ in $(seq 200); do printf 'the cat sat on the mat. '; done >"$tmp/text.txt"
cat >"$tmp/gpt.textproto" <<SPEC
model {
  layers { token_embedding { vocab_size: 16 dim: 16 } }
  layers { position_embedding { context: 8 dim: 16 } }
  layers { transformer_block { dim: 16 heads: 2 } }
  layers { layer_norm { normalized_shape: 16 } }
  layers { linear { in_features: 16 out_features: 16 bias: false } tie_weight_to: 0 }
}
data { text { files: "$tmp/text.txt" context: 8 } }
optimizer { adam { lr: 0.01 } }
batch_size: 8
max_steps: 20
eval_every: 10
SPEC
"$AQ" train-local "$tmp/gpt.textproto" --save_weights "$tmp/gpt.safetensors" \
  >"$tmp/out" 2>"$tmp/err" || fail "gpt train-local: $(cat "$tmp/err")"
grep -q "^step 10: held-out loss" "$tmp/out" || fail "no validation at step 10: $(cat "$tmp/out")"
grep -q "^validation loss .* perplexity" "$tmp/out" || fail "no final validation: $(cat "$tmp/out")"
gen() {
  "$AQ" generate --spec "$tmp/gpt.textproto" --weights "$tmp/gpt.safetensors" \
    --tokens 30 --seed 4 "$@"
}
a=$(gen --prompt "the c") || fail "generate failed"
b=$(gen --prompt "the c") || fail "generate failed again"
{ [ "$a" = "$b" ] && [ "${#a}" -ge 35 ]; } || fail "generate: '$a' then '$b'"
case "$a" in "the c"*) ;; *) fail "generate does not start with its prompt: '$a'" ;; esac
gen --prompt "the c" --output json |
  python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["prompt"] == "the c", d' ||
  fail "generate --output json"
gen --prompt "the dog" 2>"$tmp/err" >/dev/null
rc=$?
[ "$rc" -eq 1 ] || fail "generate with an unknown character: exit $rc"
grep -q "character 'd' (U+0064)" "$tmp/err" || fail "unknown character error: $(cat "$tmp/err")"

if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed" >&2
  exit 1
fi
echo "all aq CLI checks passed"
