// Job specs on a worker: the pure checks of pipeline/spec.h (parsing, field
// validation, shape inference), then the model built against the data this
// host holds.
//
// Errors are INVALID_ARGUMENT naming the field ("model.layers[3].linear.
// in_features=512 does not match the previous layer's output 1024") or the
// file (NOT_FOUND / DATA_LOSS naming the path). Thread-safe: stateless
// functions.
#ifndef AQUEDUCT_WORKER_NN_SPEC_H_
#define AQUEDUCT_WORKER_NN_SPEC_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "common/file_system.h"
#include "pipeline/spec.h"
#include "proto/types.h"
#include "worker/data/dataset.h"
#include "worker/nn/model.h"

namespace aqueduct {

struct ValidatedJob {
  DataInfo data;
  std::unique_ptr<Model> model;
};

// CheckJobSpec, then reads the data's headers (under `files`: a daemon
// passes the roots its operator allowed; the default, every path, is for
// tools that read their own user's files) and builds the model.
absl::StatusOr<ValidatedJob> ValidateJobSpec(
    const JobSpec& spec, const FileAccess& files = FileAccess::Anywhere());

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_NN_SPEC_H_
