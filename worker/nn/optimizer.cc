#include "worker/nn/optimizer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "pipeline/spec.h"

namespace aqueduct {

namespace {

// The hyper-parameters a parameter group overrides, per tensor.
struct TensorGroup {
  float weight_decay;
  double lr_scale;
};

// What both optimizers share: the schedule, the step count and each
// tensor's group.
class ScheduledOptimizer : public Optimizer {
 public:
  ScheduledOptimizer(const LrSchedule& schedule, int64_t total_steps,
                     std::vector<TensorGroup> groups)
      : groups_(std::move(groups)),
        schedule_(schedule),
        total_steps_(total_steps) {}
  int64_t steps() const override { return steps_; }
  void SetSteps(int64_t steps) override { steps_ = steps; }
  void SetLearningRateScale(double scale) override { lr_scale_ = scale; }

 protected:
  // Tensor i's learning rate at this step.
  float ScaledLr(float lr, size_t i) const {
    const double base = static_cast<double>(lr) * groups_[i].lr_scale;
    return static_cast<float>(
        base * LearningRateFactor(schedule_, steps_, total_steps_) * lr_scale_);
  }
  float WeightDecay(size_t i) const { return groups_[i].weight_decay; }
  int64_t steps_ = 0;

 private:
  std::vector<TensorGroup> groups_;
  LrSchedule schedule_;
  int64_t total_steps_;
  double lr_scale_ = 1.0;
};

class Sgd final : public ScheduledOptimizer {
 public:
  Sgd(const SgdSpec& spec, const LrSchedule& schedule, int64_t total_steps,
      std::vector<TensorGroup> groups, Device* device)
      : ScheduledOptimizer(schedule, total_steps, std::move(groups)),
        spec_(spec),
        device_(device) {}

  absl::Status Init(const ParameterSet& params) {
    if (spec_.momentum() != 0) {
      ASSIGN_OR_RETURN(ParameterSet buf, ZerosLike(params, device_));
      momentum_ = std::move(buf);
    }
    return absl::OkStatus();
  }

  absl::Status StepFrom(const ParameterSet& from, const ParameterSet& params,
                        const ParameterSet& grads) override {
    SgdParams p;
    p.momentum = spec_.momentum();
    p.dampening = spec_.dampening();
    p.nesterov = spec_.nesterov();
    p.first_step = steps_ == 0;
    for (size_t i = 0; i < params.size(); ++i) {
      p.lr = ScaledLr(spec_.lr(), i);
      p.weight_decay = WeightDecay(i);
      float* buf = spec_.momentum() != 0 ? momentum_.tensors[i].f32() : nullptr;
      p.source = from.tensors[i].f32();
      device_->SgdStep(params.tensors[i].f32(), grads.tensors[i].f32(), buf,
                       params.tensors[i].numel(), p);
    }
    ++steps_;
    return absl::OkStatus();
  }

  std::vector<std::pair<std::string, Tensor>> State() const override {
    std::vector<std::pair<std::string, Tensor>> state;
    for (size_t i = 0; i < momentum_.size(); ++i) {
      state.emplace_back(momentum_.names[i] + ".momentum_buffer",
                         momentum_.tensors[i]);
    }
    return state;
  }

 private:
  SgdSpec spec_;
  Device* device_;
  ParameterSet momentum_;
};

class Adam final : public ScheduledOptimizer {
 public:
  Adam(const AdamSpec& spec, bool decoupled, const LrSchedule& schedule,
       int64_t total_steps, std::vector<TensorGroup> groups, Device* device)
      : ScheduledOptimizer(schedule, total_steps, std::move(groups)),
        spec_(spec),
        decoupled_(decoupled),
        device_(device) {}

  absl::Status Init(const ParameterSet& params) {
    ASSIGN_OR_RETURN(m_, ZerosLike(params, device_));
    ASSIGN_OR_RETURN(v_, ZerosLike(params, device_));
    return absl::OkStatus();
  }

  absl::Status StepFrom(const ParameterSet& from, const ParameterSet& params,
                        const ParameterSet& grads) override {
    AdamParams p;
    if (spec_.has_beta1()) p.beta1 = spec_.beta1();
    if (spec_.has_beta2()) p.beta2 = spec_.beta2();
    if (spec_.has_eps()) p.eps = spec_.eps();
    p.decoupled = decoupled_;
    p.step = steps_ + 1;
    for (size_t i = 0; i < params.size(); ++i) {
      p.lr = ScaledLr(spec_.lr(), i);
      p.weight_decay = WeightDecay(i);
      p.source = from.tensors[i].f32();
      device_->AdamStep(params.tensors[i].f32(), grads.tensors[i].f32(),
                        m_.tensors[i].f32(), v_.tensors[i].f32(),
                        params.tensors[i].numel(), p);
    }
    ++steps_;
    return absl::OkStatus();
  }

  std::vector<std::pair<std::string, Tensor>> State() const override {
    std::vector<std::pair<std::string, Tensor>> state;
    for (size_t i = 0; i < m_.size(); ++i) {
      state.emplace_back(m_.names[i] + ".exp_avg", m_.tensors[i]);
      state.emplace_back(v_.names[i] + ".exp_avg_sq", v_.tensors[i]);
    }
    return state;
  }

 private:
  AdamSpec spec_;
  bool decoupled_;
  Device* device_;
  ParameterSet m_, v_;
};

}  // namespace

double LearningRateFactor(const LrSchedule& s, int64_t step,
                          int64_t total_steps) {
  const int64_t warmup = s.warmup_steps();
  if (step < warmup) return static_cast<double>(step + 1) / warmup;
  const int64_t t = step - warmup;
  const int64_t span = std::max<int64_t>(1, total_steps - warmup);
  if (s.has_cosine()) {
    const double progress =
        std::min(1.0, static_cast<double>(t) / std::max<int64_t>(1, span - 1));
    const double f = s.cosine().final_fraction();
    return f + (1 - f) * 0.5 * (1 + std::cos(M_PI * progress));
  }
  if (s.has_step()) {
    return std::pow(static_cast<double>(s.step().gamma()),
                    static_cast<double>(t / s.step().every_steps()));
  }
  return 1.0;
}

std::string ParamKindOf(const ModelSpec& model, const std::string& name) {
  // "layers.<i>.<param>"
  const std::vector<std::string> parts = absl::StrSplit(name, '.');
  int layer = -1;
  if (parts.size() < 3 || !absl::SimpleAtoi(parts[1], &layer) || layer < 0 ||
      layer >= model.layers_size()) {
    return "weight";
  }
  const std::string param = name.substr(parts[0].size() + parts[1].size() + 2);
  const LayerSpec& l = model.layers(layer);
  if (l.has_tie_weight_to() && param == "weight" && l.tie_weight_to() >= 0 &&
      l.tie_weight_to() < layer) {
    return ParamKindOf(model,
                       absl::StrCat("layers.", l.tie_weight_to(), ".", param));
  }
  if (l.has_token_embedding() || l.has_position_embedding()) {
    return "embedding";
  }
  if (l.has_layer_norm() || l.has_rms_norm() ||
      absl::StartsWith(param, "ln_") || absl::StrContains(param, "layernorm")) {
    return "norm";
  }
  if (absl::EndsWith(param, "bias")) return "bias";
  return "weight";
}

namespace {

// Each tensor's weight decay and learning-rate factor: its group's, or the
// optimizer's own.
absl::StatusOr<std::vector<TensorGroup>> GroupsOf(const OptimizerSpec& spec,
                                                  const ParameterSet& params,
                                                  const ModelSpec* model) {
  const float decay = spec.has_sgd()    ? spec.sgd().weight_decay()
                      : spec.has_adam() ? spec.adam().weight_decay()
                                        : spec.adamw().weight_decay();
  std::vector<TensorGroup> groups(params.size(), TensorGroup{decay, 1.0});
  if (spec.param_groups().empty()) return groups;
  if (model == nullptr) {
    return absl::InvalidArgumentError(
        "optimizer.param_groups need the model's layers to tell the "
        "parameters' kinds");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string kind = ParamKindOf(*model, params.names[i]);
    for (const ParamGroup& g : spec.param_groups()) {
      if (std::find(g.kinds().begin(), g.kinds().end(), kind) ==
          g.kinds().end()) {
        continue;
      }
      if (g.has_weight_decay()) groups[i].weight_decay = g.weight_decay();
      if (g.has_lr_scale()) groups[i].lr_scale = g.lr_scale();
      break;
    }
  }
  return groups;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(
    const OptimizerSpec& spec, const ParameterSet& params, Device* device,
    int64_t total_steps, const ModelSpec* model) {
  RETURN_IF_ERROR(ValidateOptimizerSpec(spec));
  ASSIGN_OR_RETURN(std::vector<TensorGroup> groups,
                   GroupsOf(spec, params, model));
  if (spec.has_sgd()) {
    auto sgd = std::make_unique<Sgd>(spec.sgd(), spec.schedule(), total_steps,
                                     std::move(groups), device);
    RETURN_IF_ERROR(sgd->Init(params));
    return std::unique_ptr<Optimizer>(std::move(sgd));
  }
  const bool decoupled = spec.has_adamw();
  auto adam = std::make_unique<Adam>(decoupled ? spec.adamw() : spec.adam(),
                                     decoupled, spec.schedule(), total_steps,
                                     std::move(groups), device);
  RETURN_IF_ERROR(adam->Init(params));
  return std::unique_ptr<Optimizer>(std::move(adam));
}

}  // namespace aqueduct
