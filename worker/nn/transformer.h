// The layers of GPT models, with nanoGPT's model.py semantics: token and
// learned position embeddings, causal multi-head self-attention and the
// pre-LayerNorm transformer block (x = x + attn(ln_1(x)); x = x +
// mlp(ln_2(x))). CreateLayer (layer.h) builds them from their LayerSpecs
// through MakeTransformerLayer; their shape rules live with every other
// layer's in pipeline/shapes.cc.
//
// Parameters are initialised as nanoGPT does: weights N(0, 0.02), biases 0,
// LayerNorm weight 1 and bias 0. (nanoGPT scales the c_proj weights by
// 1/sqrt(2 * n_layer); a layer does not know n_layer, so they get 0.02 too.)
//
// Each dropout site (attention weights, attention output, MLP output) draws
// its own mask, keyed by (job seed, layer, site, minibatch) and indexed by
// the element's position in the whole minibatch, so a microbatch draws its
// rows' share and a pipeline draws the masks one process would.
//
// Thread-safety: as Layer: immutable, thread-safe; the Device is not.
#ifndef AQUEDUCT_WORKER_NN_TRANSFORMER_H_
#define AQUEDUCT_WORKER_NN_TRANSFORMER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor.h"
#include "proto/types.h"
#include "worker/nn/layer.h"

namespace aqueduct {

// Mixes a seed with two integers into a key for DropoutUniform: the keys of
// parameter initialisation and of dropout masks (shared with layer.cc).
uint64_t MixKey(uint64_t seed, uint64_t a, uint64_t b);

// Fills `out` with N(0, stddev^2) draws, a pure function of (seed, layer,
// param): Box-Muller over DropoutUniform under MixKey(seed, layer + 1,
// param + 1), the key UniformInit uses.
void NormalInit(uint64_t seed, int layer, int param, float stddev,
                std::vector<float>* out);

// Builds layer `index` when `spec` is a token_embedding,
// position_embedding, causal_self_attention or transformer_block whose
// shapes InferLayerShape has accepted (`in` and `out` per sample);
// INVALID_ARGUMENT for any other kind, or for a shard whose degree does not
// divide the heads (and the MLP's hidden units).
//
// Tensor parallelism (shard.degree > 1), as Megatron-LM's: c_attn and
// mlp.c_fc are column-parallel (member r holds heads [r, r + 1) * H / t of
// q, k and v, and that share of the hidden units), attn.c_proj and
// mlp.c_proj row-parallel (the matching input columns; their biases whole
// on every member, added once after the sum). Forward sums each half's
// output over the group (PassContext.tensor), backward the gradient of
// each half's input; the LayerNorms and the residual stream are whole on
// every member. Initial values are the whole layer's, split, and dropout
// masks index the whole layer's elements, so training does not depend on
// the degree beyond the order of floating-point sums.
absl::StatusOr<std::unique_ptr<Layer>> MakeTransformerLayer(
    const LayerSpec& spec, int index, const Shape& in, const Shape& out,
    uint64_t seed, const TensorShard& shard = {});

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_NN_TRANSFORMER_H_
