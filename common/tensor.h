// Tensors: a shape, a dtype and a view into a device buffer.
//
// A Tensor is a cheap handle (like torch.Tensor): copies share the buffer,
// and constness of the handle does not make the data read-only. Buffers are
// owned by shared_ptr and given back to their Device (which may cache them)
// when the last handle goes. Device-agnostic: data() is a device pointer,
// host-dereferenceable only on the CPU device. Thread-compatible: distinct
// tensors may be used from distinct threads; a buffer written by one thread
// must not be read by another without synchronisation.
#ifndef AQUEDUCT_COMMON_TENSOR_H_
#define AQUEDUCT_COMMON_TENSOR_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace aqueduct {

class Device;

// Element types. Kernels implement kF32 (and kI32 for labels and indices)
// today; kBF16 and kF16 are reserved for mixed-precision storage.
enum class DType : uint8_t { kF32 = 0, kI32 = 1, kBF16 = 2, kF16 = 3 };

size_t DTypeSize(DType dtype);
// The safetensors spelling: "F32", "I32", "BF16", "F16".
absl::string_view DTypeName(DType dtype);
absl::StatusOr<DType> DTypeFromName(absl::string_view name);

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  int64_t operator[](int i) const { return dims_[i]; }
  int64_t dim(int i) const { return dims_[i]; }
  const std::vector<int64_t>& dims() const { return dims_; }
  // Product of the dimensions; 1 for rank 0.
  int64_t numel() const;
  // The shape with `n` prepended (e.g. a batch dimension).
  Shape WithLeading(int64_t n) const;
  // The shape without its first dimension.
  Shape WithoutLeading() const;
  // "[2, 3, 4]".
  std::string ToString() const;

  bool operator==(const Shape& other) const { return dims_ == other.dims_; }
  bool operator!=(const Shape& other) const { return dims_ != other.dims_; }

 private:
  std::vector<int64_t> dims_;
};

// A block of device memory. Returned to `device` on destruction.
class Buffer {
 public:
  Buffer(Device* device, void* data, size_t bytes)
      : device_(device), data_(data), bytes_(bytes) {}
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  Device* device() const { return device_; }
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  Device* device_;
  void* data_;
  size_t bytes_;
};

class Tensor {
 public:
  // An undefined tensor (defined() is false).
  Tensor() = default;
  // A view of `buffer` starting `byte_offset` bytes in. The caller checks
  // that the view fits (Device::Allocate does).
  Tensor(std::shared_ptr<Buffer> buffer, Shape shape, DType dtype,
         size_t byte_offset = 0);

  bool defined() const { return buffer_ != nullptr; }
  const Shape& shape() const { return shape_; }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return shape_.numel(); }
  size_t nbytes() const { return numel() * DTypeSize(dtype_); }
  Device* device() const { return buffer_ ? buffer_->device() : nullptr; }
  const std::shared_ptr<Buffer>& buffer() const { return buffer_; }

  void* raw() const;
  // Typed pointers; the dtype must match (checked, a broken invariant).
  float* f32() const;
  int32_t* i32() const;

  // A view with the same elements in another shape (numel must match).
  Tensor Reshape(Shape shape) const;
  // A view of rows [begin, end) along dimension 0.
  Tensor Rows(int64_t begin, int64_t end) const;

 private:
  std::shared_ptr<Buffer> buffer_;
  Shape shape_;
  DType dtype_ = DType::kF32;
  size_t byte_offset_ = 0;
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_TENSOR_H_
