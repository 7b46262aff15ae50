#include "coordinator/kv_store.h"

#include <thread>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(KvStoreTest, SetGetWaitAdd) {
  KvStore store;
  ASSERT_TRUE(store.Set("job/1/rank0", "10.0.0.1:5000").ok());
  EXPECT_EQ(*store.Get("job/1/rank0", absl::Now()), "10.0.0.1:5000");
  // A waiting Get sees a later Set.
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_TRUE(store.Set("job/1/rank1", "x").ok());
  });
  auto v = store.Get("job/1/rank1", absl::Now() + absl::Seconds(5));
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "x");
  // A missing key times out by its deadline.
  const absl::Time start = absl::Now();
  auto missing = store.Get("job/1/never", start + absl::Milliseconds(100));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(missing.status().message(),
            "store key 'job/1/never' was not set in time");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(95));
  EXPECT_EQ(*store.Add("job/1/barrier", 1), 1);
  EXPECT_EQ(*store.Add("job/1/barrier", 2), 3);
  EXPECT_EQ(store.Add("job/1/rank0", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  store.DeletePrefix("job/1/");
  EXPECT_FALSE(store.Get("job/1/rank0", absl::Now()).ok());
}

TEST(KvStoreTest, Limits) {
  KvStore store;
  EXPECT_EQ(store.Set("", "v").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Set(std::string(2000, 'k'), "v").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      store.Set("k", std::string(KvStore::kMaxValueBytes + 1, 'v')).code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace aqueduct
