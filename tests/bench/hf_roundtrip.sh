#!/usr/bin/env bash
# Hugging Face checkpoints through Aqueduct and back (aq hf import|export),
# with PyTorch only (tests/bench/hf_models.py rebuilds GPT2LMHeadModel and
# LlamaForCausalLM with transformers' module names and layouts; no
# transformers library, no download). For a small GPT-2 (Conv1D weights,
# tanh GELU, head tied to wte, a file without lm_head and with the mask
# buffers) and a small LLaMA (rotate-half RoPE, grouped-query attention,
# untied head, AdamW), on Debian's fortunes (cookie), context 32:
#  1. a random HF-layout model's state_dict -> aq hf import -> aq hf export
#     gives back the same tensors bit for bit;
#  2. aq hf import -> aq train-local SPEC --init_weights X --max_steps 3
#     --save_weights Y -> aq hf export -> load_state_dict(strict=True) into
#     the HF-layout module, against the same module trained 3 steps in
#     PyTorch from the same file (torch_gpt.py's Trainer: the same windows,
#     optimizer and learning rate): logits, parameters and each step's loss
#     within 1e-4 (relative).
# Exits 1 on any mismatch.
#
#   tests/bench/hf_roundtrip.sh [STEPS=3]
set -euo pipefail
cd "$(dirname "$0")/../.."
steps="${1:-3}"
if [ -z "${BIN:-}" ]; then
  bazel build //client:aq >/dev/null 2>&1
  BIN=bazel-bin
fi
aq="$BIN/client/aq"
py=/usr/bin/python3
helper=tests/bench/hf_models.py
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
corpus=/usr/share/games/fortunes/cookie

cat >"$tmp/gpt2.textproto" <<EOF
model {
  layers { name: "wte" token_embedding { vocab_size: 96 dim: 64 } }
  layers { name: "wpe" position_embedding { context: 32 dim: 64 } }
  layers { name: "h.0" transformer_block { dim: 64 heads: 4 activation: "gelu_tanh" } }
  layers { name: "h.1" transformer_block { dim: 64 heads: 4 activation: "gelu_tanh" } }
  layers { name: "ln_f" layer_norm { normalized_shape: 64 } }
  layers {
    name: "lm_head"
    linear { in_features: 64 out_features: 96 bias: false }
    tie_weight_to: 0
  }
}
data { text { files: "$corpus" context: 32 tokenizer: "chars" } }
optimizer { adam { lr: 0.003 } }
batch_size: 8
max_steps: $steps
seed: 7
EOF
cat >"$tmp/llama.textproto" <<EOF
model {
  layers { name: "embed_tokens" token_embedding { vocab_size: 96 dim: 64 } }
  layers { name: "layers.0" llama_block { dim: 64 heads: 4 kv_heads: 2 hidden: 172 } }
  layers { name: "layers.1" llama_block { dim: 64 heads: 4 kv_heads: 2 hidden: 172 } }
  layers { name: "norm" rms_norm { dim: 64 } }
  layers { name: "lm_head" linear { in_features: 64 out_features: 96 bias: false } }
}
data { text { files: "$corpus" context: 32 tokenizer: "chars" } }
optimizer { adamw { lr: 0.003 weight_decay: 0.1 } clip_grad_norm: 1.0 }
batch_size: 8
max_steps: $steps
seed: 7
EOF

status=0
for arch in gpt2 llama; do
  spec="$tmp/$arch.textproto"
  d="$tmp/$arch"
  mkdir -p "$d"
  echo "== $arch"
  $py $helper init --arch $arch --spec "$spec" --out "$d/hf_init.safetensors" --seed 3
  "$aq" hf import --arch $arch --spec "$spec" "$d/hf_init.safetensors" -o "$d/aq_init.safetensors"
  "$aq" hf export --arch $arch --spec "$spec" "$d/aq_init.safetensors" -o "$d/hf_back.safetensors"
  $py $helper same "$d/hf_init.safetensors" "$d/hf_back.safetensors" || status=1
  "$aq" train-local "$spec" --init_weights "$d/aq_init.safetensors" --max_steps "$steps" \
    --save_weights "$d/aq_trained.safetensors" --threads 2 --output json >"$d/losses.json"
  "$aq" hf export --arch $arch --spec "$spec" "$d/aq_trained.safetensors" -o "$d/hf_trained.safetensors"
  $py $helper check --arch $arch --spec "$spec" --init "$d/hf_init.safetensors" \
    --trained "$d/hf_trained.safetensors" --aq_losses "$d/losses.json" --steps "$steps" ||
    status=1
done
[ $status = 0 ] && echo "hf_roundtrip: OK" || echo "hf_roundtrip: FAILED"
exit $status
