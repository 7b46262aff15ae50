#include "worker/nn/optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace aqueduct {

namespace {

absl::Status CheckRange(absl::string_view field, double value, double lo,
                        double hi, bool hi_open) {
  const bool ok = std::isfinite(value) && value >= lo &&
                  (hi_open ? value < hi : value <= hi);
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("optimizer.", field, "=", value, " must be in [", lo, ", ",
                     hi, hi_open ? ")" : "]"));
  }
  return absl::OkStatus();
}

class Sgd final : public Optimizer {
 public:
  Sgd(const SgdSpec& spec, Device* device) : spec_(spec), device_(device) {}

  absl::Status Init(const ParameterSet& params) {
    if (spec_.momentum() != 0) {
      ASSIGN_OR_RETURN(ParameterSet buf, ZerosLike(params, device_));
      momentum_ = std::move(buf);
    }
    return absl::OkStatus();
  }

  absl::Status Step(const ParameterSet& params,
                    const ParameterSet& grads) override {
    SgdParams p;
    p.lr = spec_.lr();
    p.momentum = spec_.momentum();
    p.dampening = spec_.dampening();
    p.weight_decay = spec_.weight_decay();
    p.nesterov = spec_.nesterov();
    p.first_step = steps_ == 0;
    for (size_t i = 0; i < params.size(); ++i) {
      float* buf = spec_.momentum() != 0 ? momentum_.tensors[i].f32() : nullptr;
      device_->SgdStep(params.tensors[i].f32(), grads.tensors[i].f32(), buf,
                       params.tensors[i].numel(), p);
    }
    ++steps_;
    return absl::OkStatus();
  }

  int64_t steps() const override { return steps_; }

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
  int64_t steps_ = 0;
};

class Adam final : public Optimizer {
 public:
  Adam(const AdamSpec& spec, Device* device) : spec_(spec), device_(device) {}

  absl::Status Init(const ParameterSet& params) {
    ASSIGN_OR_RETURN(m_, ZerosLike(params, device_));
    ASSIGN_OR_RETURN(v_, ZerosLike(params, device_));
    return absl::OkStatus();
  }

  absl::Status Step(const ParameterSet& params,
                    const ParameterSet& grads) override {
    AdamParams p;
    p.lr = spec_.lr();
    if (spec_.has_beta1()) p.beta1 = spec_.beta1();
    if (spec_.has_beta2()) p.beta2 = spec_.beta2();
    if (spec_.has_eps()) p.eps = spec_.eps();
    p.weight_decay = spec_.weight_decay();
    p.step = steps_ + 1;
    for (size_t i = 0; i < params.size(); ++i) {
      device_->AdamStep(params.tensors[i].f32(), grads.tensors[i].f32(),
                        m_.tensors[i].f32(), v_.tensors[i].f32(),
                        params.tensors[i].numel(), p);
    }
    ++steps_;
    return absl::OkStatus();
  }

  int64_t steps() const override { return steps_; }

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
  int64_t steps_ = 0;
};

}  // namespace

absl::Status ValidateOptimizerSpec(const OptimizerSpec& spec) {
  switch (spec.kind_case()) {
    case OptimizerSpec::kSgd: {
      const SgdSpec& s = spec.sgd();
      if (!(s.lr() > 0) || !std::isfinite(s.lr())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "optimizer.sgd.lr=", s.lr(), " must be positive and finite"));
      }
      RETURN_IF_ERROR(CheckRange("sgd.momentum", s.momentum(), 0, 1, true));
      RETURN_IF_ERROR(
          CheckRange("sgd.weight_decay", s.weight_decay(), 0, 1, true));
      RETURN_IF_ERROR(CheckRange("sgd.dampening", s.dampening(), 0, 1, false));
      if (s.nesterov() && (s.momentum() == 0 || s.dampening() != 0)) {
        return absl::InvalidArgumentError(
            "optimizer.sgd.nesterov=true needs momentum > 0 and dampening = "
            "0");
      }
      return absl::OkStatus();
    }
    case OptimizerSpec::kAdam: {
      const AdamSpec& s = spec.adam();
      if (!(s.lr() > 0) || !std::isfinite(s.lr())) {
        return absl::InvalidArgumentError(absl::StrCat(
            "optimizer.adam.lr=", s.lr(), " must be positive and finite"));
      }
      if (s.has_beta1()) {
        RETURN_IF_ERROR(CheckRange("adam.beta1", s.beta1(), 0, 1, true));
      }
      if (s.has_beta2()) {
        RETURN_IF_ERROR(CheckRange("adam.beta2", s.beta2(), 0, 1, true));
      }
      if (s.has_eps() && !(s.eps() > 0)) {
        return absl::InvalidArgumentError(
            absl::StrCat("optimizer.adam.eps=", s.eps(), " must be positive"));
      }
      RETURN_IF_ERROR(
          CheckRange("adam.weight_decay", s.weight_decay(), 0, 1, true));
      return absl::OkStatus();
    }
    case OptimizerSpec::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "optimizer is not set (set optimizer.sgd or optimizer.adam)");
}

absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(
    const OptimizerSpec& spec, const ParameterSet& params, Device* device) {
  RETURN_IF_ERROR(ValidateOptimizerSpec(spec));
  if (spec.has_sgd()) {
    auto sgd = std::make_unique<Sgd>(spec.sgd(), device);
    RETURN_IF_ERROR(sgd->Init(params));
    return std::unique_ptr<Optimizer>(std::move(sgd));
  }
  auto adam = std::make_unique<Adam>(spec.adam(), device);
  RETURN_IF_ERROR(adam->Init(params));
  return std::unique_ptr<Optimizer>(std::move(adam));
}

}  // namespace aqueduct
