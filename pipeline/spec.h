// Job specs, as pure code shared by both daemons and `aq`: parsing
// (protobuf text format or JSON) and validation by shape inference alone.
//
// CheckJobSpec opens no file and builds no model: it checks every field of
// the spec, resolves the pipeline's policies (pipeline/policy.h) and infers
// the model's shapes from the data's sample shape when the spec states it
// (synthetic data). Data held in files is checked by the workers that read
// it, which fail the job naming the path and the worker
// (worker/nn/spec.h builds the model against the data).
//
// Thread-safety: stateless functions.
#ifndef AQUEDUCT_PIPELINE_SPEC_H_
#define AQUEDUCT_PIPELINE_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/policy.h"
#include "pipeline/shapes.h"
#include "proto/types.h"

namespace aqueduct {

// Parses a JobSpec from protobuf text format, or from JSON when the text
// starts with '{'. INVALID_ARGUMENT with line and column on a syntax error;
// `source` (e.g. the file name) prefixes the message.
absl::StatusOr<JobSpec> ParseJobSpec(const std::string& text,
                                     const std::string& source);

// Reads and parses a job spec file (NOT_FOUND naming the path).
absl::StatusOr<JobSpec> LoadJobSpecFile(const std::string& path);

// What a valid spec says, without its data.
struct SpecSummary {
  PipelinePolicy pipeline;
  // The sample shape when the spec states it (synthetic data), else unknown.
  SymbolicShape input;
  // Each layer's output per sample.
  std::vector<SymbolicShape> layer_outputs;
  // Training samples when the spec states them (synthetic data), else -1.
  int64_t train_samples = -1;
};

// Checks every field of `spec` that does not need its data.
// INVALID_ARGUMENT naming the field.
absl::StatusOr<SpecSummary> CheckJobSpec(const JobSpec& spec);

// The optimizer section (INVALID_ARGUMENT naming the field).
absl::Status ValidateOptimizerSpec(const OptimizerSpec& spec);

// The data section's fields (not its files).
absl::Status ValidateDataSpec(const DataSpec& spec);

// Every token embedding of `model` must index `vocab` token ids;
// INVALID_ARGUMENT otherwise, naming the layer and ending with `what` (the
// tokenizer's vocabulary, in words).
absl::Status CheckEmbeddingVocabulary(const ModelSpec& model, int64_t vocab,
                                      const std::string& what);

// Whether the data has a held-out split (the job then evaluates at its end).
bool HasTestSplit(const DataSpec& spec);

// How many committed checkpoints a job keeps (checkpoint.keep_last,
// default 3).
inline int CheckpointsKept(const JobSpec& spec) {
  return spec.checkpoint().keep_last() > 0 ? spec.checkpoint().keep_last() : 3;
}

}  // namespace aqueduct

#endif  // AQUEDUCT_PIPELINE_SPEC_H_
