// Optimizers: SGD (momentum, dampening, Nesterov, weight decay) and Adam,
// with PyTorch's torch.optim semantics, one fused device kernel per
// parameter tensor.
//
// Not thread-safe: owned by the stage that owns the parameters.
#ifndef AQUEDUCT_WORKER_NN_OPTIMIZER_H_
#define AQUEDUCT_WORKER_NN_OPTIMIZER_H_

#include <memory>

#include "absl/status/statusor.h"
#include "common/device/device.h"
#include "proto/types.h"
#include "worker/nn/model.h"

namespace aqueduct {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Applies one update to `params` from `grads` (same names and shapes as
  // the set the optimizer was created for).
  absl::Status Step(const ParameterSet& params, const ParameterSet& grads) {
    return StepFrom(params, params, grads);
  }
  // Writes into `to` the update of `from` (both shaped like the optimizer's
  // set; `to` may be `from`), leaving `from` unchanged when they differ: a
  // stage keeps the previous version without copying it.
  virtual absl::Status StepFrom(const ParameterSet& from,
                                const ParameterSet& to,
                                const ParameterSet& grads) = 0;
  // Number of steps applied so far.
  virtual int64_t steps() const = 0;
  // A factor on the learning rate of the steps from now on (1 at first):
  // the staleness correction of pipeline/policy.h, StalenessLrScale.
  virtual void SetLearningRateScale(double scale) = 0;
  // Sets the number of steps applied so far (restoring a checkpoint, with
  // the state of State() copied back): the learning-rate schedule, Adam's
  // bias correction and SGD's first-step momentum go on from there.
  virtual void SetSteps(int64_t steps) = 0;
  // The optimizer's state tensors (momentum buffers; Adam's m and v), named
  // "<param>.<state>", for checkpoints.
  virtual std::vector<std::pair<std::string, Tensor>> State() const = 0;
};

// Builds the optimizer of `spec` for `params` (state allocated on `device`,
// zero-filled). `total_steps` is the length of the job, over which the
// learning-rate schedule runs. `model` (the job's layers) tells the
// parameters' kinds for spec.param_groups; it may be null when there are
// none. INVALID_ARGUMENT naming the field on bad hyper-parameters.
absl::StatusOr<std::unique_ptr<Optimizer>> CreateOptimizer(
    const OptimizerSpec& spec, const ParameterSet& params, Device* device,
    int64_t total_steps, const ModelSpec* model = nullptr);

// The kind a parameter group names for parameter `name` ("layers.<i>.<p>")
// of `model`: "embedding", "norm", "bias" or "weight" (ParamGroup.kinds in
// proto/job.proto). A layer tied to another takes the owner's kind for its
// weight.
std::string ParamKindOf(const ModelSpec& model, const std::string& name);

// The factor the schedule applies to the base learning rate at 0-based step
// `step` of `total_steps` (1 when the schedule is unset).
double LearningRateFactor(const LrSchedule& schedule, int64_t step,
                          int64_t total_steps);

// ValidateOptimizerSpec (checks without building anything) is in
// pipeline/spec.h.

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_NN_OPTIMIZER_H_
