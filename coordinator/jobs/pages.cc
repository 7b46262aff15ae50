#include "coordinator/jobs/pages.h"

#include <algorithm>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace aqueduct {

namespace {

// Tokens carry a version so that their form can change.
constexpr absl::string_view kTokenVersion = "p1";
// Longer tokens are refused before decoding (ours are about 50 bytes).
constexpr size_t kMaxTokenBytes = 256;

absl::Status BadToken(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(field, " ", why,
                   "; pass the next_page_token of the previous page, or "
                   "\"\" for the first"));
}

}  // namespace

absl::StatusOr<int> PageSize(int64_t requested, int default_size, int max_size,
                             absl::string_view field) {
  if (requested < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, "=", requested, " must not be negative"));
  }
  if (requested == 0) return default_size;
  return static_cast<int>(std::min<int64_t>(requested, max_size));
}

std::string EncodePageToken(uint64_t run, int64_t position) {
  return absl::WebSafeBase64Escape(
      absl::StrCat(kTokenVersion, ":", absl::Hex(run), ":", position));
}

absl::StatusOr<int64_t> DecodePageToken(absl::string_view token, uint64_t run,
                                        absl::string_view field) {
  if (token.empty()) return -1;
  if (token.size() > kMaxTokenBytes) return BadToken(field, "is too long");
  std::string text;
  if (!absl::WebSafeBase64Unescape(token, &text)) {
    return BadToken(field, "is not a page token");
  }
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ':');
  uint64_t token_run = 0;
  int64_t position = 0;
  if (parts.size() != 3 || parts[0] != kTokenVersion ||
      !absl::SimpleHexAtoi(parts[1], &token_run) ||
      !absl::SimpleAtoi(parts[2], &position) || position < 0) {
    return BadToken(field, "is not a page token");
  }
  if (token_run != run) {
    return BadToken(field,
                    "was issued before the coordinator restarted (list "
                    "again from the first page)");
  }
  return position;
}

}  // namespace aqueduct
