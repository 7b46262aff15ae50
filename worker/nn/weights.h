// Parameters to and from safetensors files. Names are "layers.<i>.<param>"
// with PyTorch's layouts (docs/weights.md), so a state_dict of an
// nn.Sequential with the same layers loads directly.
//
// Thread-safety: as the Device (one owner at a time).
#ifndef AQUEDUCT_WORKER_NN_WEIGHTS_H_
#define AQUEDUCT_WORKER_NN_WEIGHTS_H_

#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "common/safetensors.h"
#include "worker/nn/model.h"

namespace aqueduct {

// Copies `params` (and `extra` named tensors, e.g. optimizer state) to host
// F32 tensors.
absl::StatusOr<SafetensorsFile> ExportParameters(Device& device,
                                                 const ParameterSet& params);

// Overwrites `params` from `file`. Every parameter must be present with its
// exact shape; F32, BF16 and F16 are accepted (converted to F32). Tensors in
// the file for layers outside the set's range are ignored, others that the
// model does not have are an error, as is any missing one.
absl::Status ImportParameters(const SafetensorsFile& file, Device& device,
                              const ParameterSet& params);
// As above, except that tensors for which `skip(name)` is true are passed
// over rather than rejected: optimizer state stored beside the parameters
// (worker/nn/training_state.h), which the caller reads itself.
absl::Status ImportParameters(
    const SafetensorsFile& file, Device& device, const ParameterSet& params,
    const std::function<bool(const std::string&)>& skip);

// A file whose tied copies differ (one not written by Aqueduct): each
// tied layer's weight in `file` takes its owner's values (when the file
// holds both, of one shape), so that every stage of a pipeline starts with
// the copy one process takes (CopyTiedWeights: the owner's).
void TieFileCopies(const Model& model, SafetensorsFile* file);

// The values of `t` as floats: F32 copied, BF16 and F16 widened (exactly).
// INVALID_ARGUMENT naming `name` for another dtype.
absl::StatusOr<std::vector<float>> HostTensorValues(const HostTensor& t,
                                                    const std::string& name);

// File wrappers; errors name the path.
absl::Status SaveParametersFile(const std::string& path, Device& device,
                                const ParameterSet& params);
absl::Status LoadParametersFile(const std::string& path, Device& device,
                                const ParameterSet& params);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_NN_WEIGHTS_H_
