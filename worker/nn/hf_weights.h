// Hugging Face checkpoints to and from Aqueduct's weights files: pure
// functions that rename (and, for GPT-2's Conv1D, transpose) the tensors of
// a SafetensorsFile between the state_dict of a `transformers` model and
// Aqueduct's "layers.<i>.<param>" (docs/weights.md), for a given ModelSpec.
// `aq hf import|export` (client/hf_command.cc) is the command around them.
//
// GPT-2 (GPT2LMHeadModel): the spec's layers must be token_embedding,
// position_embedding, transformer_block x N (biases on, activation
// "gelu_tanh"), layer_norm and a linear head without bias (tied to layer 0
// or not). transformer.wte/wpe.weight, transformer.h.<n>.{ln_1, attn.c_attn,
// attn.c_proj, ln_2, mlp.c_fc, mlp.c_proj}.{weight,bias}, transformer.ln_f.*
// and lm_head.weight; c_attn, c_proj and c_fc are Conv1D modules, whose
// weight is [in, out], the transpose of nn.Linear's [out, in]. Files saved
// from GPT2Model (names without "transformer.", as the hub's gpt2 has them)
// are read too. The attention-mask buffers some files carry
// (transformer.h.<n>.attn.bias [1, 1, n, n], attn.masked_bias) are skipped.
//
// LLaMA (LlamaForCausalLM): token_embedding, llama_block x N, rms_norm and a
// linear head without bias (tied to layer 0 or not).
// model.embed_tokens.weight, model.layers.<n>.<the block's names>,
// model.norm.weight, lm_head.weight; every layout is nn.Linear's already.
// Older files' model.layers.<n>.self_attn.rotary_emb.inv_freq buffers are
// skipped (the tables come from rope_theta).
//
// The head: importing, a head tied to the embedding in the spec takes the
// embedding's values (as `transformers` does for a tied model); an untied
// head takes lm_head.weight, or the embedding's when the file has none
// (save_pretrained leaves the tied copy out). Exporting always writes
// lm_head.weight (the head's own copy), as state_dict() has it, so the file
// loads with load_state_dict(strict=True) as well as with from_pretrained.
//
// Importing accepts F32, BF16 and F16 and writes F32; exporting writes F32
// (or BF16 / F16 on request). The Conv1D transposes and the renames are
// exact, so import(export(x)) == x bit for bit for an F32 file.
//
// Thread-safety: stateless functions.
#ifndef AQUEDUCT_WORKER_NN_HF_WEIGHTS_H_
#define AQUEDUCT_WORKER_NN_HF_WEIGHTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/safetensors.h"
#include "common/tensor.h"
#include "proto/types.h"

namespace aqueduct {

enum class HfArch { kGpt2, kLlama };

// "gpt2" or "llama"; INVALID_ARGUMENT naming the choices otherwise.
absl::StatusOr<HfArch> HfArchFromName(absl::string_view name);
absl::string_view HfArchName(HfArch arch);

// One parameter under its two names.
struct HfTensorName {
  std::string hf;  // e.g. "transformer.h.0.attn.c_attn.weight"
  std::string aq;  // e.g. "layers.2.attn.c_attn.weight"
  Shape shape;     // Aqueduct's (nn.Linear) layout
  // Stored transposed by Hugging Face (GPT-2's Conv1D weights).
  bool transposed = false;
};

// Every parameter of `model` as `arch` names it, in layer order. The head's
// entry names lm_head.weight. INVALID_ARGUMENT when the spec is not such a
// model: a layer of another kind ("model.layers[3] is a dropout where a
// GPT-2 has a transformer_block"), a width that differs, a bias, an
// activation or a tie that `transformers` does not have.
absl::StatusOr<std::vector<HfTensorName>> HfTensorNames(HfArch arch,
                                                        const ModelSpec& model);

// A Hugging Face state_dict (`hf`) as an Aqueduct weights file for `model`
// (F32, metadata format "pt", producer "aqueduct"). INVALID_ARGUMENT naming
// the tensor for one that is missing, has another shape (both shapes named)
// or dtype, or has no place in the model.
absl::StatusOr<SafetensorsFile> ImportHfWeights(HfArch arch,
                                                const ModelSpec& model,
                                                const SafetensorsFile& hf);

// An Aqueduct weights file (`aq train-local --save_weights`, `aq weights`)
// of `model` as a Hugging Face state_dict, tensors in `dtype` (F32, BF16 or
// F16), metadata format "pt". INVALID_ARGUMENT naming the tensor for one
// that is missing, has another shape, or is not a parameter of the model
// (a checkpoint's optimizer state, another model's layer).
absl::StatusOr<SafetensorsFile> ExportHfWeights(HfArch arch,
                                                const ModelSpec& model,
                                                const SafetensorsFile& aq,
                                                DType dtype = DType::kF32);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_NN_HF_WEIGHTS_H_
