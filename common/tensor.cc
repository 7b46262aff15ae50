#include "common/tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/check.h"
#include "common/device/device.h"

namespace aqueduct {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kI32:
      return 4;
    case DType::kBF16:
    case DType::kF16:
      return 2;
  }
  return 0;
}

absl::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kI32:
      return "I32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
  }
  return "?";
}

absl::StatusOr<DType> DTypeFromName(absl::string_view name) {
  for (DType d : {DType::kF32, DType::kI32, DType::kBF16, DType::kF16}) {
    if (DTypeName(d) == name) return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", name, "' (known: F32, I32, BF16, F16)"));
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

Shape Shape::WithLeading(int64_t n) const {
  std::vector<int64_t> dims;
  dims.reserve(dims_.size() + 1);
  dims.push_back(n);
  dims.insert(dims.end(), dims_.begin(), dims_.end());
  return Shape(std::move(dims));
}

Shape Shape::WithoutLeading() const {
  if (dims_.empty()) return Shape();
  return Shape(std::vector<int64_t>(dims_.begin() + 1, dims_.end()));
}

std::string Shape::ToString() const {
  return absl::StrCat("[", absl::StrJoin(dims_, ", "), "]");
}

Buffer::~Buffer() {
  if (device_ != nullptr && data_ != nullptr) device_->FreeRaw(data_, bytes_);
}

Tensor::Tensor(std::shared_ptr<Buffer> buffer, Shape shape, DType dtype,
               size_t byte_offset)
    : buffer_(std::move(buffer)),
      shape_(std::move(shape)),
      dtype_(dtype),
      byte_offset_(byte_offset) {}

void* Tensor::raw() const {
  if (buffer_ == nullptr) return nullptr;
  return static_cast<char*>(buffer_->data()) + byte_offset_;
}

float* Tensor::f32() const {
  AQ_CHECK(dtype_ == DType::kF32);
  return static_cast<float*>(raw());
}

int32_t* Tensor::i32() const {
  AQ_CHECK(dtype_ == DType::kI32);
  return static_cast<int32_t*>(raw());
}

Tensor Tensor::Reshape(Shape shape) const {
  AQ_CHECK(shape.numel() == numel());
  return Tensor(buffer_, std::move(shape), dtype_, byte_offset_);
}

Tensor Tensor::Rows(int64_t begin, int64_t end) const {
  AQ_CHECK(shape_.rank() >= 1 && begin >= 0 && begin <= end &&
           end <= shape_[0]);
  std::vector<int64_t> dims = shape_.dims();
  const int64_t row_elems = dims[0] == 0 ? 0 : numel() / dims[0];
  dims[0] = end - begin;
  return Tensor(buffer_, Shape(std::move(dims)), dtype_,
                byte_offset_ + begin * row_elems * DTypeSize(dtype_));
}

}  // namespace aqueduct
