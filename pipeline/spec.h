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
// Every count and size is bounded (pipeline/limits.h: a maximum per field,
// overflow-safe products) and what the job would allocate is compared with
// the memory of the device it would run on (pipeline/memory.h), so that a
// spec that passes cannot make a worker throw std::length_error or
// std::bad_alloc. Workers check again, with their own memory, before they
// allocate (CheckStageMemory).
//
// Thread-safety: stateless functions.
#ifndef AQUEDUCT_PIPELINE_SPEC_H_
#define AQUEDUCT_PIPELINE_SPEC_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/limits.h"
#include "pipeline/memory.h"
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

// Checks every field of `spec` that does not need its data, and what the
// job would hold against `memory` (one worker's; unknown by default, when
// pipeline/limits.h's kDefaultMemoryBytes applies). INVALID_ARGUMENT naming
// the field, and for sizes the numbers: "model.layers[3].transformer_block
// needs at least 80.0 GB: ..., more than the largest registered worker's
// memory (16.0 GB)".
// `s` with each "model.layers[8]" in its message followed by the layer's
// name when it has one: "model.layers[8] ('h.3')".
absl::Status WithLayerNames(const ModelSpec& model, const absl::Status& s);

absl::StatusOr<SpecSummary> CheckJobSpec(const JobSpec& spec,
                                         const MemoryLimit& memory = {});

// One worker's part of a job, for CheckStageMemory.
struct StageNeeds {
  // In messages: "stage 1", "profiling".
  std::string what;
  // The layers it holds.
  int layer_begin = 0;
  int layer_end = 0;
  // Samples per microbatch.
  int64_t samples = 1;
  // Copies of each parameter: weights, gradients and optimizer state in
  // training (TrainingCopies); the profiler holds two more.
  int copies = 2;
  // Bytes of data it loads, and the steps (with the bytes a step costs,
  // PerStepBytes) it keeps a record of.
  int64_t data_bytes = 0;
  int64_t steps = 0;
  int64_t bytes_per_step = 0;
  // A member of a tensor group of this degree that recomputes so
  // (pipeline/memory.h EstimateModel).
  int tensor_degree = 1;
  Recompute recompute = Recompute::kNone;
  bool sequence_parallel = false;
};

// A worker's own check before it allocates (defence in depth: the
// coordinator checked the spec against its largest worker and the plan
// against each): the layers of `stage` built on samples of shape `input`
// (the data's, as the worker read it), its data and its steps, against
// `memory`. `code` (FAILED_PRECONDITION, RESOURCE_EXHAUSTED) with a message
// naming the layer that holds the most and the numbers otherwise; the
// error of shape inference if `input` does not fit the model.
absl::Status CheckStageMemory(const JobSpec& spec, const SymbolicShape& input,
                              const StageNeeds& stage,
                              const MemoryLimit& memory, absl::StatusCode code);

// Whether `model` has transformer layers (the only ones tensor groups
// split and recomputation applies to).
bool HasTransformerLayers(const ModelSpec& model);

// Whether a tensor group of `degree` splits `model`'s vocabulary (its
// token embedding, first, and its linear head, last, of V rows and
// outputs, with `degree` dividing V): worker/nn/model.h.
bool SplitsVocabulary(const ModelSpec& model, int degree);

// The tensor-parallel degrees a plan of `model` may use: the spec's, else
// each that divides the workers and every transformer layer's heads and
// MLP width, largest first (1 last).
std::vector<int> TensorDegreesFor(const ModelSpec& model,
                                  const PipelinePolicy& policy);

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
