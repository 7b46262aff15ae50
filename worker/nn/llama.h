// The layers of LLaMA models, with Hugging Face's LlamaRMSNorm and
// LlamaDecoderLayer semantics (proto/job.proto, RmsNormSpec and
// LlamaBlockSpec): RMSNorm, rotary position embeddings (the rotate-half
// form), grouped-query causal attention and the SwiGLU MLP, no biases and
// no dropout. CreateLayer (layer.h) builds them through MakeLlamaLayer;
// their shape rules live with every other layer's in pipeline/shapes.cc.
//
// Parameters are initialised as Hugging Face's LlamaPreTrainedModel does:
// linear weights N(0, 0.02), RMSNorm weights 1. Parameter names are Hugging
// Face's under the layer ("self_attn.q_proj.weight", ...), so a
// LlamaDecoderLayer's state_dict maps name for name (docs/weights.md).
//
// The block keeps for backward its input, the residual after attention,
// the rotated q and k, v, the attention weights, the merged heads and the
// MLP's gate and up projections; the norms and the SwiGLU product are
// recomputed in backward. Recomputation (PassContext.recompute) as the GPT
// block's: selective drops the attention weights, full keeps the input
// alone.
//
// Thread-safety: as Layer: immutable, thread-safe; the Device is not.
#ifndef AQUEDUCT_WORKER_NN_LLAMA_H_
#define AQUEDUCT_WORKER_NN_LLAMA_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "proto/types.h"
#include "worker/nn/layer.h"

namespace aqueduct {

// Builds layer `index` when `spec` is an rms_norm or llama_block whose
// shapes InferLayerShape has accepted (`in` per sample); INVALID_ARGUMENT
// for any other kind, or for a shard of degree > 1 (the LLaMA block is not
// tensor-parallel).
absl::StatusOr<std::unique_ptr<Layer>> MakeLlamaLayer(
    const LayerSpec& spec, int index, const Shape& in, uint64_t seed,
    const TensorShard& shard = {});

// The rotary tables of `positions` positions for heads `head_dim` wide
// ([positions, head_dim / 2] each), as Hugging Face computes them in
// float32: inv_freq[i] = 1 / theta^(2i / head_dim), angle = t * inv_freq[i].
void RopeTables(int64_t positions, int64_t head_dim, float theta,
                std::vector<float>* cos, std::vector<float>* sin);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_NN_LLAMA_H_
