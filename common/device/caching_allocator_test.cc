#include "common/device/caching_allocator.h"

#include <cstdlib>
#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

// A raw allocator over malloc with a capacity, counting live bytes.
struct FakeRaw {
  size_t capacity = 1 << 24;
  size_t live = 0;
  std::set<void*> blocks;
  CachingAllocator Make(size_t cache_limit) {
    return CachingAllocator(
        "fake:0",
        [this](size_t bytes) -> absl::StatusOr<void*> {
          if (live + bytes > capacity) return nullptr;
          void* p = std::malloc(bytes);
          live += bytes;
          blocks.insert(p);
          return p;
        },
        [this](void* p, size_t bytes) {
          EXPECT_EQ(blocks.erase(p), 1u) << "double or foreign free";
          live -= bytes;
          std::free(p);
        },
        cache_limit);
  }
};

TEST(CachingAllocatorTest, RoundSizeClasses) {
  EXPECT_EQ(CachingAllocator::RoundSize(1), 512u);
  EXPECT_EQ(CachingAllocator::RoundSize(513), 1024u);
  EXPECT_EQ(CachingAllocator::RoundSize(1 << 20), size_t{1} << 20);
  // Above 1 MiB: eighths of the enclosing power of two.
  EXPECT_EQ(CachingAllocator::RoundSize((1 << 20) + 1), (size_t{5} << 18));
  EXPECT_EQ(CachingAllocator::RoundSize(3 << 20), (size_t{3} << 20));
  EXPECT_EQ(CachingAllocator::RoundSize((3 << 20) + 1), (size_t{7} << 19));
  for (size_t b : {size_t{100}, size_t{70000}, size_t{5000000}}) {
    EXPECT_GE(CachingAllocator::RoundSize(b), b);
    EXPECT_LE(CachingAllocator::RoundSize(b), b + b / 8 + 512);
  }
}

TEST(CachingAllocatorTest, SteadyStateDoesNoRawAllocation) {
  FakeRaw raw;
  CachingAllocator alloc = raw.Make(1 << 22);
  for (int step = 0; step < 10; ++step) {
    auto a = alloc.Allocate(4000);
    auto b = alloc.Allocate(100000);
    ASSERT_TRUE(a.ok() && b.ok());
    alloc.Free(*a, 4000);
    alloc.Free(*b, 100000);
  }
  const auto s = alloc.stats();
  EXPECT_EQ(s.raw_allocs, 2);
  EXPECT_EQ(s.hits, 18);
  EXPECT_EQ(s.bytes_in_use, 0);
  EXPECT_GT(s.bytes_cached, 0);
  alloc.EmptyCache();
  EXPECT_EQ(raw.live, 0u);
}

// A request takes the most recently freed block of its class, the one
// likeliest to be in cache.
TEST(CachingAllocatorTest, ReusesTheMostRecentlyFreedBlock) {
  FakeRaw raw;
  CachingAllocator alloc = raw.Make(1 << 22);
  std::vector<void*> blocks;
  for (int i = 0; i < 3; ++i) blocks.push_back(*alloc.Allocate(70000));
  alloc.Free(blocks[0], 70000);
  alloc.Free(blocks[2], 70000);
  alloc.Free(blocks[1], 70000);
  EXPECT_EQ(*alloc.Allocate(70000), blocks[1]);
  EXPECT_EQ(*alloc.Allocate(70000), blocks[2]);
  alloc.Free(blocks[1], 70000);
  EXPECT_EQ(*alloc.Allocate(70000), blocks[1]);
  EXPECT_EQ(*alloc.Allocate(70000), blocks[0]);
  for (void* b : blocks) alloc.Free(b, 70000);
  EXPECT_EQ(alloc.stats().raw_allocs, 3);
}

TEST(CachingAllocatorTest, CacheLimitIsRespected) {
  FakeRaw raw;
  CachingAllocator alloc = raw.Make(1024);
  auto a = alloc.Allocate(512);
  auto b = alloc.Allocate(1024);
  auto c = alloc.Allocate(512);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  alloc.Free(*a, 512);
  alloc.Free(*b, 1024);  // would exceed the limit: returned to raw
  alloc.Free(*c, 512);
  EXPECT_LE(alloc.stats().bytes_cached, 1024);
  EXPECT_EQ(raw.live, static_cast<size_t>(alloc.stats().bytes_cached));
}

TEST(CachingAllocatorTest, OutOfMemoryReleasesCacheThenFailsClearly) {
  FakeRaw raw;
  raw.capacity = 4 << 20;
  CachingAllocator alloc = raw.Make(size_t{1} << 30);
  auto a = alloc.Allocate(3 << 20);
  ASSERT_TRUE(a.ok());
  alloc.Free(*a, 3 << 20);  // cached: 3 MiB of the 4 MiB capacity
  // A different size class does not fit beside the cached block, so the
  // allocator must release the cache and retry.
  auto b = alloc.Allocate(2 << 20);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(alloc.stats().bytes_cached, 0);
  auto c = alloc.Allocate(3 << 20);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("fake:0"), absl::string_view::npos);
  EXPECT_NE(c.status().message().find("3145728 bytes"),
            absl::string_view::npos);
  alloc.Free(*b, 2 << 20);
}

}  // namespace
}  // namespace aqueduct
