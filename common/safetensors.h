// The safetensors format: an 8-byte little-endian header length N, N bytes
// of JSON mapping each tensor name to {"dtype", "shape", "data_offsets":
// [begin, end]} (offsets relative to the end of the header; an optional
// "__metadata__" maps strings to strings), then the raw little-endian data.
// This is how weights travel to and from PyTorch (safetensors.torch).
//
// Thread-safe: stateless functions over host memory.
#ifndef AQUEDUCT_COMMON_SAFETENSORS_H_
#define AQUEDUCT_COMMON_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor.h"

namespace aqueduct {

struct HostTensor {
  DType dtype = DType::kF32;
  Shape shape;
  // Raw little-endian bytes, numel * DTypeSize(dtype).
  std::vector<uint8_t> data;
};

struct SafetensorsFile {
  // By name; written in name order.
  std::map<std::string, HostTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Serialises to bytes. INVALID_ARGUMENT if a tensor's data size does not
// match its dtype and shape.
absl::StatusOr<std::string> SerializeSafetensors(const SafetensorsFile& file);

// Parses bytes. INVALID_ARGUMENT naming the problem (and the tensor) for a
// header larger than the file, bad JSON, an unknown dtype, offsets that are
// out of range, overlap or leave gaps, or a size that does not match the
// shape.
absl::StatusOr<SafetensorsFile> ParseSafetensors(const std::string& bytes);

// File wrappers; errors carry the path. Writing goes to a temporary file
// renamed into place, so a crash never leaves a half-written file.
absl::StatusOr<SafetensorsFile> ReadSafetensorsFile(const std::string& path);
absl::Status WriteSafetensorsFile(const std::string& path,
                                  const SafetensorsFile& file);

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_SAFETENSORS_H_
