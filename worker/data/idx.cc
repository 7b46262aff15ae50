#include "worker/data/idx.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status.h"

namespace aqueduct {

namespace {

constexpr uint8_t kUnsignedByte = 0x08;
// 64 GiB: larger than any IDX file this reader is for, small enough to
// reject a garbage header before allocating.
constexpr int64_t kMaxElements = int64_t{1} << 36;
// Deflate inflates at most 1032-fold: the most data a gzip stream of n bytes
// can hold is about 1032 n.
constexpr int64_t kMaxDeflateRatio = 1032;
// The data is read (and its vector grown) this much at a time, checking
// the stop flag in between.
constexpr int64_t kDataChunk = int64_t{16} << 20;

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

// Whether `file` starts with gzip's magic number.
bool IsGzip(const OpenedFile& file) {
  uint8_t magic[2];
  return pread(file.fd.get(), magic, 2, 0) == 2 && magic[0] == 0x1f &&
         magic[1] == 0x8b;
}

// Reads the opened `file` (gzip'd or raw; zlib reads both) with a 1 MiB
// buffer; the descriptor passes to zlib.
absl::StatusOr<GzHandle> OpenIdx(OpenedFile& file, const std::string& path) {
  const int fd = file.fd.release();
  GzHandle gz(gzdopen(fd, "rb"));
  if (gz == nullptr) {
    close(fd);
    return absl::UnavailableError(absl::StrCat(path, ": cannot read"));
  }
  gzbuffer(gz.get(), 1 << 20);
  return gz;
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
  // No message quotes the bytes: the file may be anything.
  if (magic[0] != 0 || magic[1] != 0) {
    return absl::DataLossError(absl::StrCat(
        path,
        ": not an IDX file (it does not start with the two zero bytes of the "
        "IDX magic number)"));
  }
  if (magic[2] != kUnsignedByte) {
    return absl::InvalidArgumentError(absl::StrCat(
        path,
        ": the IDX element type at offset 2 is not 0x08 (unsigned byte), the "
        "only one supported"));
  }
  const int rank = magic[3];
  if (rank < 1 || rank > 4) {
    return absl::DataLossError(absl::StrCat(
        path, ": the IDX dimension count at offset 3 is outside [1, 4]"));
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

absl::Status Truncated(const std::string& path, int64_t header,
                       int64_t elements, int64_t found) {
  return absl::DataLossError(absl::StrCat(
      path, ": truncated at offset ", header + found, ": the header promises ",
      elements, " data bytes from offset ", header, ", found ", found));
}

absl::Status TrailingData(const std::string& path, int64_t header,
                          int64_t elements) {
  return absl::DataLossError(
      absl::StrCat(path, ": unexpected data at offset ", header + elements,
                   " after the ", elements, " elements the header describes"));
}

// Whether a file of `size` bytes (gzip'd or not) can hold `elements` data
// bytes after the `header`: checked before the data is allocated.
absl::Status CheckDataFits(const std::string& path, bool gzip, int64_t size,
                           int64_t header, int64_t elements) {
  if (!gzip) {
    if (size - header < elements) {
      return Truncated(path, header, elements, size - header);
    }
    if (size - header > elements) return TrailingData(path, header, elements);
    return absl::OkStatus();
  }
  if ((header + elements - 1) / kMaxDeflateRatio + 1 > size) {
    return absl::DataLossError(
        absl::StrCat(path, ": the header describes ", elements,
                     " data bytes, more than its ", size,
                     " compressed bytes can hold (corrupt header?)"));
  }
  return absl::OkStatus();
}

// Reads exactly `elements` data bytes, from offset `header`, into `data`,
// in chunks (the vector grows with what was read, not with what the header
// claims); DATA_LOSS if there are fewer, or more after them; CANCELLED once
// *stop is true.
absl::Status ReadData(gzFile f, const std::string& path, int64_t header,
                      int64_t elements, const std::atomic<bool>* stop,
                      std::vector<uint8_t>* data) {
  int64_t done = 0;
  while (done < elements) {
    if (stop != nullptr && stop->load()) {
      return absl::CancelledError(
          absl::StrCat(path, ": reading stopped (the job was stopped)"));
    }
    const int64_t chunk = std::min(kDataChunk, elements - done);
    data->resize(static_cast<size_t>(done + chunk));
    ASSIGN_OR_RETURN(const size_t n,
                     ReadSome(f, path, header + done, data->data() + done,
                              static_cast<size_t>(chunk)));
    done += static_cast<int64_t>(n);
    if (static_cast<int64_t>(n) < chunk) {
      return Truncated(path, header, elements, done);
    }
  }
  uint8_t extra;
  auto more = ReadSome(f, path, header + elements, &extra, 1);
  if (!more.ok()) return more.status();
  if (*more != 0) return TrailingData(path, header, elements);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<IdxArray> ReadIdxFile(const std::string& path,
                                     const FileAccess& files,
                                     absl::string_view field,
                                     bool header_only) {
  ASSIGN_OR_RETURN(OpenedFile file, OpenRegularFile(path, files.data, field));
  const bool gzip = IsGzip(file);
  const int64_t size = file.size;
  ASSIGN_OR_RETURN(GzHandle gz, OpenIdx(file, path));
  ASSIGN_OR_RETURN(const int rank, ReadMagic(gz.get(), path));
  IdxArray array;
  ASSIGN_OR_RETURN(const int64_t elements,
                   ReadDims(gz.get(), path, rank, &array.dims));
  if (header_only) return array;
  const int64_t header = 4 + 4 * rank;
  RETURN_IF_ERROR(CheckDataFits(path, gzip, size, header, elements));
  RETURN_IF_ERROR(
      ReadData(gz.get(), path, header, elements, files.stop, &array.data));
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
