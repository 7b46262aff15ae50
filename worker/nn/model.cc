#include "worker/nn/model.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace aqueduct {

absl::StatusOr<std::unique_ptr<Model>> Model::Build(const ModelSpec& spec,
                                                    const Shape& input_shape,
                                                    uint64_t seed) {
  if (spec.layers().empty()) {
    return absl::InvalidArgumentError("model.layers is empty");
  }
  std::unique_ptr<Model> model(new Model());
  model->input_shape_ = input_shape;
  model->seed_ = seed;
  Shape shape = input_shape;
  for (int i = 0; i < spec.layers_size(); ++i) {
    ASSIGN_OR_RETURN(std::unique_ptr<Layer> layer,
                     CreateLayer(spec.layers(i), i, shape, seed));
    shape = layer->output_shape();
    model->layers_.push_back(std::move(layer));
  }
  return model;
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
  for (int l = params.begin; l < params.end; ++l) {
    Tensor next;
    LayerCache* layer_cache =
        cache != nullptr ? &cache->layers[l - params.begin] : nullptr;
    RETURN_IF_ERROR(model.layer(l).Forward(device, params.ForLayer(l), current,
                                           ctx, &next, layer_cache));
    current = std::move(next);
  }
  *y = std::move(current);
  return absl::OkStatus();
}

absl::Status BackwardRange(const Model& model, Device& device,
                           const ParameterSet& params, const RangeCache& cache,
                           const Tensor& dy, const PassContext& ctx, Tensor* dx,
                           const ParameterSet& grads, bool accumulate) {
  // Layer l needs to produce its input gradient only if someone below it
  // uses it: a layer with parameters in the range, or the caller.
  std::vector<bool> want(params.end - params.begin, dx != nullptr);
  bool below_has_params = dx != nullptr;
  for (int l = params.begin; l < params.end; ++l) {
    want[l - params.begin] = below_has_params;
    if (!params.ForLayer(l).empty()) below_has_params = true;
  }
  Tensor current = dy;
  for (int l = params.end - 1; l >= params.begin; --l) {
    const bool want_dx = want[l - params.begin];
    Tensor next;
    RETURN_IF_ERROR(model.layer(l).Backward(
        device, params.ForLayer(l), cache.layers[l - params.begin], current,
        ctx, want_dx ? &next : nullptr, grads.ForLayer(l), accumulate));
    current = std::move(next);
    if (!want_dx) break;
  }
  if (dx != nullptr) *dx = std::move(current);
  return absl::OkStatus();
}

}  // namespace aqueduct
