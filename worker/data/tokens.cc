#include "worker/data/tokens.h"

#include <sys/mman.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace aqueduct {

namespace {

// The first id of `view` at or above `vocab`, or -1.
int64_t FirstOutOfRange(const TokenView& view, int64_t vocab) {
  for (int64_t i = 0; i < view.count; ++i) {
    if (view[i] < 0 || view[i] >= vocab) return i;
  }
  return -1;
}

}  // namespace

int TokenWidth(absl::string_view dtype) {
  if (dtype == "uint16") return 2;
  if (dtype == "uint32") return 4;
  return 0;
}

absl::StatusOr<TokenView> MapTokenFile(const std::string& path, int width,
                                       int64_t vocab, const FileAccess& files,
                                       absl::string_view field) {
  ASSIGN_OR_RETURN(const OpenedFile file,
                   OpenRegularFile(path, files.data, field));
  const std::string where = absl::StrCat(field, ": '", path, "'");
  if (file.size == 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is empty"));
  }
  if (file.size % width != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " holds ", file.size, " bytes, not a multiple of ",
                     width, " (a token file of ", width * 8, "-bit ids?)"));
  }
  void* addr = mmap(nullptr, static_cast<size_t>(file.size), PROT_READ,
                    MAP_PRIVATE, file.fd.get(), 0);
  if (addr == MAP_FAILED) {
    return absl::UnavailableError(
        absl::StrCat(where, " cannot be mapped: ", std::strerror(errno)));
  }
  const size_t bytes = static_cast<size_t>(file.size);
  TokenView view;
  view.owner = std::shared_ptr<const void>(
      addr, [bytes](const void* p) { munmap(const_cast<void*>(p), bytes); });
  view.data = static_cast<const uint8_t*>(addr);
  view.width = width;
  view.count = file.size / width;
  madvise(addr, bytes, MADV_SEQUENTIAL);
  const int64_t bad = FirstOutOfRange(view, vocab);
  madvise(addr, bytes, MADV_RANDOM);
  if (bad >= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": token ", bad, " is id ", view[bad],
        ", outside the vocabulary [0, ", vocab, ") (data.text.vocab_size)"));
  }
  return view;
}

absl::Status WriteTokenFile(const std::string& path,
                            absl::Span<const int32_t> ids, int width) {
  const int64_t limit = width == 2 ? 65536 : (int64_t{1} << 31);
  std::string bytes(ids.size() * static_cast<size_t>(width), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= limit) {
      return absl::InvalidArgumentError(
          absl::StrCat("token ", i, " is id ", ids[i], ", which ", width * 8,
                       "-bit ids cannot hold"));
    }
    const uint32_t v = static_cast<uint32_t>(ids[i]);
    for (int b = 0; b < width; ++b) {
      bytes[i * width + b] = static_cast<char>((v >> (8 * b)) & 0xFF);
    }
  }
  return WriteFileAtomically(DefaultFileSystem(), path, bytes);
}

}  // namespace aqueduct
