// Shape inference over a model spec, without building the model: what each
// layer outputs per sample, and every field error the layer would raise, in
// the same words (INVALID_ARGUMENT naming the field: "model.layers[3].
// linear.in_features=512 does not match the previous layer's output 1024").
//
// The input may be partly unknown: the coordinator validates a job whose data
// lives on the workers' hosts without opening it, so a sample shape read
// from a file is unknown there (unknown rank), and dimensions that depend on
// it are unknown (kUnknownDim). Every check whose operands are known is made;
// the worker that reads the data makes the rest when it builds the model.
//
// Thread-safety: stateless functions.
#ifndef AQUEDUCT_PIPELINE_SHAPES_H_
#define AQUEDUCT_PIPELINE_SHAPES_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/types.h"

namespace aqueduct {

inline constexpr int64_t kUnknownDim = -1;

// A per-sample shape whose rank or dimensions may be unknown.
struct SymbolicShape {
  // Unknown rank: nothing is known but, possibly, the last dimension.
  bool rank_known = false;
  // When rank_known: the dimensions, kUnknownDim where unknown.
  std::vector<int64_t> dims;
  // When !rank_known: the last dimension if known, else kUnknownDim.
  int64_t last = kUnknownDim;

  static SymbolicShape Known(std::vector<int64_t> dims);
  static SymbolicShape Unknown() { return SymbolicShape(); }
  int64_t LastDim() const;
  bool FullyKnown() const;
  // "[1, 28, 28]", "[?, 28]" or "[..., 10]" / "[...]".
  std::string ToString() const;
};

// The output shape of layer `index` given its input, or the error the layer
// raises for it.
absl::StatusOr<SymbolicShape> InferLayerShape(const LayerSpec& spec, int index,
                                              const SymbolicShape& in);

// Each layer's output shape in order (INVALID_ARGUMENT for an empty model,
// the first layer in error, or a tie TiedWeights refuses).
absl::StatusOr<std::vector<SymbolicShape>> InferModelShapes(
    const ModelSpec& model, const SymbolicShape& input);

// Weight tying (LayerSpec.tie_weight_to): for each layer, the earlier layer
// whose "weight" it shares, or nullopt. INVALID_ARGUMENT naming the field
// unless every tie names an earlier layer, both layers are linear or
// token_embedding with weights of one shape ("model.layers[9].
// tie_weight_to=0: layer 9's weight is [113, 128] but layer 0's is [256,
// 128]"), and the earlier layer is not itself tied.
absl::StatusOr<std::vector<std::optional<int>>> TiedWeights(
    const ModelSpec& model);

}  // namespace aqueduct

#endif  // AQUEDUCT_PIPELINE_SHAPES_H_
