#include "worker/nn/clipping.h"

#include <cmath>
#include <vector>

#include "common/status.h"

namespace aqueduct {

absl::StatusOr<double> GradSquares(const Model& model, Device& device,
                                   const ParameterSet& grads, bool whole_too) {
  double sum = 0;
  std::vector<float> host;
  for (int l = grads.begin; l < grads.end; ++l) {
    const Layer& layer = model.layer(l);
    const int weight = WeightParam(layer);
    const absl::Span<const Tensor> tensors = grads.ForLayer(l);
    for (size_t p = 0; p < tensors.size(); ++p) {
      const int param = static_cast<int>(p);
      if (model.tied_to(l) >= 0 && param == weight) continue;
      if (!whole_too && layer.SplitOf(param).dim < 0) continue;
      host.resize(static_cast<size_t>(tensors[p].numel()));
      RETURN_IF_ERROR(device.CopyToHost(tensors[p], host.data()));
      for (float g : host) sum += static_cast<double>(g) * g;
    }
  }
  return sum;
}

float ClipFactor(double squares, float max_norm) {
  const float norm = static_cast<float>(std::sqrt(squares));
  const float factor = max_norm / (norm + 1e-6f);
  return factor < 1.0f ? factor : 1.0f;
}

void ScaleGradients(Device& device, const ParameterSet& grads, float factor) {
  if (factor == 1.0f) return;
  for (const Tensor& g : grads.tensors) {
    device.Axpby(g.numel(), factor, g.f32(), 0.0f, g.f32());
  }
}

}  // namespace aqueduct
