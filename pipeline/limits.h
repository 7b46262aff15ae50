// Limits on what a job spec may ask for, and the overflow-safe arithmetic
// that checks sizes against them.
//
// Every count and size in a JobSpec is bounded twice: by a sane maximum per
// field (the kMax constants below; docs/protocol.md, "Limits", lists them),
// and, for what it makes a worker allocate (parameters, activations,
// synthetic data, the schedule), by the memory of the device it would run
// on (pipeline/memory.h). Products of spec values go through CheckedMul or
// SaturatingMul, never a bare `*`: a product that wraps round to a small
// number would pass every check and then crash the worker that allocates
// it.
//
// Thread-safety: stateless functions and constants.
#ifndef AQUEDUCT_PIPELINE_LIMITS_H_
#define AQUEDUCT_PIPELINE_LIMITS_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace aqueduct {

// ---- Overflow-safe arithmetic ----

// a * b and a + b, or nullopt when the result does not fit in an int64.
std::optional<int64_t> CheckedMul(int64_t a, int64_t b);
std::optional<int64_t> CheckedAdd(int64_t a, int64_t b);

// Sizes that saturate: for non-negative operands, the result or kSaturated
// when it would overflow (kSaturated stays kSaturated). A saturated size is
// larger than every limit, so it is refused like any other too-large size.
// Negative operands count as 0: a size is never negative.
inline constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max();
int64_t SaturatingMul(int64_t a, int64_t b);
int64_t SaturatingAdd(int64_t a, int64_t b);
// The product of `dims` (1 for none), saturating.
int64_t SaturatingProduct(const std::vector<int64_t>& dims);

// "512 B", "17.2 GB", "4.0 TB" (decimal units, one decimal); "more than
// 9.2 EB" for kSaturated.
std::string FormatBytes(int64_t bytes);

// INVALID_ARGUMENT "<field>=<value> must be in [lo, hi]" unless lo <= value
// <= hi.
absl::Status CheckInRange(absl::string_view field, int64_t value, int64_t lo,
                          int64_t hi);
// INVALID_ARGUMENT "<field>=<value> must be at most <hi>" if value > hi
// (the upper bound of a field whose lower bound is checked on its own).
absl::Status CheckAtMost(absl::string_view field, int64_t value, int64_t hi);
// The same as CheckInRange for a floating-point field, which must also be
// finite (NaN and infinities are refused whatever the range).
absl::Status CheckFiniteInRange(absl::string_view field, double value,
                                double lo, double hi);

// ---- Per-field maxima ----

// Samples per minibatch.
inline constexpr int64_t kMaxBatchSize = int64_t{1} << 24;
inline constexpr int64_t kMaxEpochs = 1000000;
// Optimizer steps, and the step counts that are compared with them
// (eval_every, checkpoint.every_steps, schedule.warmup_steps, ...). A worker
// also keeps a few hundred bytes per step (PerStepBytes in memory.h), which
// the memory check bounds further.
inline constexpr int64_t kMaxSteps = 1000000000;
// Sample counts: synthetic train/test samples, data.train_limit and
// test_limit, data.text.val_windows.
inline constexpr int64_t kMaxSamples = int64_t{1} << 40;
// Dimensions of a synthetic sample.
inline constexpr int kMaxSampleRank = 8;
// Widths: linear in/out features, layer_norm.normalized_shape, embedding
// and attention dims, the MLP's hidden width (and the vocabulary, whose
// bound token ids travelling as floats set: 2^24 as well).
inline constexpr int64_t kMaxFeatures = int64_t{1} << 24;
// Convolution channels.
inline constexpr int64_t kMaxChannels = int64_t{1} << 20;
// Convolution and pooling kernel sizes, strides and paddings.
inline constexpr int64_t kMaxKernel = 4096;
// Attention heads.
inline constexpr int64_t kMaxHeads = 4096;
// Positions: position_embedding.context (and data.text.context).
inline constexpr int64_t kMaxContext = int64_t{1} << 20;
// Layers of a model and nodes of a profile: the planner's tables grow with
// the square of the states.
inline constexpr int kMaxLayers = 4096;
// Elements of any one tensor (a parameter, or one sample's activation):
// 2^32 floats, 17.2 GB.
inline constexpr int64_t kMaxTensorFloats = int64_t{1} << 32;
// Microbatches per minibatch.
inline constexpr int64_t kMaxMicrobatches = 65536;
// pipeline.wait_for_workers_ms: a week.
inline constexpr int64_t kMaxWaitForWorkersMs = int64_t{7} * 24 * 3600 * 1000;
// Link bandwidths (bytes/s) in a spec, a profile or a plan request: 1 PB/s.
inline constexpr double kMaxBandwidthBytesPerS = 1e15;
// checkpoint.keep_last.
inline constexpr int64_t kMaxCheckpointsKept = 10000;

// ---- Memory ----

// The memory a job's sizes are checked against.
struct MemoryLimit {
  // Bytes one worker holds; 0 (or less): not known, and kDefaultMemoryBytes
  // applies.
  int64_t bytes = 0;
  // Whose memory, for messages: "the largest registered worker's memory",
  // "this worker's memory".
  std::string what;
};

// The limit when no device's memory is known (e.g. a job submitted before
// any worker registered): 1 TiB, more than any one accelerator or common
// host has, so a spec is refused only for sizes no worker could hold.
inline constexpr int64_t kDefaultMemoryBytes = int64_t{1} << 40;

// `limit` with the default applied when its bytes are not known.
MemoryLimit KnownOrDefault(const MemoryLimit& limit);

// "the largest registered worker's memory (16.0 GB)".
std::string Describe(const MemoryLimit& limit);

// The host's physical memory in bytes (sysconf), 0 if it cannot be read:
// the memory of a CPU device, which is what DeviceInfo.memory_bytes
// reports.
int64_t HostMemoryBytes();

}  // namespace aqueduct

#endif  // AQUEDUCT_PIPELINE_LIMITS_H_
