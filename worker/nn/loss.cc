#include "worker/nn/loss.h"

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace aqueduct {

absl::StatusOr<LossOutput> SoftmaxCrossEntropy(Device& device,
                                               const Tensor& logits,
                                               const Tensor& labels,
                                               float grad_scale) {
  // Logits [batch, ..., classes] and labels [batch, ...]: one row per label.
  const Shape& ls = logits.shape();
  bool ok = ls.rank() >= 2 && labels.shape().rank() == ls.rank() - 1 &&
            labels.dtype() == DType::kI32 && logits.dtype() == DType::kF32;
  for (int i = 0; ok && i + 1 < ls.rank(); ++i) {
    ok = labels.shape()[i] == ls[i];
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "softmax cross-entropy needs F32 logits [batch, ..., classes] and I32 "
        "labels [batch, ...]; got logits ",
        ls.ToString(), " ", DTypeName(logits.dtype()), " and labels ",
        labels.shape().ToString(), " ", DTypeName(labels.dtype())));
  }
  const int64_t classes = ls[ls.rank() - 1];
  const int64_t rows = labels.numel();
  LossOutput out;
  ASSIGN_OR_RETURN(out.losses, device.Allocate(Shape({rows}), DType::kF32));
  ASSIGN_OR_RETURN(out.dlogits, device.Allocate(logits.shape(), DType::kF32));
  device.SoftmaxCrossEntropy(logits.f32(), labels.i32(), rows, classes,
                             grad_scale, out.losses.f32(), out.dlogits.f32());
  return out;
}

}  // namespace aqueduct
