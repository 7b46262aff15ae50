#include "worker/nn/tensor_parallel.h"

#include "common/status.h"

namespace aqueduct {

absl::Status ProcessGroupTensorParallel::AllReduce(Device& device,
                                                   const Tensor& t) {
  const absl::Time deadline = absl::Now() + timeout_;
  const size_t n = static_cast<size_t>(t.numel());
  if (device.kind() == DeviceKind::kCpu) {
    return group_->AllReduce(t.f32(), n, deadline);
  }
  staging_.resize(n);
  RETURN_IF_ERROR(device.CopyToHost(t, staging_.data()));
  RETURN_IF_ERROR(group_->AllReduce(staging_.data(), n, deadline));
  return device.CopyFromHost(staging_.data(), t);
}

}  // namespace aqueduct
