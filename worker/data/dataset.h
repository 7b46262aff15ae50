// Datasets in memory, and the deterministic order in which training visits
// them.
//
// A Dataset holds normalised float inputs and int32 labels on the host.
// Minibatch m of a job is a pure function of (data, seed, batch size, m):
// epoch m / batches_per_epoch, shuffled by a permutation drawn from
// (seed, epoch). Every stage of a pipeline and `aq train-local` therefore see
// the same minibatches. The last partial batch of an epoch is dropped.
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
#include "common/tensor.h"
#include "proto/types.h"

namespace aqueduct {

struct Dataset {
  // Per-sample shape, e.g. [1, 28, 28].
  Shape sample_shape;
  int64_t size = 0;
  int num_classes = 0;
  // size * sample_shape.numel() floats, normalised.
  std::vector<float> inputs;
  // size labels in [0, num_classes).
  std::vector<int32_t> labels;
};

struct DataSplits {
  Dataset train;
  std::optional<Dataset> test;
};

// What a DataSpec describes, without loading the data (IDX headers only).
struct DataInfo {
  Shape sample_shape;
  int num_classes = 0;
  // Training samples (after data.train_limit).
  int64_t train_samples = 0;
};

// Validates `spec` (errors name the field: "data.synthetic.num_classes=1
// must be at least 2") and reads only what is needed to know the shapes.
absl::StatusOr<DataInfo> DescribeData(const DataSpec& spec);

// Loads the training and (if any) test split. Errors name the file and the
// offset for corrupt IDX data, and the index of any out-of-range label.
absl::StatusOr<DataSplits> LoadData(const DataSpec& spec);

// The visiting order of a training set.
class EpochSampler {
 public:
  EpochSampler(int64_t dataset_size, int64_t batch_size, bool shuffle,
               uint64_t seed);

  // floor(size / batch): 0 when the set is smaller than one batch.
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // The sample indices of global minibatch `minibatch`.
  absl::Span<const int64_t> Batch(int64_t minibatch);

 private:
  int64_t size_;
  int64_t batch_size_;
  bool shuffle_;
  uint64_t seed_;
  int64_t batches_per_epoch_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> order_;
};

// Copies the samples `indices` of `data` into `inputs` (indices.size() *
// sample numel floats) and `labels`.
void GatherBatch(const Dataset& data, absl::Span<const int64_t> indices,
                 float* inputs, int32_t* labels);

// Host memory a non-CPU device's batches are gathered into before the copy
// to the device; kept across batches.
struct BatchStaging {
  std::vector<float> inputs;
  std::vector<int32_t> labels;
};

// Gathers the samples `indices` into `inputs` (F32, indices.size() samples)
// and `labels` (I32) on `device`: straight into the tensors on the CPU,
// through `staging` otherwise.
absl::Status LoadBatch(const Dataset& data, absl::Span<const int64_t> indices,
                       Device& device, Tensor& inputs, Tensor& labels,
                       BatchStaging& staging);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_DATA_DATASET_H_
