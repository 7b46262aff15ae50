// Models and their parameters.
//
// A Model is the chain of layers a ModelSpec describes, with shapes inferred
// from the data's sample shape. A ParameterSet holds one tensor per learnable
// parameter of a run of layers (a whole model, or one pipeline stage), and is
// also used for gradients and optimizer state. Sequential forward/backward
// over a layer range lives here too: it is what a stage executes.
//
// Thread-safety: Model is immutable after Build() and thread-safe.
// ParameterSet is a plain value (not thread-safe).
#ifndef AQUEDUCT_WORKER_NN_MODEL_H_
#define AQUEDUCT_WORKER_NN_MODEL_H_

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/device/device.h"
#include "proto/types.h"
#include "worker/nn/layer.h"

namespace aqueduct {

class Model {
 public:
  // Builds the layers of `spec` for samples of `input_shape`. Validates every
  // layer; INVALID_ARGUMENT naming the field on a problem.
  // With `shard` (degree > 1), this member's part of a tensor-parallel
  // model (CreateLayer).
  static absl::StatusOr<std::unique_ptr<Model>> Build(
      const ModelSpec& spec, const Shape& input_shape, uint64_t seed,
      const TensorShard& shard = {});

  int num_layers() const { return static_cast<int>(layers_.size()); }
  const Layer& layer(int i) const { return *layers_[i]; }
  const Shape& input_shape() const { return input_shape_; }
  const Shape& output_shape() const {
    return layers_.empty() ? input_shape_ : layers_.back()->output_shape();
  }
  uint64_t seed() const { return seed_; }
  const TensorShard& shard() const { return shard_; }
  // A member's model whose embedding and head split the vocabulary: its
  // logits are its share of the vocabulary (VocabParallelCrossEntropy).
  bool vocabulary_parallel() const { return vocabulary_parallel_; }
  // Weight tying (LayerSpec.tie_weight_to): the layer whose "weight" layer
  // `l` shares, or -1. Both hold a copy; see SumTiedGradients.
  int tied_to(int l) const { return tied_to_[l]; }
  // (owner, tied) pairs, in layer order.
  std::vector<std::pair<int, int>> ties() const;

 private:
  Model() = default;
  absl::Status BuildTies(const ModelSpec& spec);
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<int> tied_to_;
  Shape input_shape_;
  uint64_t seed_ = 0;
  TensorShard shard_;
  bool vocabulary_parallel_ = false;
};

// The shard member `rank` of a tensor group of `degree` builds its model
// with (Model::Build): sequence-parallel when `pipeline` asks for it and
// the degree is above 1.
TensorShard MemberShard(const v1::PipelineSpec& pipeline, int rank, int degree);

// One tensor per parameter of layers [begin, end) of a model, in layer order.
struct ParameterSet {
  int begin = 0;
  int end = 0;
  // Full names, "layers.<i>.<param>", as in safetensors files.
  std::vector<std::string> names;
  std::vector<Tensor> tensors;
  // tensors[offsets[l - begin] .. offsets[l - begin + 1]) belong to layer l.
  std::vector<int> offsets;

  // The tensors of layer `l` (begin <= l < end).
  absl::Span<const Tensor> ForLayer(int l) const;
  int64_t numel() const;
  size_t size() const { return tensors.size(); }
};

// Allocates parameters for layers [begin, end) of `model` on `device` and
// fills them with the seeded initialisation (the model's seed).
absl::StatusOr<ParameterSet> InitParameters(const Model& model, int begin,
                                            int end, Device* device);

// The labels of `rows` samples for `model`'s logits: [rows] for logits
// [classes] per sample, [rows, T] for logits [T, vocabulary].
Shape LabelShape(const Model& model, int64_t rows);

// The index, among layer.Params(), of its "weight" (-1: none).
int WeightParam(const Layer& layer);

// The tensor of layer `l`'s "weight" in `set` (l within the set's range).
const Tensor& WeightOf(const Model& model, const ParameterSet& set, int l);

// For every tie whose two layers both lie in `grads`' range: both
// gradients become their sum (owner + tied, the same bits in either order),
// so both copies take the same optimizer step. A tie split across pipeline
// stages is summed by the stages (worker/runtime/pipeline_stage.h).
void SumTiedGradients(const Model& model, Device& device,
                      const ParameterSet& grads);

// For every tie within `params`' range: the tied copy takes the owner's
// values (after loading a weights file that may hold either).
void CopyTiedWeights(const Model& model, Device& device,
                     const ParameterSet& params);

// A set of the same names and shapes as `like`, zero-filled.
absl::StatusOr<ParameterSet> ZerosLike(const ParameterSet& like,
                                       Device* device);

// The saved tensors of one minibatch's forward through a layer range.
struct RangeCache {
  std::vector<LayerCache> layers;
};

// Forward through layers [params.begin, params.end) of `model`. `cache` may
// be null when !ctx.training. The range's input and output are whole
// tensors; a run of sequence-parallel layers (TensorShard.sequence) gets
// this member's rows of its input and has its output gathered.
absl::Status ForwardRange(const Model& model, Device& device,
                          const ParameterSet& params, const Tensor& x,
                          const PassContext& ctx, Tensor* y, RangeCache* cache);

// Backward through the same range: gradients into `grads` (written, or added
// to when `accumulate`); dx (if not null) receives the gradient of the
// range's input. `params` must be the version the forward used. With
// `deferred`, the split backward's input half (Layer::BackwardInput): the
// linear maps' weight gradients are left in it for RunDeferredGrads.
// `on_layer_done`, when set, is called with l after layer l's backward
// (its gradients written; data parallelism's buckets start from there).
absl::Status BackwardRange(
    const Model& model, Device& device, const ParameterSet& params,
    const RangeCache& cache, const Tensor& dy, const PassContext& ctx,
    Tensor* dx, const ParameterSet& grads, bool accumulate,
    DeferredGrads* deferred = nullptr,
    const std::function<void(int)>* on_layer_done = nullptr);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_NN_MODEL_H_
