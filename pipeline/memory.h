// What a job's model, data and schedule hold in a worker's memory,
// estimated from the spec and the shapes shape inference gives
// (pipeline/shapes.h): nothing is built or allocated, and every size
// saturates (pipeline/limits.h) instead of overflowing.
//
// The estimates are lower bounds of what training holds: each parameter
// with its gradient and optimizer state, and the tensors each layer's
// forward keeps for its backward (as worker/nn's layers keep them) for one
// microbatch. The planner's StageMemoryBytes (coordinator/planner/
// aqueduct_model.h) adds stashed weight versions and the microbatches a
// schedule keeps in flight. So a size these refuse could not run on the
// memory given, while one they pass may still not fit: the coordinator
// then compares the plan's predicted memory with each worker's. A shape
// that is unknown (data in files the coordinator does not open) counts as
// nothing, which keeps the bound a lower one.
//
// Thread-safety: stateless functions.
#ifndef AQUEDUCT_PIPELINE_MEMORY_H_
#define AQUEDUCT_PIPELINE_MEMORY_H_

#include <cstdint>
#include <vector>

#include "pipeline/recompute.h"
#include "pipeline/shapes.h"
#include "proto/types.h"

namespace aqueduct {

// One layer's floats.
struct LayerFootprint {
  // Its parameters (a tied layer holds a copy of its owner's weight).
  int64_t parameters = 0;
  // Floats its forward keeps for its backward per sample (0 when its
  // shapes are unknown); the last layer's also counts its logits.
  int64_t activations_per_sample = 0;
};

// Layer `spec` with input `in` and output `out` (as InferLayerShape gave).
LayerFootprint EstimateLayer(const LayerSpec& spec, const SymbolicShape& in,
                             const SymbolicShape& out);

// Every layer of `model`, on `input` with `outputs` from InferModelShapes.
// With a tensor-parallel `degree` and recomputation `mode`, what one member
// of a tensor group holds of each transformer layer (worker/nn/
// transformer.h): its share of the split parameters (the LayerNorms and
// row-parallel biases whole), and of what its forward keeps for backward:
//   none:       x and x2 whole, q k v, the merged heads, the attention
//               weights and the MLP hidden split
//   selective:  as none, less the attention weights
//   full:       the input alone, [T, C]
// With `sequence` (sequence parallelism, degree > 1), a block's x and x2
// (full: its input) are the member's 1/degree of the rows.
// Other layers are whole on every member.
std::vector<LayerFootprint> EstimateModel(
    const ModelSpec& model, const SymbolicShape& input,
    const std::vector<SymbolicShape>& outputs, int degree = 1,
    Recompute mode = Recompute::kNone, bool sequence = false);

// Optimizer state per parameter: Adam 2 (two moments), SGD with momentum 1,
// plain SGD 0.
int OptimizerStateFactor(const OptimizerSpec& spec);

// Copies of each parameter training holds: weights, gradients and
// optimizer state.
inline int TrainingCopies(const OptimizerSpec& spec) {
  return 2 + OptimizerStateFactor(spec);
}

// Bytes of the layers [begin, end) of a stage.
struct StageFootprint {
  // `copies` copies of every parameter.
  int64_t parameter_bytes = 0;
  int64_t parameters = 0;
  // The activations of one microbatch.
  int64_t activation_bytes = 0;
  int64_t total_bytes = 0;
  // The layer that holds the most, and its bytes (-1 for no layers).
  int heaviest_layer = -1;
  int64_t heaviest_bytes = 0;
};

// Layers [begin, end) with `copies` copies of each parameter and
// microbatches of `samples` samples.
StageFootprint EstimateStage(const std::vector<LayerFootprint>& layers,
                             int begin, int end, int copies, int64_t samples);

// The fewest contiguous stages of at most `limit_bytes` each that hold the
// layers (greedy, which is optimal for contiguous cuts); a layer that alone
// exceeds the limit counts as a stage of its own (check layers alone
// first).
int64_t MinimumStages(const std::vector<LayerFootprint>& layers, int copies,
                      int64_t samples, int64_t limit_bytes);

// Bytes a worker that generates synthetic data holds: `train` + `test`
// samples (floats) and their labels (int32), and the linear teacher that
// labels them (num_classes x sample floats).
int64_t SyntheticDataBytes(const SyntheticData& s, int64_t train, int64_t test);

// Bytes a worker keeps for every optimizer step of a job, at least: a
// pipeline stage materialises its whole schedule (pipeline/schedule.h: a
// forward, a backward, a send and a receive per microbatch and a step per
// minibatch, at the least), one process keeps the loss of every step.
int64_t PerStepBytes(bool pipeline, int64_t microbatches);

}  // namespace aqueduct

#endif  // AQUEDUCT_PIPELINE_MEMORY_H_
