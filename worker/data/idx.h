// Reader for IDX files, the format of MNIST and Fashion-MNIST (gzip'd or
// raw; zlib reads both). Format: two zero bytes, an element-type byte (0x08
// = unsigned byte, the only type these datasets use), a dimension count,
// then that many big-endian uint32 dimensions, then the data.
//
// Files are opened under the roots a FileAccess allows (common/file_system.h:
// regular files only), and the size the header implies is checked against
// the file before the data is allocated: equal to the rest of a raw file,
// at most what a gzip stream of the file's size can inflate to. Errors never
// quote the file's bytes.
//
// Thread-safe: stateless functions.
#ifndef AQUEDUCT_WORKER_DATA_IDX_H_
#define AQUEDUCT_WORKER_DATA_IDX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/file_system.h"

namespace aqueduct {

struct IdxArray {
  std::vector<int64_t> dims;
  // Row-major elements (empty when only the header was read).
  std::vector<uint8_t> data;
};

// Reads `path` under files.data (`field`, e.g. "data.idx.train_images",
// names it in the errors of the roots: PERMISSION_DENIED outside them). With
// header_only, stops after the dimensions. Errors name the path and the
// offset (in the uncompressed stream) of the problem: NOT_FOUND for a
// missing file, INVALID_ARGUMENT for one that is not a regular file or has
// an element type other than unsigned byte, DATA_LOSS for a corrupt or
// truncated one (or one whose header describes more data than it holds,
// found before reading it), CANCELLED when *files.stop becomes true.
absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path,
                                     const FileAccess& files,
                                     absl::string_view field,
                                     bool header_only = false);

// Writes `array` as an uncompressed IDX file of unsigned bytes (for tests
// and tools).
absl::Status WriteIdxFile(const std::string& path, const IdxArray& array);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_DATA_IDX_H_
