#include "pipeline/limits.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace aqueduct {

std::optional<int64_t> CheckedMul(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

int64_t SaturatingMul(int64_t a, int64_t b) {
  if (a <= 0 || b <= 0) return 0;
  return CheckedMul(a, b).value_or(kSaturated);
}

int64_t SaturatingAdd(int64_t a, int64_t b) {
  a = std::max<int64_t>(a, 0);
  b = std::max<int64_t>(b, 0);
  return CheckedAdd(a, b).value_or(kSaturated);
}

int64_t SaturatingProduct(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n = SaturatingMul(n, d);
  return n;
}

std::string FormatBytes(int64_t bytes) {
  if (bytes == kSaturated) return "more than 9.2 EB";
  if (bytes < 1000) return absl::StrCat(bytes, " B");
  static const char* const kUnits[] = {"kB", "MB", "GB", "TB", "PB", "EB"};
  double v = static_cast<double>(bytes) / 1000;
  int unit = 0;
  // Past 999.95 the value would print as "1000.0"; take the next unit.
  while (v >= 999.95 && unit < 5) {
    v /= 1000;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", v, kUnits[unit]);
}

absl::Status CheckInRange(absl::string_view field, int64_t value, int64_t lo,
                          int64_t hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, "=", value, " must be in [", lo, ", ", hi, "]"));
}

absl::Status CheckAtMost(absl::string_view field, int64_t value, int64_t hi) {
  if (value <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(field, "=", value, " must be at most ", hi));
}

absl::Status CheckFiniteInRange(absl::string_view field, double value,
                                double lo, double hi) {
  if (std::isfinite(value) && value >= lo && value <= hi) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      field, "=", value, " must be finite and in [", lo, ", ", hi, "]"));
}

MemoryLimit KnownOrDefault(const MemoryLimit& limit) {
  if (limit.bytes > 0) return limit;
  return {kDefaultMemoryBytes, "the limit for a worker of unknown memory"};
}

std::string Describe(const MemoryLimit& limit) {
  const MemoryLimit known = KnownOrDefault(limit);
  return absl::StrCat(known.what, " (", FormatBytes(known.bytes), ")");
}

int64_t HostMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 0;
  return SaturatingMul(pages, page);
}

}  // namespace aqueduct
