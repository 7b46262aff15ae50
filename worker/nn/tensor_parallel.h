// The tensor-parallel group a layer's passes reach (PassContext.tensor),
// over a ProcessGroup of the data plane: each sum ends by its own deadline
// (now + `timeout`), and on a device whose memory the host cannot address
// the tensor is staged through host memory.
//
// Thread-safety: as TensorParallelGroup: one pass at a time.
#ifndef AQUEDUCT_WORKER_NN_TENSOR_PARALLEL_H_
#define AQUEDUCT_WORKER_NN_TENSOR_PARALLEL_H_

#include <vector>

#include "absl/time/time.h"
#include "common/comm/process_group.h"
#include "worker/nn/layer.h"

namespace aqueduct {

class ProcessGroupTensorParallel final : public TensorParallelGroup {
 public:
  // `group` is not owned and must outlive this.
  ProcessGroupTensorParallel(ProcessGroup* group, absl::Duration timeout)
      : group_(group), timeout_(timeout) {}

  int rank() const override { return group_->rank(); }
  int size() const override { return group_->size(); }
  absl::Status AllReduce(Device& device, const Tensor& t) override;

 private:
  ProcessGroup* group_;
  absl::Duration timeout_;
  std::vector<float> staging_;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_NN_TENSOR_PARALLEL_H_
