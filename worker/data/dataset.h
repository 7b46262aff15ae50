// Datasets in memory, and the deterministic order in which training visits
// them.
//
// A Dataset holds normalised float inputs and int32 labels on the host, or,
// for text (worker/data/text.h), its tokens, whose windows are the samples.
// Minibatch m of a job is a pure function of (data, seed, batch size, m):
// for images, epoch m / batches_per_epoch, shuffled by a permutation drawn
// from (seed, epoch), the last partial batch of an epoch dropped; for text,
// windows drawn at random with replacement (TextWindowStart). Every stage of
// a pipeline and `aq train-local` therefore see the same minibatches.
//
// Thread-safety: Dataset is immutable after loading. EpochSampler caches one
// permutation and is not thread-safe.
#ifndef AQUEDUCT_WORKER_DATA_DATASET_H_
#define AQUEDUCT_WORKER_DATA_DATASET_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/device/device.h"
#include "common/file_system.h"
#include "common/tensor.h"
#include "proto/types.h"
#include "worker/data/tokens.h"

namespace aqueduct {

struct Dataset {
  // Per-sample shape, e.g. [1, 28, 28], or [context] for text.
  Shape sample_shape;
  int64_t size = 0;
  // Classes, or the vocabulary for text.
  int num_classes = 0;
  // Labels of one sample: 1, or context for text (the next token at every
  // position).
  int64_t labels_per_sample = 1;

  // Images (and synthetic data); empty for text.
  // size * sample_shape.numel() floats, normalised.
  std::vector<float> inputs;
  // size labels in [0, num_classes).
  std::vector<int32_t> labels;

  // Text; empty for images. Sample i is the window starting at token
  // s = i * stride: inputs tokens[s, s + context) (as floats), labels
  // tokens[s + 1, s + context]. Training splits have stride 1, validation
  // splits stride context (non-overlapping windows).
  std::vector<int32_t> tokens;
  // Text from a token file (TextData.token_dtype): its mapped ids, in
  // place of `tokens`.
  TokenView mapped;
  int64_t context = 0;
  int64_t stride = 0;

  bool is_text() const { return context > 0; }
  int64_t num_tokens() const {
    return mapped.data != nullptr ? mapped.count
                                  : static_cast<int64_t>(tokens.size());
  }
  int32_t token(int64_t i) const {
    return mapped.data != nullptr ? mapped[i] : tokens[static_cast<size_t>(i)];
  }
};

struct DataSplits {
  Dataset train;
  std::optional<Dataset> test;
};

// What a DataSpec describes, without loading the data (IDX headers only).
struct DataInfo {
  Shape sample_shape;
  // Classes, or the vocabulary for text.
  int num_classes = 0;
  // 1, or context for text.
  int64_t labels_per_sample = 1;
  // Training samples (after data.train_limit); for text, floor(training
  // tokens / context), so that an epoch visits about as many tokens as the
  // training split holds (pipeline/policy.h's TotalSteps).
  int64_t train_samples = 0;
};

// Validates `spec` (errors name the field: "data.synthetic.num_classes=1
// must be at least 2") and reads only what is needed to know the shapes
// (IDX headers and labels; every file of a text, for its vocabulary and
// token count). Files are opened under files.data only (worker/data/idx.h,
// text.h): a path outside it is PERMISSION_DENIED naming the field and the
// path.
absl::StatusOr<DataInfo> DescribeData(const DataSpec& spec,
                                      const FileAccess& files);

// Loads the training and (if any) test split (for text, the validation
// split) under files.data. Errors name the file and the offset for corrupt
// IDX data or invalid UTF-8, and the index of any out-of-range label;
// CANCELLED once *files.stop is true.
absl::StatusOr<DataSplits> LoadData(const DataSpec& spec,
                                    const FileAccess& files);

// The visiting order of a training set.
class EpochSampler {
 public:
  // The sampler of a training set of images of `dataset_size` samples:
  // every epoch visits each sample once, in a permutation drawn from (seed,
  // epoch) when `shuffle`, else in order.
  EpochSampler(int64_t dataset_size, int64_t batch_size, bool shuffle,
               uint64_t seed);
  // The sampler of training set `data`: as above for images; for text,
  // random windows whatever `shuffle` says: row r of minibatch m is window
  // TextWindowStart(seed, m, r, data.size) (worker/data/text.h), and an
  // epoch is floor(data.tokens.size() / data.context / batch_size)
  // minibatches. `data` need not outlive the sampler.
  static EpochSampler For(const Dataset& data, int64_t batch_size, bool shuffle,
                          uint64_t seed);

  // floor(size / batch) for images, floor(tokens / context / batch) for
  // text: 0 when the set is smaller than one batch.
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // The sample indices of global minibatch `minibatch` (batch_size of
  // them); valid until the next call.
  absl::Span<const int64_t> Batch(int64_t minibatch);

 private:
  int64_t size_;
  int64_t batch_size_;
  bool shuffle_;
  uint64_t seed_;
  int64_t batches_per_epoch_;
  // Text: draw windows at random with replacement.
  bool random_windows_ = false;
  // The epoch (images) or minibatch (text) whose indices order_ holds.
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> order_;
};

// Copies the samples `indices` of `data` into `inputs` (indices.size() *
// sample numel floats) and `labels` (indices.size() * labels_per_sample
// int32, sample after sample). Indices must be in [0, data.size).
void GatherBatch(const Dataset& data, absl::Span<const int64_t> indices,
                 float* inputs, int32_t* labels);

// Host memory a non-CPU device's batches are gathered into before the copy
// to the device; kept across batches.
struct BatchStaging {
  std::vector<float> inputs;
  std::vector<int32_t> labels;
};

// Gathers the samples `indices` into `inputs` (F32, indices.size() samples)
// and `labels` (I32, indices.size() * labels_per_sample elements, any
// shape) on `device`: straight into the tensors on the CPU, through
// `staging` otherwise. INTERNAL if the tensors' sizes do not fit.
absl::Status LoadBatch(const Dataset& data, absl::Span<const int64_t> indices,
                       Device& device, Tensor& inputs, Tensor& labels,
                       BatchStaging& staging);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_DATA_DATASET_H_
