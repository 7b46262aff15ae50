// Layers: the kernels of a pipeline stage, each with forward and backward.
//
// A Layer holds only its configuration and shapes; parameters, gradients and
// the tensors saved for backward are passed in and out explicitly. That is
// what lets one stage keep several weight versions (weight stashing) and
// several minibatches in flight with the same Layer objects. Layers are
// immutable after construction and so thread-safe; the Device they run on is
// not (one owner thread at a time).
//
// Shapes: a layer's input_shape()/output_shape() are per-sample; tensors
// passed to Forward/Backward carry a leading batch dimension.
#ifndef AQUEDUCT_WORKER_NN_LAYER_H_
#define AQUEDUCT_WORKER_NN_LAYER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/device/device.h"
#include "common/tensor.h"
#include "pipeline/recompute.h"
#include "proto/types.h"

namespace aqueduct {

// One learnable tensor of a layer, e.g. {"weight", [out, in]}.
struct ParamSpec {
  std::string name;
  Shape shape;
};

// A layer's place in a tensor-parallel group (Megatron's tensor
// parallelism): member `rank` of `degree`. Degree 1: the whole layer.
struct TensorShard {
  int rank = 0;
  int degree = 1;
  // Sequence parallelism (degree > 1, transformer blocks only): the block
  // takes and gives member `rank`'s part of the rows, [rows / degree, C],
  // the rows of the (micro)batch's [B * T, C] in `degree` equal runs
  // (ForwardRange splits and gathers at the ends of a run of such layers).
  bool sequence = false;
};

// How one parameter is split across a tensor-parallel group: not at all
// (dim -1: every member holds the whole tensor, and its gradient comes out
// the same on each), or along dimension `dim`, which holds `blocks` equal
// blocks that are split each (c_attn's q, k and v: member r holds rows
// [r, r + 1) / degree of each).
struct ParamSplit {
  int dim = -1;
  int blocks = 1;
};

// The collectives a tensor-parallel layer runs in its passes (Megatron's
// conjugate operators: the sum after a row-parallel map in forward, and of
// the input gradient before a column-parallel map in backward). Members
// call them in the same order; the result has the same bits on every
// member. Not thread-safe: one pass at a time.
class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // `t` becomes the element-wise sum over the members.
  virtual absl::Status AllReduce(Device& device, const Tensor& t) = 0;
  // The same on host memory: data[0, n) summed; out[r * n, (r + 1) * n)
  // member r's in[0, n).
  virtual absl::Status AllReduceHost(float* data, size_t n) = 0;
  virtual absl::Status AllGatherHost(const float* in, size_t n, float* out) = 0;
  // Sequence parallelism's pair (whole.numel() == size() * part.numel()):
  // `whole` becomes every member's `part` in rank order; `part` becomes
  // the sum over the members of their whole's rank-th run.
  virtual absl::Status AllGather(Device& device, const Tensor& part,
                                 const Tensor& whole) = 0;
  virtual absl::Status ReduceScatter(Device& device, const Tensor& whole,
                                     const Tensor& part) = 0;
};

// What a forward or backward pass is for.
struct PassContext {
  // Training (dropout active, tensors saved for backward) or evaluation.
  bool training = true;
  // The global minibatch number; keys dropout masks so that every worker
  // and train-local draw the same mask for the same minibatch.
  uint64_t minibatch = 0;
  // Row of the minibatch where this (micro)batch starts: a microbatch draws
  // its rows' part of the minibatch's dropout mask.
  uint64_t sample_offset = 0;
  // The tensor-parallel group of a layer built with a shard of degree > 1
  // (not owned; null for whole layers).
  TensorParallelGroup* tensor = nullptr;
  // What a training forward keeps for backward (the stage's choice;
  // pipeline/recompute.h). Layers other than the transformer's keep what
  // they keep.
  Recompute recompute = Recompute::kNone;
};

// Tensors a layer saved in Forward for its Backward. One per (layer,
// minibatch in flight).
struct LayerCache {
  std::vector<Tensor> tensors;
  // What the forward kept (PassContext.recompute when it ran).
  Recompute recompute = Recompute::kNone;
};

// One linear map's weight gradient left for later: dW[out, in] (+)=
// dy^T x and db (+)= the sum of dy's rows, with x [rows, in] and dy
// [rows, out] (the W of a split backward; Megatron's WeightGradStore).
// Holds its tensors, so they live until it runs.
struct DeferredLinearGrad {
  Tensor x, dy, dw, db;
  bool has_bias = false;
  int64_t rows = 0, in = 0, out = 0;
  bool accumulate = false;
};

// What a split backward's input half left for its weight half.
struct DeferredGrads {
  std::vector<DeferredLinearGrad> linears;
  // The Delay layers' weight_ms (they stand for compute in benchmarks).
  double delay_ms = 0;
};

// The weight half of a split backward: each deferred gradient, with the
// same kernels (and so the same bits) as the fused backward.
void RunDeferredGrads(Device& device, const DeferredGrads& deferred);

// dW (+)= dy^T x and db (+)= sum of dy's rows for a linear map, now when
// `deferred` is null, else left in it.
void LinearWeightGrad(Device& device, const Tensor& x, const Tensor& dy,
                      int64_t rows, int64_t in, int64_t out, const Tensor& dw,
                      const Tensor* db, bool accumulate,
                      DeferredGrads* deferred);

class Layer {
 public:
  virtual ~Layer() = default;

  // Index of the layer in its model; names its parameters
  // ("layers.<index>.<param>").
  int index() const { return index_; }
  // Lower-case kind, as in the spec: "linear", "relu", ...
  virtual std::string kind() const = 0;
  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const { return output_shape_; }

  // Learnable tensors, in a fixed order (weight before bias): this
  // member's shard of each when the layer is tensor-parallel.
  virtual std::vector<ParamSpec> Params() const { return {}; }
  // The layer's place in its tensor-parallel group, and how each of
  // Params() is split (the whole tensor's shape: WholeShape).
  const TensorShard& shard() const { return shard_; }
  virtual ParamSplit SplitOf(int param) const {
    (void)param;
    return {};
  }
  // Whether a sequence-parallel member's gradient of Params()[param] comes
  // from its rows only (the LayerNorms'), to be summed over the group
  // before the step (SumSequenceParallelGradients).
  virtual bool PartialOverRows(int param) const {
    (void)param;
    return false;
  }
  // Seeded initial values for Params(), PyTorch's default schemes. Each
  // vector is filled with the element count of the matching ParamSpec.
  virtual void InitParams(uint64_t seed,
                          std::vector<std::vector<float>>* values) const;

  // y = f(x). With ctx.training, fills `cache` for Backward (cache may be
  // null when !ctx.training). `y` may share x's buffer (in-place layers).
  virtual absl::Status Forward(Device& device, absl::Span<const Tensor> params,
                               const Tensor& x, const PassContext& ctx,
                               Tensor* y, LayerCache* cache) const = 0;

  // From dy (may be overwritten), computes dx (when dx is not null) and the
  // parameter gradients: written, or added to when `accumulate` (gradient
  // accumulation over microbatches). `params` must be the version the
  // forward used.
  virtual absl::Status Backward(Device& device, absl::Span<const Tensor> params,
                                const LayerCache& cache, const Tensor& dy,
                                const PassContext& ctx, Tensor* dx,
                                absl::Span<const Tensor> grads,
                                bool accumulate) const = 0;

  // The split backward (B = I + W, the zero-bubble schedules): as
  // Backward, but the weight-gradient GEMMs of the layer's linear maps go to
  // `deferred` instead of running (RunDeferredGrads runs them later, to the
  // same bits); the other parameter gradients (LayerNorm's, embeddings',
  // convolutions') are written here. Until then the tensors `deferred`
  // holds, dy and the inputs the forward saved, must not be written. The
  // default defers nothing.
  virtual absl::Status BackwardInput(Device& device,
                                     absl::Span<const Tensor> params,
                                     const LayerCache& cache, const Tensor& dy,
                                     const PassContext& ctx, Tensor* dx,
                                     absl::Span<const Tensor> grads,
                                     bool accumulate,
                                     DeferredGrads* deferred) const {
    (void)deferred;
    return Backward(device, params, cache, dy, ctx, dx, grads, accumulate);
  }

  // Floating point operations of one forward pass per sample (for planning
  // and benchmarks); backward is counted as twice this where it has weights.
  virtual double ForwardFlopsPerSample() const { return 0; }

 protected:
  Layer(int index, Shape input_shape, Shape output_shape)
      : index_(index),
        input_shape_(std::move(input_shape)),
        output_shape_(std::move(output_shape)) {}
  Layer(int index, Shape input_shape, Shape output_shape, TensorShard shard)
      : index_(index),
        input_shape_(std::move(input_shape)),
        output_shape_(std::move(output_shape)),
        shard_(shard) {}

 private:
  int index_;
  Shape input_shape_;
  Shape output_shape_;
  TensorShard shard_;
};

// Megatron's sum over the tensor-parallel group of a layer built as
// `shard` (the forward of a row-parallel map's output, the backward of a
// column-parallel map's input): nothing for a whole layer;
// FAILED_PRECONDITION naming layer `layer` when ctx has no group of the
// shard's degree.
absl::Status SumOverTensorGroup(Device& dev, const PassContext& ctx,
                                const TensorShard& shard, int layer,
                                const Tensor& t);

// Sequence parallelism (TensorShard.sequence), with the checks of
// SumOverTensorGroup: the whole [rows, C] of the members' parts
// (all-gather), this member's part of the sum of the members' `whole`
// (reduce-scatter), and this member's part of a `whole` every member holds
// (a copy, no communication). INVALID_ARGUMENT naming the layer when the
// rows do not split into `degree` equal parts.
absl::StatusOr<Tensor> GatherSequence(Device& dev, const PassContext& ctx,
                                      const TensorShard& shard, int layer,
                                      const Tensor& part);
absl::StatusOr<Tensor> ScatterSequence(Device& dev, const PassContext& ctx,
                                       const TensorShard& shard, int layer,
                                       const Tensor& whole);
absl::StatusOr<Tensor> SequencePart(Device& dev, const TensorShard& shard,
                                    int layer, const Tensor& whole);

// Fills `values` with `layer`'s shards of what `fill(i, name, whole shape,
// whole values)` writes for each whole parameter: initial values that do
// not depend on the tensor-parallel degree.
void InitShards(const Layer& layer, std::vector<std::vector<float>>* values,
                const std::function<void(int, const std::string&, const Shape&,
                                         std::vector<float>*)>& fill);

// The whole tensor's shape of a shard split as `split` over `degree`.
Shape WholeShape(const Shape& shard, const ParamSplit& split, int degree);
// Member `shard.rank`'s part of the values of a whole tensor of shape
// `whole`, and the whole tensor from every member's part (in rank order).
std::vector<float> ShardOfWhole(const std::vector<float>& whole,
                                const Shape& whole_shape,
                                const ParamSplit& split,
                                const TensorShard& shard);
std::vector<float> WholeOfShards(const std::vector<std::vector<float>>& parts,
                                 const Shape& whole_shape,
                                 const ParamSplit& split);

// Builds layer `index` of a model from its spec, given the per-sample output
// shape of the previous layer (or the data). INVALID_ARGUMENT naming the
// field ("model.layers[3].linear.in_features=512 does not match the previous
// layer's output 1024") when the spec does not fit.
// With a shard of degree > 1, the transformer's attention and blocks are
// built tensor-parallel (their heads and MLP hidden units split; the
// degree must divide both, else INVALID_ARGUMENT naming the field); other
// layers are whole on every member.
absl::StatusOr<std::unique_ptr<Layer>> CreateLayer(
    const LayerSpec& spec, int index, const Shape& input_shape, uint64_t seed,
    const TensorShard& shard = {});

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_NN_LAYER_H_
