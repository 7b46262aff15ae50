#include "common/device/caching_allocator.h"

#include <algorithm>
#include <iterator>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/logging.h"

namespace aqueduct {

namespace {
constexpr size_t kMinBlock = 512;
constexpr size_t kSmallLimit = size_t{1} << 20;
}  // namespace

CachingAllocator::CachingAllocator(std::string device_name, RawAlloc raw_alloc,
                                   RawFree raw_free, size_t cache_limit_bytes)
    : device_name_(std::move(device_name)),
      raw_alloc_(std::move(raw_alloc)),
      raw_free_(std::move(raw_free)),
      cache_limit_bytes_(cache_limit_bytes) {}

CachingAllocator::~CachingAllocator() {
  EmptyCache();
  const Stats s = stats();
  if (s.bytes_in_use != 0) {
    AQ_LOG_WARN("{}: allocator destroyed with {} bytes still in use",
                device_name_, s.bytes_in_use);
  }
}

size_t CachingAllocator::RoundSize(size_t bytes) {
  if (bytes <= kMinBlock) return kMinBlock;
  if (bytes <= kSmallLimit)
    return (bytes + kMinBlock - 1) / kMinBlock * kMinBlock;
  // Round to an eighth of the enclosing power of two: at most 12.5% slack.
  size_t pow2 = kSmallLimit;
  while (pow2 < bytes) pow2 <<= 1;
  const size_t step = pow2 / 8;
  return (bytes + step - 1) / step * step;
}

absl::StatusOr<void*> CachingAllocator::Allocate(size_t bytes) {
  const size_t size = RoundSize(bytes);
  {
    absl::MutexLock lock(&mu_);
    // The most recently freed block of the class (equal keys keep their
    // insertion order): it is the likeliest to be in cache, which matters
    // for buffers that rotate every step (frames, activations, weight
    // versions). The oldest block first measurably slowed 1 MiB transfers.
    auto [first, last] = free_.equal_range(size);
    if (first != last) {
      auto it = std::prev(last);
      void* data = it->second;
      free_.erase(it);
      stats_.hits++;
      stats_.bytes_cached -= static_cast<int64_t>(size);
      stats_.bytes_in_use += static_cast<int64_t>(size);
      stats_.peak_bytes_in_use =
          std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
      return data;
    }
  }
  absl::StatusOr<void*> data = raw_alloc_(size);
  if (!data.ok() || *data == nullptr) {
    // Out of memory (or fragmented by the cache): give the cache back, retry.
    EmptyCache();
    data = raw_alloc_(size);
  }
  absl::MutexLock lock(&mu_);
  if (!data.ok() || *data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        device_name_, ": out of memory allocating ", bytes, " bytes (",
        stats_.bytes_in_use, " bytes in use)",
        data.ok() ? "" : absl::StrCat(": ", data.status().message())));
  }
  stats_.raw_allocs++;
  stats_.bytes_in_use += static_cast<int64_t>(size);
  stats_.peak_bytes_in_use =
      std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return *data;
}

void CachingAllocator::Free(void* data, size_t bytes) {
  if (data == nullptr) return;
  const size_t size = RoundSize(bytes);
  {
    absl::MutexLock lock(&mu_);
    stats_.bytes_in_use -= static_cast<int64_t>(size);
    if (static_cast<size_t>(stats_.bytes_cached) + size <= cache_limit_bytes_) {
      free_.emplace(size, data);
      stats_.bytes_cached += static_cast<int64_t>(size);
      return;
    }
    stats_.raw_frees++;
  }
  raw_free_(data, size);
}

void CachingAllocator::EmptyCacheLocked(
    std::vector<std::pair<void*, size_t>>* to_free) {
  for (const auto& [size, data] : free_) to_free->emplace_back(data, size);
  stats_.raw_frees += static_cast<int64_t>(free_.size());
  stats_.bytes_cached = 0;
  free_.clear();
}

void CachingAllocator::EmptyCache() {
  std::vector<std::pair<void*, size_t>> to_free;
  {
    absl::MutexLock lock(&mu_);
    EmptyCacheLocked(&to_free);
  }
  for (const auto& [data, size] : to_free) raw_free_(data, size);
}

CachingAllocator::Stats CachingAllocator::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace aqueduct
