// The tensor-parallel group a layer's passes reach (PassContext.tensor),
// over a ProcessGroup of the data plane: each sum ends by its own deadline
// (now + `timeout`), and on a device whose memory the host cannot address
// the tensor is staged through host memory.
//
// Thread-safety: as TensorParallelGroup: one pass at a time.
#ifndef AQUEDUCT_WORKER_NN_TENSOR_PARALLEL_H_
#define AQUEDUCT_WORKER_NN_TENSOR_PARALLEL_H_

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "common/comm/process_group.h"
#include "common/safetensors.h"
#include "worker/nn/layer.h"
#include "worker/nn/loss.h"
#include "worker/nn/model.h"

namespace aqueduct {

class ProcessGroupTensorParallel final : public TensorParallelGroup {
 public:
  // `group` is not owned and must outlive this.
  ProcessGroupTensorParallel(ProcessGroup* group, absl::Duration timeout)
      : group_(group), timeout_(timeout) {}

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  absl::Status AllReduce(Device& device, const Tensor& t) override;
  absl::Status AllReduceHost(float* data, size_t n) override;
  absl::Status AllGatherHost(const float* in, size_t n, float* out) override;
  absl::Status AllGather(Device& device, const Tensor& part,
                         const Tensor& whole) override;
  absl::Status ReduceScatter(Device& device, const Tensor& whole,
                             const Tensor& part) override;

 private:
  ProcessGroup* group_;
  absl::Duration timeout_;
  std::vector<float> staging_, staging_part_;
};

// Softmax cross-entropy over logits split by vocabulary across a tensor
// group (Megatron's vocabulary-parallel cross-entropy): this member's
// logits [..., V / t] are classes [first_class, first_class + V / t);
// `labels` are every row's. Three small collectives per call (the rows'
// maxima gathered, the sums of exponentials and the target logits summed);
// the logits are never gathered. `losses` are every row's, the same bits on
// every member; `dlogits` this member's columns, as SoftmaxCrossEntropy's
// (worker/nn/loss.h). Computed in host memory (staged on devices the host
// cannot address).
absl::StatusOr<LossOutput> VocabParallelCrossEntropy(
    Device& device, TensorParallelGroup& group, const Tensor& logits,
    const Tensor& labels, int64_t first_class, float grad_scale);

// Sequence parallelism's parameter gradients: each member's LayerNorm
// gradients in a sequence-parallel block come from its rows only
// (Layer::PartialOverRows), so each becomes the sum over `group`: one
// all-reduce of them all, flattened. Nothing when no layer in `grads`'
// range is sequence-parallel.
absl::Status SumSequenceParallelGradients(const Model& model, Device& device,
                                          const ParameterSet& grads,
                                          TensorParallelGroup* group);

// Files of whole tensors and a tensor-parallel member's parts: weights,
// checkpoints and exported models hold whole tensors under today's names,
// so that they load at any degree.
//
// How the file tensor `name` ("layers.<i>.<param>", or an optimizer's
// "layers.<i>.<param>.<state>") is split in `model` (whole or a member's:
// the split does not depend on the degree); dim -1 for a tensor that is
// not split or not the model's.
ParamSplit SplitOfTensor(const Model& model, const std::string& name);

// Member `shard.rank`'s part of each split tensor of a file of whole ones
// (the rest, and the metadata, as they are). INVALID_ARGUMENT naming a
// tensor the degree does not divide.
absl::StatusOr<SafetensorsFile> ShardFile(const SafetensorsFile& whole,
                                          const Model& model,
                                          const TensorShard& shard);

// The whole file from every member's part: each split tensor gathered over
// `group` (members call this with files of the same names and shapes, in
// the same order of calls). The group's errors, labelled.
absl::StatusOr<SafetensorsFile> GatherWholeFile(const SafetensorsFile& part,
                                                const Model& model,
                                                ProcessGroup& group,
                                                absl::Time deadline);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_NN_TENSOR_PARALLEL_H_
