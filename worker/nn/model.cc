#include "worker/nn/model.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "pipeline/spec.h"

namespace aqueduct {

namespace {

// The shard layer `l` of a member's model is built with: the transformer
// layers', and a vocabulary-parallel model's embedding and head; the
// others whole.
// Sequence parallelism is the blocks' only (the attention layer has no
// row-wise work of its own).
TensorShard LayerShard(const ModelSpec& spec, int l, const TensorShard& shard) {
  const LayerSpec& layer = spec.layers(l);
  TensorShard whole_rows = shard;
  whole_rows.sequence = false;
  if (layer.has_transformer_block()) return shard;
  if (layer.has_causal_self_attention()) return whole_rows;
  const bool ends = l == 0 || l == spec.layers_size() - 1;
  return ends && SplitsVocabulary(spec, shard.degree) ? whole_rows
                                                      : TensorShard{};
}

// The whole (micro)batch, [B, per_sample...], of a sequence-parallel
// layer's rows.
absl::StatusOr<Tensor> GatherRows(Device& device, const PassContext& ctx,
                                  const Layer& layer, const Tensor& part,
                                  const Shape& per_sample) {
  ASSIGN_OR_RETURN(
      const Tensor whole,
      GatherSequence(device, ctx, layer.shard(), layer.index(), part));
  std::vector<int64_t> dims = {whole.numel() / per_sample.numel()};
  for (int64_t d : per_sample.dims()) dims.push_back(d);
  return whole.Reshape(Shape(std::move(dims)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Build(const ModelSpec& spec,
                                                    const Shape& input_shape,
                                                    uint64_t seed,
                                                    const TensorShard& shard) {
  if (spec.layers().empty()) {
    return absl::InvalidArgumentError("model.layers is empty");
  }
  std::unique_ptr<Model> model(new Model());
  model->input_shape_ = input_shape;
  model->seed_ = seed;
  model->shard_ = shard;
  Shape shape = input_shape;
  model->vocabulary_parallel_ = SplitsVocabulary(spec, shard.degree);
  for (int i = 0; i < spec.layers_size(); ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<Layer> layer,
                     CreateLayer(spec.layers(i), i, shape, seed,
                                 LayerShard(spec, i, shard)));
    shape = layer->output_shape();
    model->layers_.push_back(std::move(layer));
  }
  RETURN_IF_ERROR(model->BuildTies(spec));
  return model;
}

TensorShard MemberShard(const v1::PipelineSpec& pipeline, int rank,
                        int degree) {
  TensorShard shard{rank, degree};
  shard.sequence = degree > 1 && pipeline.sequence_parallel();
  return shard;
}

absl::Status Model::BuildTies(const ModelSpec& spec) {
  tied_to_.assign(layers_.size(), -1);
  for (int l = 0; l < num_layers(); ++l) {
    if (!spec.layers(l).has_tie_weight_to()) continue;
    const int owner = spec.layers(l).tie_weight_to();
    // pipeline/shapes.h refuses bad ties naming the field; this only keeps
    // a spec that skipped those checks from indexing out of range.
    const int wl = WeightParam(*layers_[l]);
    const int wo = owner >= 0 && owner < l ? WeightParam(*layers_[owner]) : -1;
    if (wl < 0 || wo < 0 ||
        layers_[l]->Params()[wl].shape != layers_[owner]->Params()[wo].shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("model.layers[", l, "].tie_weight_to=", owner,
                       " does not name an earlier layer with a weight of the "
                       "same shape"));
    }
    tied_to_[l] = owner;
  }
  return absl::OkStatus();
}

std::vector<std::pair<int, int>> Model::ties() const {
  std::vector<std::pair<int, int>> out;
  for (int l = 0; l < num_layers(); ++l) {
    if (tied_to_[l] >= 0) out.emplace_back(tied_to_[l], l);
  }
  return out;
}

Shape LabelShape(const Model& model, int64_t rows) {
  std::vector<int64_t> dims = model.output_shape().dims();
  dims.pop_back();
  dims.insert(dims.begin(), rows);
  return Shape(std::move(dims));
}

int WeightParam(const Layer& layer) {
  const std::vector<ParamSpec> params = layer.Params();
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].name == "weight") return static_cast<int>(i);
  }
  return -1;
}

const Tensor& WeightOf(const Model& model, const ParameterSet& set, int l) {
  return set.ForLayer(l)[WeightParam(model.layer(l))];
}

namespace {

bool InRange(const ParameterSet& set, int l) {
  return l >= set.begin && l < set.end;
}

}  // namespace

void SumTiedGradients(const Model& model, Device& device,
                      const ParameterSet& grads) {
  for (const auto& [owner, tied] : model.ties()) {
    if (!InRange(grads, owner) || !InRange(grads, tied)) continue;
    const Tensor& a = WeightOf(model, grads, owner);
    const Tensor& b = WeightOf(model, grads, tied);
    device.Axpby(a.numel(), 1.0f, b.f32(), 1.0f, a.f32());
    device.Copy(a, b);
  }
}

void CopyTiedWeights(const Model& model, Device& device,
                     const ParameterSet& params) {
  for (const auto& [owner, tied] : model.ties()) {
    if (!InRange(params, owner) || !InRange(params, tied)) continue;
    device.Copy(WeightOf(model, params, owner), WeightOf(model, params, tied));
  }
}

absl::Span<const Tensor> ParameterSet::ForLayer(int l) const {
  const int i = l - begin;
  return absl::MakeConstSpan(tensors).subspan(offsets[i],
                                              offsets[i + 1] - offsets[i]);
}

int64_t ParameterSet::numel() const {
  int64_t n = 0;
  for (const Tensor& t : tensors) n += t.numel();
  return n;
}

absl::StatusOr<ParameterSet> InitParameters(const Model& model, int begin,
                                            int end, Device* device) {
  if (begin < 0 || end > model.num_layers() || begin > end) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer range [", begin, ", ", end, ") is not within the model's ",
        model.num_layers(), " layers"));
  }
  ParameterSet set;
  set.begin = begin;
  set.end = end;
  for (int l = begin; l < end; ++l) {
    set.offsets.push_back(static_cast<int>(set.tensors.size()));
    const Layer& layer = model.layer(l);
    std::vector<ParamSpec> specs = layer.Params();
    std::vector<std::vector<float>> values(specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      values[i].resize(specs[i].shape.numel());
    }
    layer.InitParams(model.seed(), &values);
    if (model.tied_to(l) >= 0) {
      // The tied copy starts as the owner's weight, wherever that lives.
      const Layer& owner = model.layer(model.tied_to(l));
      std::vector<ParamSpec> owner_specs = owner.Params();
      std::vector<std::vector<float>> owner_values(owner_specs.size());
      for (size_t i = 0; i < owner_specs.size(); ++i) {
        owner_values[i].resize(owner_specs[i].shape.numel());
      }
      owner.InitParams(model.seed(), &owner_values);
      values[WeightParam(layer)] = std::move(owner_values[WeightParam(owner)]);
    }
    for (size_t i = 0; i < specs.size(); ++i) {
      ASSIGN_OR_RETURN(Tensor t, device->Allocate(specs[i].shape, DType::kF32));
      RETURN_IF_ERROR(device->CopyFromHost(values[i].data(), t));
      set.names.push_back(absl::StrCat("layers.", l, ".", specs[i].name));
      set.tensors.push_back(std::move(t));
    }
  }
  set.offsets.push_back(static_cast<int>(set.tensors.size()));
  return set;
}

absl::StatusOr<ParameterSet> ZerosLike(const ParameterSet& like,
                                       Device* device) {
  ParameterSet set = like;
  for (Tensor& t : set.tensors) {
    ASSIGN_OR_RETURN(t, device->Zeros(t.shape(), t.dtype()));
  }
  return set;
}

absl::Status ForwardRange(const Model& model, Device& device,
                          const ParameterSet& params, const Tensor& x,
                          const PassContext& ctx, Tensor* y,
                          RangeCache* cache) {
  if (cache != nullptr) cache->layers.resize(params.end - params.begin);
  Tensor current = x;
  // Whether `current` is this member's rows (sequence parallelism): split
  // where a run of sequence-parallel layers starts, gathered where it ends.
  bool rows = false;
  for (int l = params.begin; l < params.end; ++l) {
    const Layer& layer = model.layer(l);
    if (layer.shard().sequence != rows) {
      ASSIGN_OR_RETURN(
          current, rows ? GatherRows(device, ctx, model.layer(l - 1), current,
                                     layer.input_shape())
                        : SequencePart(device, layer.shard(), l, current));
      rows = !rows;
    }
    Tensor next;
    LayerCache* layer_cache =
        cache != nullptr ? &cache->layers[l - params.begin] : nullptr;
    RETURN_IF_ERROR(layer.Forward(device, params.ForLayer(l), current, ctx,
                                  &next, layer_cache));
    current = std::move(next);
  }
  if (rows) {
    const Layer& last = model.layer(params.end - 1);
    ASSIGN_OR_RETURN(
        current, GatherRows(device, ctx, last, current, last.output_shape()));
  }
  *y = std::move(current);
  return absl::OkStatus();
}

absl::Status BackwardRange(const Model& model, Device& device,
                           const ParameterSet& params, const RangeCache& cache,
                           const Tensor& dy, const PassContext& ctx, Tensor* dx,
                           const ParameterSet& grads, bool accumulate,
                           DeferredGrads* deferred,
                           const std::function<void(int)>* on_layer_done) {
  // Layer l needs to produce its input gradient only if someone below it
  // uses it: a layer with parameters in the range, or the caller.
  std::vector<bool> want(params.end - params.begin, dx != nullptr);
  bool below_has_params = dx != nullptr;
  for (int l = params.begin; l < params.end; ++l) {
    want[l - params.begin] = below_has_params;
    if (!params.ForLayer(l).empty()) below_has_params = true;
  }
  Tensor current = dy;
  bool rows = false;  // As in ForwardRange, from the other end.
  for (int l = params.end - 1; l >= params.begin; --l) {
    const Layer& layer = model.layer(l);
    if (layer.shard().sequence != rows) {
      ASSIGN_OR_RETURN(
          current, rows ? GatherRows(device, ctx, model.layer(l + 1), current,
                                     layer.output_shape())
                        : SequencePart(device, layer.shard(), l, current));
      rows = !rows;
    }
    const bool want_dx = want[l - params.begin];
    Tensor next;
    RETURN_IF_ERROR(layer.BackwardInput(
        device, params.ForLayer(l), cache.layers[l - params.begin], current,
        ctx, want_dx ? &next : nullptr, grads.ForLayer(l), accumulate,
        deferred));
    if (on_layer_done != nullptr) (*on_layer_done)(l);
    current = std::move(next);
    if (!want_dx) return absl::OkStatus();
  }
  if (rows) {
    const Layer& first = model.layer(params.begin);
    ASSIGN_OR_RETURN(
        current, GatherRows(device, ctx, first, current, first.input_shape()));
  }
  if (dx != nullptr) *dx = std::move(current);
  return absl::OkStatus();
}

}  // namespace aqueduct
