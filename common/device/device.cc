#include "common/device/device.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace aqueduct {

absl::StatusOr<Tensor> Device::Allocate(const Shape& shape, DType dtype) {
  for (int64_t d : shape.dims()) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot allocate a tensor of shape ", shape.ToString()));
    }
  }
  const size_t bytes = static_cast<size_t>(shape.numel()) * DTypeSize(dtype);
  ASSIGN_OR_RETURN(void* data, AllocateRaw(bytes));
  return Tensor(std::make_shared<Buffer>(this, data, bytes), shape, dtype);
}

absl::StatusOr<Tensor> Device::Zeros(const Shape& shape, DType dtype) {
  ASSIGN_OR_RETURN(Tensor t, Allocate(shape, dtype));
  if (dtype == DType::kF32) {
    Fill(t.f32(), t.numel(), 0.0f);
  } else {
    std::vector<char> zeros(t.nbytes(), 0);
    RETURN_IF_ERROR(CopyFromHost(zeros.data(), t));
  }
  return t;
}

}  // namespace aqueduct
