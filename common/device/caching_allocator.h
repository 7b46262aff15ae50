// A caching allocator over a raw allocator (cudaMalloc/cudaFree on a GPU), so
// that steady-state training does no raw allocation per step.
//
// Requests are rounded up to a size class (multiples of 512 bytes up to 1 MiB,
// then multiples of 1/8 of the enclosing power of two) and freed blocks stay
// in a per-class free list, up to `cache_limit_bytes`; a request takes the
// most recently freed block of its class (the likeliest to be in cache).
// When the raw allocator fails, the cache is released and the allocation
// retried once; a second failure is RESOURCE_EXHAUSTED naming the request
// and the bytes in use.
//
// Device-agnostic (no CUDA headers) so that it is tested on every machine.
// Thread-safe: every method takes an internal mutex (raw calls happen outside
// it only for frees beyond the cache limit).
#ifndef AQUEDUCT_COMMON_DEVICE_CACHING_ALLOCATOR_H_
#define AQUEDUCT_COMMON_DEVICE_CACHING_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace aqueduct {

class CachingAllocator {
 public:
  // raw_alloc returns null (or an error) when out of memory.
  using RawAlloc = std::function<absl::StatusOr<void*>(size_t bytes)>;
  using RawFree = std::function<void(void* data, size_t bytes)>;

  struct Stats {
    int64_t raw_allocs = 0;  // calls to raw_alloc that succeeded
    int64_t raw_frees = 0;
    int64_t hits = 0;  // requests served from the cache
    int64_t bytes_in_use = 0;
    int64_t bytes_cached = 0;
    int64_t peak_bytes_in_use = 0;
  };

  CachingAllocator(std::string device_name, RawAlloc raw_alloc,
                   RawFree raw_free, size_t cache_limit_bytes);
  // Releases every cached block; blocks still in use are the owner's bug and
  // are reported (not freed: the device may still be using them).
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  absl::StatusOr<void*> Allocate(size_t bytes);
  // `bytes` is the size passed to Allocate.
  void Free(void* data, size_t bytes);
  // Returns every cached block to the raw allocator.
  void EmptyCache();
  Stats stats() const;

  // The size class a request of `bytes` is served from (exposed for tests).
  static size_t RoundSize(size_t bytes);

 private:
  void EmptyCacheLocked(std::vector<std::pair<void*, size_t>>* to_free)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string device_name_;
  const RawAlloc raw_alloc_;
  const RawFree raw_free_;
  const size_t cache_limit_bytes_;
  mutable absl::Mutex mu_;
  std::multimap<size_t, void*> free_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace aqueduct

#endif  // AQUEDUCT_COMMON_DEVICE_CACHING_ALLOCATOR_H_
