// Reader for IDX files, the format of MNIST and Fashion-MNIST (gzip'd or
// raw; zlib reads both). Format: two zero bytes, an element-type byte (0x08
// = unsigned byte, the only type these datasets use), a dimension count,
// then that many big-endian uint32 dimensions, then the data.
//
// Thread-safe: stateless functions.
#ifndef AQUEDUCT_WORKER_DATA_IDX_H_
#define AQUEDUCT_WORKER_DATA_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace aqueduct {

struct IdxArray {
  std::vector<int64_t> dims;
  // Row-major elements (empty when only the header was read).
  std::vector<uint8_t> data;
};

// Reads `path`. With header_only, stops after the dimensions. Errors name the
// path and the offset (in the uncompressed stream) of the problem: NOT_FOUND
// for a missing file, DATA_LOSS for a corrupt or truncated one,
// INVALID_ARGUMENT for an element type other than unsigned byte.
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path,
                                     bool header_only = false);

// Writes `array` as an uncompressed IDX file of unsigned bytes (for tests
// and tools).
absl::Status WriteIdxFile(const std::string& path, const IdxArray& array);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_DATA_IDX_H_
