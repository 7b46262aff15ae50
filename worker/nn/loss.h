// Softmax cross-entropy loss over logits [batch, classes] and int32 labels
// [batch], or, for sequences, logits [batch, T, vocabulary] and labels
// [batch, T] (token-level: one row per label).
// Stateless and thread-safe; runs on the caller's device.
#ifndef AQUEDUCT_WORKER_NN_LOSS_H_
#define AQUEDUCT_WORKER_NN_LOSS_H_

#include "absl/status/statusor.h"
#include "common/device/device.h"

namespace aqueduct {

struct LossOutput {
  // Per-label losses [labels.numel()], on the device.
  Tensor losses;
  // d(sum of losses * grad_scale)/d logits, [batch, classes].
  Tensor dlogits;
};

// grad_scale is usually 1/labels (the mean loss); a microbatch of a larger
// minibatch uses 1/(the minibatch's labels). INVALID_ARGUMENT when shapes
// disagree. Labels must be in [0, classes): the data loader checks them against
// the model.
absl::StatusOr<LossOutput> SoftmaxCrossEntropy(Device& device,
                                               const Tensor& logits,
                                               const Tensor& labels,
                                               float grad_scale);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_NN_LOSS_H_
