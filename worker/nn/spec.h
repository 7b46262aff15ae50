// Job specs: parsing (protobuf text format or JSON) and validation.
//
// Validation builds the model against the data's sample shape, so every
// problem is reported before any work starts, as INVALID_ARGUMENT naming the
// field: "model.layers[3].linear.in_features=512 does not match the previous
// layer's output 1024". Thread-safe: stateless functions.
#ifndef AQUEDUCT_WORKER_NN_SPEC_H_
#define AQUEDUCT_WORKER_NN_SPEC_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/types.h"
#include "worker/data/dataset.h"
#include "worker/nn/model.h"

namespace aqueduct {

// Parses a JobSpec from protobuf text format, or from JSON when the text
// starts with '{'. INVALID_ARGUMENT with line and column on a syntax error;
// `source` (e.g. the file name) prefixes the message.
absl::StatusOr<JobSpec> ParseJobSpec(const std::string& text,
                                     const std::string& source);

// Reads and parses a job spec file.
absl::StatusOr<JobSpec> LoadJobSpecFile(const std::string& path);

struct ValidatedJob {
  DataInfo data;
  std::unique_ptr<Model> model;
};

// Checks every field of `spec` and builds its model.
absl::StatusOr<ValidatedJob> ValidateJobSpec(const JobSpec& spec);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_NN_SPEC_H_
