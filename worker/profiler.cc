#include "worker/profiler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "pipeline/limits.h"
#include "pipeline/memory.h"
#include "pipeline/spec.h"
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

// Milliseconds from `start` to now.
double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start)
      .count();
}

// ProfilerOptions::slowdown's pause: (slowdown - 1) times the time from
// `start` to now, so that the pass measured from `start` takes `slowdown`
// times as long.
void SlowDown(double slowdown, Clock::time_point start) {
  if (!(slowdown > 1)) return;
  const std::chrono::duration<double> elapsed = Clock::now() - start;
  std::this_thread::sleep_for(elapsed * (slowdown - 1));
}

// The seconds of `iterations` n x n x n GEMMs after one unmeasured warm-up,
// each slowed by `slowdown`.
absl::StatusOr<std::vector<double>> TimeGemms(Device* device, int n,
                                              int iterations, double slowdown) {
  if (n <= 0 || iterations <= 0) {
    return absl::InvalidArgumentError("GEMM size and iterations must be > 0");
  }
  RETURN_IF_ERROR(CheckSlowdown(slowdown));
  ASSIGN_OR_RETURN(Tensor a, RandomTensor(device, Shape({n, n}), 1));
  ASSIGN_OR_RETURN(Tensor b, RandomTensor(device, Shape({n, n}), 2));
  ASSIGN_OR_RETURN(Tensor c, device->Allocate(Shape({n, n}), DType::kF32));
  std::vector<double> seconds;
  for (int it = -1; it < iterations; ++it) {  // One unmeasured warm-up.
    const Clock::time_point start = Clock::now();
    device->Gemm(false, false, n, n, n, 1.0f, a.f32(), n, b.f32(), n, 0.0f,
                 c.f32(), n);
    RETURN_IF_ERROR(device->Synchronize());
    SlowDown(slowdown, start);
    if (it >= 0) {
      seconds.push_back(
          std::chrono::duration<double>(Clock::now() - start).count());
    }
  }
  return seconds;
}

double GemmGflops(int n, double seconds) {
  return 2.0 * n * n * static_cast<double>(n) / seconds / 1e9;
}

// Each layer's weight update on its own, with the job's optimizer.
struct LayerUpdate {
  ParameterSet params, grads;
  std::unique_ptr<Optimizer> optimizer;
};

// One LayerUpdate per layer; left empty for layers without parameters.
absl::StatusOr<std::vector<LayerUpdate>> CreateLayerUpdates(
    const JobSpec& spec, const Model& model, const ParameterSet& params,
    Device* device) {
  std::vector<LayerUpdate> updates(model.num_layers());
  for (int l = 0; l < model.num_layers(); ++l) {
    if (params.ForLayer(l).empty()) continue;
    ASSIGN_OR_RETURN(updates[l].params,
                     InitParameters(model, l, l + 1, device));
    ASSIGN_OR_RETURN(updates[l].grads, ZerosLike(updates[l].params, device));
    ASSIGN_OR_RETURN(
        updates[l].optimizer,
        CreateOptimizer(spec.optimizer(), updates[l].params, device,
                        /*total_steps=*/1 << 20, &spec.model()));
  }
  return updates;
}

// Runs a model's layers one at a time, synchronising the device around each
// pass, and keeps every layer's forward, backward and update times (ms) of
// the measured iterations.
class LayerTimer {
 public:
  LayerTimer(const Model& model, Device* device, const ParameterSet& params,
             const ParameterSet& grads, std::vector<LayerUpdate>* updates,
             double slowdown)
      : model_(model),
        device_(device),
        slowdown_(slowdown),
        params_(params),
        grads_(grads),
        updates_(updates),
        needs_dx_(model.num_layers(), false),
        forward_(model.num_layers()),
        backward_(model.num_layers()),
        update_(model.num_layers()),
        saved_(model.num_layers(), 0) {
    // As in training (BackwardRange), a layer computes its input gradient
    // only if a layer with parameters lies below it.
    for (int l = 1; l < model.num_layers(); ++l) {
      needs_dx_[l] = needs_dx_[l - 1] || !params.ForLayer(l - 1).empty();
    }
  }

  // One training iteration: forward from a copy of `input`, backward from
  // a copy of `output_grad`, then every layer's update.
  absl::Status Iterate(const PassContext& ctx, const Tensor& input,
                       const Tensor& output_grad, bool measure) {
    std::vector<LayerCache> caches(model_.num_layers());
    RETURN_IF_ERROR(Forward(ctx, input, measure, &caches));
    RETURN_IF_ERROR(Backward(ctx, output_grad, measure, caches));
    return Updates(measure);
  }

  double ForwardMs(int l) const { return Median(forward_[l]); }
  double BackwardMs(int l) const { return Median(backward_[l]); }
  double UpdateMs(int l) const { return Median(update_[l]); }
  // Bytes layer l's forward kept for its backward (the last iteration).
  double SavedBytes(int l) const { return saved_[l]; }

 private:
  // Every layer's forward pass, filling `caches`.
  absl::Status Forward(const PassContext& ctx, const Tensor& input,
                       bool measure, std::vector<LayerCache>* caches) {
    // A fresh input: in-place layers write into theirs.
    ASSIGN_OR_RETURN(Tensor x, device_->Allocate(input.shape(), DType::kF32));
    device_->Copy(input, x);
    for (int l = 0; l < model_.num_layers(); ++l) {
      Tensor y;
      RETURN_IF_ERROR(device_->Synchronize());
      const Clock::time_point start = Clock::now();
      RETURN_IF_ERROR(model_.layer(l).Forward(*device_, params_.ForLayer(l), x,
                                              ctx, &y, &(*caches)[l]));
      RETURN_IF_ERROR(device_->Synchronize());
      SlowDown(slowdown_, start);
      if (measure) forward_[l].push_back(MsSince(start));
      saved_[l] = 0;
      for (const Tensor& t : (*caches)[l].tensors) {
        if (t.defined()) saved_[l] += static_cast<double>(t.nbytes());
      }
      x = std::move(y);
    }
    return absl::OkStatus();
  }

  // The backward passes, from the top layer down to the lowest one that
  // needs its input gradient.
  absl::Status Backward(const PassContext& ctx, const Tensor& output_grad,
                        bool measure, const std::vector<LayerCache>& caches) {
    ASSIGN_OR_RETURN(Tensor dy,
                     device_->Allocate(output_grad.shape(), DType::kF32));
    device_->Copy(output_grad, dy);
    for (int l = model_.num_layers() - 1; l >= 0; --l) {
      Tensor dx;
      const Clock::time_point start = Clock::now();
      RETURN_IF_ERROR(model_.layer(l).Backward(
          *device_, params_.ForLayer(l), caches[l], dy, ctx,
          needs_dx_[l] ? &dx : nullptr, grads_.ForLayer(l), false));
      RETURN_IF_ERROR(device_->Synchronize());
      SlowDown(slowdown_, start);
      if (measure) backward_[l].push_back(MsSince(start));
      if (!needs_dx_[l]) break;  // Nothing below needs a gradient.
      dy = std::move(dx);
    }
    return absl::OkStatus();
  }

  // Each layer's weight update, for layers with parameters.
  absl::Status Updates(bool measure) {
    for (int l = 0; l < model_.num_layers(); ++l) {
      LayerUpdate& u = (*updates_)[l];
      if (u.optimizer == nullptr) continue;
      RETURN_IF_ERROR(device_->Synchronize());
      const Clock::time_point start = Clock::now();
      RETURN_IF_ERROR(u.optimizer->Step(u.params, u.grads));
      RETURN_IF_ERROR(device_->Synchronize());
      SlowDown(slowdown_, start);
      if (measure) update_[l].push_back(MsSince(start));
    }
    return absl::OkStatus();
  }

  const Model& model_;
  Device* device_;
  const double slowdown_;
  const ParameterSet& params_;
  const ParameterSet& grads_;
  std::vector<LayerUpdate>* updates_;
  std::vector<bool> needs_dx_;
  std::vector<std::vector<double>> forward_, backward_, update_;
  std::vector<double> saved_;
};

// Adds layer l's node (its median times and its sizes) to the profile, and
// the edge from the layer before it.
void AddLayerNode(const JobSpec& spec, const Model& model,
                  const LayerTimer& timer, int l, int64_t batch,
                  ModelProfile* profile) {
  const Layer& layer = model.layer(l);
  LayerProfile* node = profile->add_nodes();
  node->set_id(absl::StrCat("layer", l));
  const std::string& name = spec.model().layers(l).name();
  node->set_description(absl::StrCat(
      name.empty() ? "" : name + " ", layer.kind(), " ",
      layer.input_shape().ToString(), "->", layer.output_shape().ToString()));
  node->set_forward_ms(timer.ForwardMs(l));
  node->set_backward_ms(timer.BackwardMs(l));
  node->set_optimizer_ms(timer.UpdateMs(l));
  node->set_activation_bytes(static_cast<double>(
      layer.output_shape().numel() * batch * DTypeSize(DType::kF32)));
  double param_bytes = 0;
  for (const ParamSpec& p : layer.Params()) {
    param_bytes += static_cast<double>(p.shape.numel()) * 4;
  }
  node->set_parameter_bytes(param_bytes);
  node->set_saved_bytes(timer.SavedBytes(l));
  node->set_layer_index(l);
  if (l > 0) {
    ProfileEdge* edge = profile->add_edges();
    edge->set_from(absl::StrCat("layer", l - 1));
    edge->set_to(absl::StrCat("layer", l));
  }
}

// Profiling holds every layer at once at the job's batch size: the
// parameters and their gradients, each layer's own copy of both for its
// update with the optimizer's state (CreateLayerUpdates), and every
// layer's saved tensors. Checked before any of it is allocated, so that a
// layer too large for this worker is an error that names it, not a
// std::bad_alloc thrown through the RPC.
absl::Status CheckProfileFits(const JobSpec& spec, const ValidatedJob& job,
                              const ProfilerOptions& options) {
  StageNeeds needs;
  needs.what = "profiling the whole model";
  needs.layer_end = job.model->num_layers();
  needs.samples = spec.batch_size();
  needs.copies = 2 + TrainingCopies(spec.optimizer());
  const MemoryLimit memory{
      options.memory_bytes > 0 ? options.memory_bytes : HostMemoryBytes(),
      "this worker's memory"};
  const absl::Status fits =
      CheckStageMemory(spec, SymbolicShape::Known(job.data.sample_shape.dims()),
                       needs, memory, absl::StatusCode::kResourceExhausted);
  if (fits.ok() || fits.code() != absl::StatusCode::kResourceExhausted) {
    return fits;
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      fits.message(),
      " (profile on a larger worker and submit the job with the profile: aq "
      "profile, then aq submit --profile)"));
}

// Each recomputation mode's backward time and saved bytes for the
// transformer layers, from iterations run in that mode.
absl::Status MeasureRecomputation(
    const Model& model, Device* device, const ParameterSet& params,
    const ParameterSet& grads, std::vector<LayerUpdate>* updates,
    const Tensor& input, const Tensor& output_grad,
    const ProfilerOptions& options, ModelProfile* profile) {
  for (Recompute mode : {Recompute::kSelective, Recompute::kFull}) {
    LayerTimer timer(model, device, params, grads, updates, options.slowdown);
    const int total = 1 + options.measured_iterations;
    for (int it = 0; it < total; ++it) {
      PassContext ctx;
      ctx.minibatch = static_cast<uint64_t>(it);
      ctx.recompute = mode;
      RETURN_IF_ERROR(timer.Iterate(ctx, input, output_grad, it >= 1));
    }
    for (int l = 0; l < model.num_layers(); ++l) {
      const std::string kind = model.layer(l).kind();
      if (kind != "transformer_block" && kind != "causal_self_attention" &&
          kind != "llama_block") {
        continue;
      }
      v1::RecomputeCost* cost =
          profile->mutable_nodes(l)->add_recompute_costs();
      cost->set_mode(RecomputeName(mode));
      cost->set_backward_ms(timer.BackwardMs(l));
      cost->set_saved_bytes(timer.SavedBytes(l));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckSlowdown(double slowdown) {
  if (std::isfinite(slowdown) && slowdown >= 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "must be a number >= 1 (F: every computation takes F times as long; "
      "1: full speed), got ",
      slowdown));
}

absl::StatusOr<double> MeasureGemmGflops(Device* device, int n, int iterations,
                                         double slowdown) {
  ASSIGN_OR_RETURN(std::vector<double> seconds,
                   TimeGemms(device, n, iterations, slowdown));
  return GemmGflops(n, Median(std::move(seconds)));
}

absl::StatusOr<double> MeasureSpeedProbe(Device* device, int n, int iterations,
                                         double slowdown) {
  ASSIGN_OR_RETURN(std::vector<double> seconds,
                   TimeGemms(device, n, iterations, slowdown));
  return GemmGflops(n, *std::min_element(seconds.begin(), seconds.end()));
}

absl::StatusOr<ModelProfile> ProfileModel(const JobSpec& spec, Device* device,
                                          const ProfilerOptions& options) {
  if (options.warmup_iterations < 0 || options.measured_iterations < 1) {
    return absl::InvalidArgumentError(
        "the profiler needs warmup >= 0 and at least 1 measured iteration");
  }
  if (absl::Status s = CheckSlowdown(options.slowdown); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the profiler's slowdown ", s.message()));
  }
  ASSIGN_OR_RETURN(ValidatedJob job, ValidateJobSpec(spec, options.files));
  RETURN_IF_ERROR(CheckProfileFits(spec, job, options));
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
  ASSIGN_OR_RETURN(std::vector<LayerUpdate> updates,
                   CreateLayerUpdates(spec, model, params, device));
  LayerTimer timer(model, device, params, grads, &updates, options.slowdown);
  const int total = options.warmup_iterations + options.measured_iterations;
  for (int it = 0; it < total; ++it) {
    PassContext ctx;
    ctx.minibatch = static_cast<uint64_t>(it);
    RETURN_IF_ERROR(timer.Iterate(ctx, input_template, output_grad,
                                  /*measure=*/it >= options.warmup_iterations));
  }

  ModelProfile profile;
  profile.set_batch_size(batch);
  profile.set_device(device->name());
  if (options.measure_gemm) {
    ASSIGN_OR_RETURN(double gflops,
                     MeasureGemmGflops(device, 1024, 3, options.slowdown));
    profile.set_gemm_gflops(gflops);
  }
  for (int l = 0; l < layers; ++l) {
    AddLayerNode(spec, model, timer, l, batch, &profile);
  }
  if (HasTransformerLayers(spec.model())) {
    RETURN_IF_ERROR(MeasureRecomputation(model, device, params, grads, &updates,
                                         input_template, output_grad, options,
                                         &profile));
  }
  return profile;
}

}  // namespace aqueduct
