#include "worker/profiler.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/nn/model.h"
#include "worker/nn/optimizer.h"
#include "worker/nn/spec.h"

namespace aqueduct {

namespace {

using Clock = std::chrono::steady_clock;

// The median; 0 for no samples (a backward that training never runs).
double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

absl::StatusOr<Tensor> RandomTensor(Device* device, const Shape& shape,
                                    uint64_t key) {
  std::vector<float> host(shape.numel());
  for (size_t i = 0; i < host.size(); ++i) {
    host[i] = DropoutUniform(key, i) * 2 - 1;
  }
  ASSIGN_OR_RETURN(Tensor t, device->Allocate(shape, DType::kF32));
  RETURN_IF_ERROR(device->CopyFromHost(host.data(), t));
  return t;
}

}  // namespace

absl::StatusOr<double> MeasureGemmGflops(Device* device, int n,
                                         int iterations) {
  if (n <= 0 || iterations <= 0) {
    return absl::InvalidArgumentError("GEMM size and iterations must be > 0");
  }
  ASSIGN_OR_RETURN(Tensor a, RandomTensor(device, Shape({n, n}), 1));
  ASSIGN_OR_RETURN(Tensor b, RandomTensor(device, Shape({n, n}), 2));
  ASSIGN_OR_RETURN(Tensor c, device->Allocate(Shape({n, n}), DType::kF32));
  std::vector<double> seconds;
  for (int it = -1; it < iterations; ++it) {  // One unmeasured warm-up.
    const Clock::time_point start = Clock::now();
    device->Gemm(false, false, n, n, n, 1.0f, a.f32(), n, b.f32(), n, 0.0f,
                 c.f32(), n);
    RETURN_IF_ERROR(device->Synchronize());
    if (it >= 0) {
      seconds.push_back(
          std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
  return 2.0 * n * n * static_cast<double>(n) / Median(seconds) / 1e9;
}

absl::StatusOr<ModelProfile> ProfileModel(const JobSpec& spec, Device* device,
                                          const ProfilerOptions& options) {
  if (options.warmup_iterations < 0 || options.measured_iterations < 1) {
    return absl::InvalidArgumentError(
        "the profiler needs warmup >= 0 and at least 1 measured iteration");
  }
  ASSIGN_OR_RETURN(ValidatedJob job, ValidateJobSpec(spec));
  const Model& model = *job.model;
  const int layers = model.num_layers();
  const int64_t batch = spec.batch_size();
  ASSIGN_OR_RETURN(ParameterSet params,
                   InitParameters(model, 0, layers, device));
  ASSIGN_OR_RETURN(ParameterSet grads, ZerosLike(params, device));
  const Tensor input_template =
      *RandomTensor(device, model.input_shape().WithLeading(batch), 3);
  ASSIGN_OR_RETURN(
      Tensor output_grad,
      RandomTensor(device, model.output_shape().WithLeading(batch), 4));

  std::vector<std::vector<double>> forward(layers), backward(layers),
      update(layers);
  // Each layer's weight update on its own, with the job's optimizer.
  struct LayerUpdate {
    ParameterSet params, grads;
    std::unique_ptr<Optimizer> optimizer;
  };
  std::vector<LayerUpdate> updates(layers);
  for (int l = 0; l < layers; ++l) {
    if (params.ForLayer(l).empty()) continue;
    ASSIGN_OR_RETURN(updates[l].params,
                     InitParameters(model, l, l + 1, device));
    ASSIGN_OR_RETURN(updates[l].grads, ZerosLike(updates[l].params, device));
    ASSIGN_OR_RETURN(updates[l].optimizer,
                     CreateOptimizer(spec.optimizer(), updates[l].params,
                                     device, /*total_steps=*/1 << 20));
  }
  std::vector<bool> needs_dx(layers, false);
  for (int l = 1; l < layers; ++l) {
    needs_dx[l] = needs_dx[l - 1] || !params.ForLayer(l - 1).empty();
  }
  const int total = options.warmup_iterations + options.measured_iterations;
  for (int it = 0; it < total; ++it) {
    const bool measure = it >= options.warmup_iterations;
    PassContext ctx;
    ctx.minibatch = static_cast<uint64_t>(it);
    // A fresh input: in-place layers write into theirs.
    ASSIGN_OR_RETURN(Tensor x,
                     device->Allocate(input_template.shape(), DType::kF32));
    device->Copy(input_template, x);
    std::vector<LayerCache> caches(layers);
    for (int l = 0; l < layers; ++l) {
      Tensor y;
      RETURN_IF_ERROR(device->Synchronize());
      const Clock::time_point start = Clock::now();
      RETURN_IF_ERROR(model.layer(l).Forward(*device, params.ForLayer(l), x,
                                             ctx, &y, &caches[l]));
      RETURN_IF_ERROR(device->Synchronize());
      if (measure) {
        forward[l].push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - start)
                .count());
      }
      x = std::move(y);
    }
    ASSIGN_OR_RETURN(Tensor dy,
                     device->Allocate(output_grad.shape(), DType::kF32));
    device->Copy(output_grad, dy);
    for (int l = layers - 1; l >= 0; --l) {
      Tensor dx;
      const Clock::time_point start = Clock::now();
      // As in training (BackwardRange), a layer computes its input gradient
      // only if a layer with parameters lies below it.
      RETURN_IF_ERROR(model.layer(l).Backward(
          *device, params.ForLayer(l), caches[l], dy, ctx,
          needs_dx[l] ? &dx : nullptr, grads.ForLayer(l), false));
      RETURN_IF_ERROR(device->Synchronize());
      if (measure) {
        backward[l].push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - start)
                .count());
      }
      if (!needs_dx[l]) break;  // Nothing below needs a gradient.
      dy = std::move(dx);
    }
    for (int l = 0; l < layers; ++l) {
      if (updates[l].optimizer == nullptr) continue;
      RETURN_IF_ERROR(device->Synchronize());
      const Clock::time_point start = Clock::now();
      RETURN_IF_ERROR(
          updates[l].optimizer->Step(updates[l].params, updates[l].grads));
      RETURN_IF_ERROR(device->Synchronize());
      if (measure) {
        update[l].push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - start)
                .count());
      }
    }
  }

  ModelProfile profile;
  profile.set_batch_size(batch);
  profile.set_device(device->name());
  if (options.measure_gemm) {
    ASSIGN_OR_RETURN(double gflops, MeasureGemmGflops(device, 1024, 3));
    profile.set_gemm_gflops(gflops);
  }
  for (int l = 0; l < layers; ++l) {
    const Layer& layer = model.layer(l);
    LayerProfile* node = profile.add_nodes();
    node->set_id(absl::StrCat("layer", l));
    const std::string& name = spec.model().layers(l).name();
    node->set_description(absl::StrCat(
        name.empty() ? "" : name + " ", layer.kind(), " ",
        layer.input_shape().ToString(), "->", layer.output_shape().ToString()));
    node->set_forward_ms(Median(forward[l]));
    node->set_backward_ms(Median(backward[l]));
    node->set_optimizer_ms(Median(update[l]));
    node->set_activation_bytes(static_cast<double>(
        layer.output_shape().numel() * batch * DTypeSize(DType::kF32)));
    double param_bytes = 0;
    for (const ParamSpec& p : layer.Params()) {
      param_bytes += static_cast<double>(p.shape.numel()) * 4;
    }
    node->set_parameter_bytes(param_bytes);
    node->set_layer_index(l);
    if (l > 0) {
      ProfileEdge* edge = profile.add_edges();
      edge->set_from(absl::StrCat("layer", l - 1));
      edge->set_to(absl::StrCat("layer", l));
    }
  }
  return profile;
}

}  // namespace aqueduct
