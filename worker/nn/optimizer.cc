#include "worker/nn/optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "pipeline/spec.h"

namespace aqueduct {

namespace {

// What both optimizers share: the schedule and the step count.
class ScheduledOptimizer : public Optimizer {
 public:
  ScheduledOptimizer(const LrSchedule& schedule, int64_t total_steps)
      : schedule_(schedule), total_steps_(total_steps) {}
  int64_t steps() const override { return steps_; }
  void SetSteps(int64_t steps) override { steps_ = steps; }
  void SetLearningRateScale(double scale) override { lr_scale_ = scale; }

 protected:
  float ScaledLr(float lr) const {
    return static_cast<float>(
        lr * LearningRateFactor(schedule_, steps_, total_steps_) * lr_scale_);
  }
  int64_t steps_ = 0;

 private:
  LrSchedule schedule_;
  int64_t total_steps_;
  double lr_scale_ = 1.0;
};

class Sgd final : public ScheduledOptimizer {
 public:
  Sgd(const SgdSpec& spec, const LrSchedule& schedule, int64_t total_steps,
      Device* device)
      : ScheduledOptimizer(schedule, total_steps),
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
    p.lr = ScaledLr(spec_.lr());
    p.momentum = spec_.momentum();
    p.dampening = spec_.dampening();
    p.weight_decay = spec_.weight_decay();
    p.nesterov = spec_.nesterov();
    p.first_step = steps_ == 0;
    for (size_t i = 0; i < params.size(); ++i) {
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
  Adam(const AdamSpec& spec, const LrSchedule& schedule, int64_t total_steps,
       Device* device)
      : ScheduledOptimizer(schedule, total_steps),
        spec_(spec),
        device_(device) {}

  absl::Status Init(const ParameterSet& params) {
    ASSIGN_OR_RETURN(m_, ZerosLike(params, device_));
    ASSIGN_OR_RETURN(v_, ZerosLike(params, device_));
    return absl::OkStatus();
  }

  absl::Status StepFrom(const ParameterSet& from, const ParameterSet& params,
                        const ParameterSet& grads) override {
    AdamParams p;
    p.lr = ScaledLr(spec_.lr());
    if (spec_.has_beta1()) p.beta1 = spec_.beta1();
    if (spec_.has_beta2()) p.beta2 = spec_.beta2();
    if (spec_.has_eps()) p.eps = spec_.eps();
    p.weight_decay = spec_.weight_decay();
    p.step = steps_ + 1;
    for (size_t i = 0; i < params.size(); ++i) {
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

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(
    const OptimizerSpec& spec, const ParameterSet& params, Device* device,
    int64_t total_steps) {
  RETURN_IF_ERROR(ValidateOptimizerSpec(spec));
  if (spec.has_sgd()) {
    auto sgd =
        std::make_unique<Sgd>(spec.sgd(), spec.schedule(), total_steps, device);
    RETURN_IF_ERROR(sgd->Init(params));
    return std::unique_ptr<Optimizer>(std::move(sgd));
  }
  auto adam =
      std::make_unique<Adam>(spec.adam(), spec.schedule(), total_steps, device);
  RETURN_IF_ERROR(adam->Init(params));
  return std::unique_ptr<Optimizer>(std::move(adam));
}

}  // namespace aqueduct
