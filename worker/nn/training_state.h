// Training state: a stage's parameters together with its optimizer's state
// and step count, as one SafetensorsFile (what a stage writes into a
// checkpoint, common/checkpoint.h). Parameters keep their names
// ("layers.<i>.<param>", as ExportParameters); optimizer state is stored
// under "<param>.<state>" with PyTorch's names (momentum_buffer, exp_avg,
// exp_avg_sq); the step count is the metadata "optimizer_steps".
//
// Thread-safety: as the Device and the Optimizer (one owner at a time).
#ifndef AQUEDUCT_WORKER_NN_TRAINING_STATE_H_
#define AQUEDUCT_WORKER_NN_TRAINING_STATE_H_

#include <map>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/device/device.h"
#include "common/safetensors.h"
#include "worker/nn/model.h"
#include "worker/nn/optimizer.h"

namespace aqueduct {

// The metadata key holding the optimizer's step count (decimal).
inline constexpr char kOptimizerStepsKey[] = "optimizer_steps";

// A stage's parameters and its optimizer's state as one SafetensorsFile:
// parameters under their names ("layers.<i>.<param>", as ExportParameters),
// optimizer state under "<param>.<state>" (Optimizer::State():
// momentum_buffer, exp_avg, exp_avg_sq, PyTorch's names), metadata
// "optimizer_steps" (decimal) plus whatever `metadata` holds. Copies from
// the device (blocking); errors are the device's.
absl::StatusOr<SafetensorsFile> ExportTrainingState(
    Device& device, const ParameterSet& params, const Optimizer& optimizer,
    const std::map<std::string, std::string>& metadata);

// Restores `params` and the optimizer's state and step count from `file`
// (tensors of layers outside params' range are ignored). INVALID_ARGUMENT
// naming a missing tensor, a shape mismatch, or a missing/bad
// "optimizer_steps"; a file without optimizer state for an optimizer that
// has state (a weights file), or with state the optimizer does not have
// (another optimizer's), is an error too. The optimizer state and the step
// count are checked before anything is written; a parameter that fails
// ImportParameters' checks may leave earlier parameters overwritten.
absl::Status ImportTrainingState(const SafetensorsFile& file, Device& device,
                                 const ParameterSet& params,
                                 Optimizer* optimizer);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_NN_TRAINING_STATE_H_
