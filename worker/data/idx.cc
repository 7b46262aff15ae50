#include "worker/data/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace aqueduct {

namespace {

constexpr uint8_t kUnsignedByte = 0x08;
// 64 GiB: larger than any IDX file this reader is for, small enough to
// reject a garbage header before allocating.
constexpr int64_t kMaxElements = int64_t{1} << 36;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzHandle = std::unique_ptr<gzFile_s, GzCloser>;

// Reads up to `n` bytes; returns how many were read, or an error naming the
// offset.
absl::StatusOr<size_t> ReadSome(gzFile f, const std::string& path,
                                int64_t offset, void* dst, size_t n) {
  size_t total = 0;
  while (total < n) {
    const unsigned chunk =
        static_cast<unsigned>(std::min<size_t>(n - total, 1u << 30));
    const int got = gzread(f, static_cast<char*>(dst) + total, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      return absl::DataLossError(absl::StrCat(
          path, ": corrupt compressed data near uncompressed offset ",
          offset + static_cast<int64_t>(total), ": ",
          errnum == Z_ERRNO ? std::strerror(errno) : msg));
    }
    if (got == 0) break;
    total += static_cast<size_t>(got);
  }
  // zlib reports a gzip stream cut short as Z_BUF_ERROR after a short read.
  if (total < n) {
    int errnum = 0;
    const char* msg = gzerror(f, &errnum);
    if (errnum != Z_OK && errnum != Z_BUF_ERROR) {
      return absl::DataLossError(absl::StrCat(
          path, ": corrupt compressed data near uncompressed offset ",
          offset + static_cast<int64_t>(total), ": ", msg));
    }
  }
  return total;
}

// Opens `path` (gzip'd or raw) for reading with a 1 MiB buffer.
absl::StatusOr<GzHandle> OpenIdx(const std::string& path) {
  GzHandle file(gzopen(path.c_str(), "rb"));
  if (file == nullptr) {
    const int err = errno;
    if (err == ENOENT) {
      return absl::NotFoundError(absl::StrCat(path, ": no such file"));
    }
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot open: ", std::strerror(err)));
  }
  gzbuffer(file.get(), 1 << 20);
  return file;
}

// Reads and checks the 4-byte magic number; returns the dimension count.
absl::StatusOr<int> ReadMagic(gzFile f, const std::string& path) {
  uint8_t magic[4];
  auto got = ReadSome(f, path, 0, magic, 4);
  if (!got.ok()) return got.status();
  if (*got < 4) {
    return absl::DataLossError(
        absl::StrCat(path, ": truncated at offset ", *got,
                     ": the 4-byte IDX magic number is incomplete"));
  }
  if (magic[0] != 0 || magic[1] != 0) {
    return absl::DataLossError(absl::StrFormat(
        "%s: bad IDX magic at offset 0: expected two zero bytes, found "
        "0x%02x%02x (not an IDX file?)",
        path, magic[0], magic[1]));
  }
  if (magic[2] != kUnsignedByte) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s: IDX element type 0x%02x at offset 2 is not supported (only 0x08, "
        "unsigned byte)",
        path, magic[2]));
  }
  const int rank = magic[3];
  if (rank < 1 || rank > 4) {
    return absl::DataLossError(absl::StrCat(path, ": IDX dimension count ",
                                            rank,
                                            " at offset 3 is outside [1, 4]"));
  }
  return rank;
}

// Reads the `rank` big-endian dimensions into `dims`; returns the number of
// elements they describe.
absl::StatusOr<int64_t> ReadDims(gzFile f, const std::string& path, int rank,
                                 std::vector<int64_t>* dims) {
  int64_t elements = 1;
  for (int i = 0; i < rank; ++i) {
    uint8_t be[4];
    const int64_t offset = 4 + 4 * i;
    auto n = ReadSome(f, path, offset, be, 4);
    if (!n.ok()) return n.status();
    if (*n < 4) {
      return absl::DataLossError(absl::StrCat(
          path, ": truncated at offset ", offset + static_cast<int64_t>(*n),
          ": dimension ", i, " of ", rank, " is incomplete"));
    }
    const int64_t dim = (int64_t{be[0]} << 24) | (int64_t{be[1]} << 16) |
                        (int64_t{be[2]} << 8) | int64_t{be[3]};
    if (dim == 0) {
      return absl::DataLossError(absl::StrCat(path, ": dimension ", i,
                                              " at offset ", offset, " is 0"));
    }
    elements *= dim;
    if (elements > kMaxElements) {
      return absl::DataLossError(
          absl::StrCat(path, ": dimensions at offset 4 describe more than ",
                       kMaxElements, " elements (corrupt header?)"));
    }
    dims->push_back(dim);
  }
  return elements;
}

// Reads exactly `elements` data bytes, from offset `header`, into `data`;
// DATA_LOSS if there are fewer, or more after them.
absl::Status ReadData(gzFile f, const std::string& path, int64_t header,
                      int64_t elements, std::vector<uint8_t>* data) {
  data->resize(static_cast<size_t>(elements));
  auto n = ReadSome(f, path, header, data->data(), data->size());
  if (!n.ok()) return n.status();
  if (static_cast<int64_t>(*n) < elements) {
    return absl::DataLossError(absl::StrCat(
        path, ": truncated at offset ", header + static_cast<int64_t>(*n),
        ": the header promises ", elements, " data bytes from offset ", header,
        ", found ", *n));
  }
  uint8_t extra;
  auto more = ReadSome(f, path, header + elements, &extra, 1);
  if (!more.ok()) return more.status();
  if (*more != 0) {
    return absl::DataLossError(absl::StrCat(
        path, ": unexpected data at offset ", header + elements, " after the ",
        elements, " elements the header describes"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path,
                                     bool header_only) {
  auto file = OpenIdx(path);
  if (!file.ok()) return file.status();
  auto rank = ReadMagic(file->get(), path);
  if (!rank.ok()) return rank.status();
  IdxArray array;
  auto elements = ReadDims(file->get(), path, *rank, &array.dims);
  if (!elements.ok()) return elements.status();
  if (header_only) return array;
  const int64_t header = 4 + 4 * *rank;
  absl::Status read =
      ReadData(file->get(), path, header, *elements, &array.data);
  if (!read.ok()) return read;
  return array;
}

absl::Status WriteIdxFile(const std::string& path, const IdxArray& array) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::UnavailableError(
        absl::StrCat(path, ": cannot create: ", std::strerror(errno)));
  }
  std::vector<uint8_t> header = {0, 0, kUnsignedByte,
                                 static_cast<uint8_t>(array.dims.size())};
  for (int64_t d : array.dims) {
    header.push_back(static_cast<uint8_t>(d >> 24));
    header.push_back(static_cast<uint8_t>(d >> 16));
    header.push_back(static_cast<uint8_t>(d >> 8));
    header.push_back(static_cast<uint8_t>(d));
  }
  const bool ok =
      std::fwrite(header.data(), 1, header.size(), f) == header.size() &&
      std::fwrite(array.data.data(), 1, array.data.size(), f) ==
          array.data.size();
  const bool closed = std::fclose(f) == 0;
  if (!ok || !closed) {
    return absl::UnavailableError(absl::StrCat(path, ": write failed"));
  }
  return absl::OkStatus();
}

}  // namespace aqueduct
