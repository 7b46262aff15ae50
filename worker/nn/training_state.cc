#include "worker/nn/training_state.h"

#include <set>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/nn/weights.h"

namespace aqueduct {

namespace {

using StateTensors = std::vector<std::pair<std::string, Tensor>>;

absl::StatusOr<HostTensor> ToHost(Device& device, const Tensor& t) {
  HostTensor h;
  h.dtype = t.dtype();
  h.shape = t.shape();
  h.data.resize(t.nbytes());
  RETURN_IF_ERROR(device.CopyToHost(t, h.data.data()));
  return h;
}

// Whether `name` is "<p>.<...>" for a parameter p in `params`: the state of
// some optimizer for one of the set's parameters.
bool IsStateName(const std::set<std::string>& params, const std::string& name) {
  for (size_t dot = name.find('.'); dot != std::string::npos;
       dot = name.find('.', dot + 1)) {
    if (params.count(name.substr(0, dot)) != 0) return true;
  }
  return false;
}

absl::StatusOr<int64_t> ParseSteps(const SafetensorsFile& file) {
  auto it = file.metadata.find(kOptimizerStepsKey);
  if (it == file.metadata.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata '", kOptimizerStepsKey,
                     "' is missing (a weights file, not training state?)"));
  }
  int64_t steps = -1;
  if (!absl::SimpleAtoi(it->second, &steps) || steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("metadata '", kOptimizerStepsKey, "' is '", it->second,
                     "', not a step count"));
  }
  return steps;
}

// Checks the optimizer state in `file` against `state`: every tensor
// present, F32, of the same shape, and no state for the set's parameters
// that the optimizer does not have.
absl::Status CheckState(const SafetensorsFile& file,
                        const std::set<std::string>& params,
                        const StateTensors& state) {
  std::set<std::string> names;
  for (const auto& [name, t] : state) {
    names.insert(name);
    auto it = file.tensors.find(name);
    if (it == file.tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer state tensor '", name, "' of shape ", t.shape().ToString(),
          " is missing (the file holds no state for this optimizer: a "
          "weights file, or another optimizer's?)"));
    }
    if (it->second.dtype != DType::kF32) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer state tensor '", name, "' has dtype ",
                       DTypeName(it->second.dtype), "; it must be F32"));
    }
    if (it->second.shape != t.shape()) {
      return absl::InvalidArgumentError(
          absl::StrCat("optimizer state tensor '", name, "' has shape ",
                       it->second.shape.ToString(), " but the optimizer needs ",
                       t.shape().ToString()));
    }
  }
  for (const auto& [name, t] : file.tensors) {
    if (names.count(name) == 0 && IsStateName(params, name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", name,
                       "' is optimizer state that this optimizer does not "
                       "have (another optimizer's?)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<SafetensorsFile> ExportTrainingState(
    Device& device, const ParameterSet& params, const Optimizer& optimizer,
    const std::map<std::string, std::string>& metadata) {
  ASSIGN_OR_RETURN(SafetensorsFile file, ExportParameters(device, params));
  for (const auto& [name, t] : optimizer.State()) {
    ASSIGN_OR_RETURN(file.tensors[name], ToHost(device, t));
  }
  for (const auto& [key, value] : metadata) file.metadata[key] = value;
  file.metadata[kOptimizerStepsKey] = absl::StrCat(optimizer.steps());
  return file;
}

absl::Status ImportTrainingState(const SafetensorsFile& file, Device& device,
                                 const ParameterSet& params,
                                 Optimizer* optimizer) {
  ASSIGN_OR_RETURN(const int64_t steps, ParseSteps(file));
  const StateTensors state = optimizer->State();
  const std::set<std::string> names(params.names.begin(), params.names.end());
  RETURN_IF_ERROR(CheckState(file, names, state));
  RETURN_IF_ERROR(ImportParameters(
      file, device, params,
      [&names](const std::string& name) { return IsStateName(names, name); }));
  for (const auto& [name, t] : state) {
    RETURN_IF_ERROR(device.CopyFromHost(file.tensors.at(name).data.data(), t));
  }
  optimizer->SetSteps(steps);
  return absl::OkStatus();
}

}  // namespace aqueduct
