// Token files (TextData.token_dtype, nanoGPT's train.bin form): token ids
// as raw little-endian uint16 or uint32, memory-mapped read-only, so that a
// corpus tokenized once (`aq tokenize`) starts a job without being read or
// tokenized again. A TokenView is the ids of a split, in a mapping (or any
// buffer) it keeps alive.
//
// Thread-safety: a TokenView is immutable and may be shared; the mapping
// lives until its last view is gone.
#ifndef AQUEDUCT_WORKER_DATA_TOKENS_H_
#define AQUEDUCT_WORKER_DATA_TOKENS_H_

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/file_system.h"

namespace aqueduct {

struct TokenView {
  std::shared_ptr<const void> owner;  // The mapping.
  const uint8_t* data = nullptr;
  int width = 0;  // Bytes per id: 2 or 4.
  int64_t count = 0;

  bool empty() const { return count == 0; }
  int32_t operator[](int64_t i) const {
    const uint8_t* p = data + i * width;
    if (width == 2) return static_cast<int32_t>(p[0] | (p[1] << 8));
    uint32_t v;
    std::memcpy(&v, p, sizeof(v));  // Little-endian hosts only (x86, arm).
    return static_cast<int32_t>(v);
  }
  // Ids [begin, begin + n) of this view.
  TokenView Sub(int64_t begin, int64_t n) const {
    TokenView v = *this;
    v.data = data + begin * width;
    v.count = n;
    return v;
  }
};

// The bytes per id of a TextData.token_dtype: 2 for "uint16", 4 for
// "uint32", 0 for anything else.
int TokenWidth(absl::string_view dtype);

// Maps the token file `path` (spec field `field`, opened under files.data as
// OpenRegularFile does) as ids of `width` bytes, each checked to be below
// `vocab`. Errors name the field and the path: OpenRegularFile's;
// INVALID_ARGUMENT for an empty file, a size not a multiple of the width,
// or an id at or above the vocabulary (its position and value);
// UNAVAILABLE when mmap fails.
absl::StatusOr<TokenView> MapTokenFile(const std::string& path, int width,
                                       int64_t vocab, const FileAccess& files,
                                       absl::string_view field);

// Writes `ids` to `path` as a token file of `width` bytes per id (the file
// written whole, then renamed into place). INVALID_ARGUMENT for an id that
// does not fit the width.
absl::Status WriteTokenFile(const std::string& path,
                            absl::Span<const int32_t> ids, int width);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_DATA_TOKENS_H_
