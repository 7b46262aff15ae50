// The safetensors target: a weights file as a worker reads it
// (init_weights, a checkpoint, an upload to the coordinator's model store),
// then what must hold of what was accepted: each tensor holds the bytes its
// shape says, and it serialises and parses back to the same tensors and
// metadata.
#include <string>

#include "common/check.h"
#include "common/safetensors.h"
#include "common/status.h"
#include "tests/fuzz/entries.h"

namespace aqueduct {
namespace fuzz {

namespace {

// A tensor's bytes as its dimensions say, multiplied without overflow
// (unlike Shape::numel, which trusts the parser to have bounded them):
// what it holds must be exactly that, even in a build without UBSan.
void CheckSize(const HostTensor& t) {
  uint64_t bytes = DTypeSize(t.dtype);
  for (int d = 0; d < t.shape.rank(); ++d) {
    AQ_CHECK(t.shape[d] >= 0);
    AQ_CHECK(!__builtin_mul_overflow(bytes, static_cast<uint64_t>(t.shape[d]),
                                     &bytes));
  }
  AQ_CHECK(bytes == t.data.size());
}

}  // namespace

absl::Status SafetensorsEntry(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  ASSIGN_OR_RETURN(const SafetensorsFile file, ParseSafetensors(bytes));
  for (const auto& [name, t] : file.tensors) CheckSize(t);
  absl::StatusOr<std::string> written = SerializeSafetensors(file);
  AQ_CHECK(written.ok());
  absl::StatusOr<SafetensorsFile> back = ParseSafetensors(*written);
  AQ_CHECK(back.ok());
  AQ_CHECK(back->metadata == file.metadata);
  AQ_CHECK(back->tensors.size() == file.tensors.size());
  for (const auto& [name, t] : file.tensors) {
    auto it = back->tensors.find(name);
    AQ_CHECK(it != back->tensors.end());
    AQ_CHECK(it->second.dtype == t.dtype);
    AQ_CHECK(it->second.shape == t.shape);
    AQ_CHECK(it->second.data == t.data);
  }
  return absl::OkStatus();
}

}  // namespace fuzz
}  // namespace aqueduct
