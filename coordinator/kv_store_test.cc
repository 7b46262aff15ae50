#include "coordinator/kv_store.h"

#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(KvStoreTest, SetGetWaitAdd) {
  KvStore store;
  ASSERT_TRUE(store.Set("jobs/j1/a0/rank0", "10.0.0.1:5000").ok());
  EXPECT_EQ(*store.Get("jobs/j1/a0/rank0", absl::Now()), "10.0.0.1:5000");
  // A waiting Get sees a later Set.
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(50));
    EXPECT_TRUE(store.Set("jobs/j1/a0/rank1", "x").ok());
  });
  auto v = store.Get("jobs/j1/a0/rank1", absl::Now() + absl::Seconds(5));
  setter.join();
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, "x");
  // A missing key times out by its deadline.
  const absl::Time start = absl::Now();
  auto missing = store.Get("jobs/j1/a0/never", start + absl::Milliseconds(100));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(missing.status().message(),
            "store key 'jobs/j1/a0/never' was not set in time");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(95));
  EXPECT_EQ(*store.Add("jobs/j1/a0/barrier", 1), 1);
  EXPECT_EQ(*store.Add("jobs/j1/a0/barrier", 2), 3);
  EXPECT_EQ(store.Add("jobs/j1/a0/rank0", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.keys_of_job("j1"), 3u);
  store.DeletePrefix("jobs/j1/");
  EXPECT_FALSE(store.Get("jobs/j1/a0/rank0", absl::Now()).ok());
  EXPECT_EQ(store.keys(), 0u);
  EXPECT_EQ(store.bytes(), 0u);
  EXPECT_EQ(store.keys_of_job("j1"), 0u);
}

TEST(KvStoreTest, KeysMustBeScopedToAJobAttempt) {
  for (const char* key :
       {"", "k", "job/1/x", "jobs/", "jobs/j1", "jobs/j1/", "jobs/j1/x/y",
        "jobs/j1/a/y", "jobs/j1/a-1/y", "jobs/j1/a0", "jobs/j1/a0/",
        "jobs//a0/y", "jobs/j 1/a0/y", "jobs/j1/a0/sp ace",
        "jobs/j1/a0/new\nline", "jobs/j1/a99999999999/y"}) {
    const absl::Status s = KvStore().Set(key, "v");
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << key;
  }
  const absl::StatusOr<StoreKey> ok =
      KvStore::ParseKey("jobs/job-6a1f-3-0123456789abcdef/a12/gloo//rank_0");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->job_id, "job-6a1f-3-0123456789abcdef");
  EXPECT_EQ(ok->attempt, 12);
  // Errors quote at most 64 bytes of a key.
  const absl::Status huge = KvStore().Set(std::string(100000, 'k'), "v");
  EXPECT_EQ(huge.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(huge.message().size(), 200u) << huge.message();
  EXPECT_NE(huge.message().find("the limit is 512"), std::string::npos);
  EXPECT_EQ(KvStore().Get("k", absl::Now()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(KvStoreTest, ValueAndKeyCountLimits) {
  KvStoreOptions o;
  o.max_keys_per_job = 3;
  o.max_value_bytes = 10;
  KvStore store(o);
  const absl::Status big = store.Set("jobs/j1/a0/k", std::string(11, 'v'));
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(big.message(),
            "store value for 'jobs/j1/a0/k' has 11 bytes; the limit is 10 "
            "(--max_store_value_bytes)");
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(store.Set(absl::StrCat("jobs/j1/a0/k", i), "v").ok());
  }
  const absl::Status full = store.Set("jobs/j1/a1/k", "v");
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(full.message(),
            "job j1 holds 3 store keys, the most a job may "
            "(--max_store_keys_per_job=3)");
  EXPECT_EQ(store.Add("jobs/j1/a0/c", 1).status().code(),
            absl::StatusCode::kResourceExhausted);
  // Replacing a key's value needs no new key; other jobs are not affected.
  EXPECT_TRUE(store.Set("jobs/j1/a0/k0", "w").ok());
  EXPECT_TRUE(store.Set("jobs/j2/a0/k", "v").ok());
  // Deleting an attempt's keys makes room again.
  store.DeletePrefix("jobs/j1/a0/");
  EXPECT_EQ(store.keys_of_job("j1"), 0u);
  EXPECT_TRUE(store.Set("jobs/j1/a1/k", "v").ok());
}

// One job's worker filling the store must not refuse other jobs'
// rendezvous: each job may hold max_bytes_per_job.
TEST(KvStoreTest, OneJobCannotTakeTheWholeStore) {
  KvStoreOptions o;
  o.max_bytes_per_job = 100;
  o.max_total_bytes = 250;
  KvStore store(o);
  int stored = 0;
  absl::Status refused;
  for (int i = 0; i < 20 && refused.ok(); ++i) {
    refused = store.Set(absl::StrCat("jobs/hog/a0/k", i), std::string(30, 'v'));
    if (refused.ok()) ++stored;
  }
  EXPECT_EQ(stored, 2);  // 2 x (14 + 30) bytes; a third would make 132.
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(refused.message(),
            "job hog holds 88 store bytes; 44 more would pass its limit "
            "(--max_store_bytes_per_job=100)");
  EXPECT_EQ(store.bytes_of_job("hog"), 88u);
  // Replacing a value counts the difference only.
  EXPECT_TRUE(store.Set("jobs/hog/a0/k0", std::string(40, 'w')).ok());
  EXPECT_EQ(store.bytes_of_job("hog"), 98u);
  EXPECT_TRUE(store.Set("jobs/other/a0/addr", std::string(50, 'v')).ok());
  store.DeletePrefix("jobs/hog/");
  EXPECT_EQ(store.bytes_of_job("hog"), 0u);
  EXPECT_EQ(store.bytes(), store.bytes_of_job("other"));
}

// The regression: 1,500 values of 1 MiB took the coordinator from
// 340 MB to 1.8 GB. The store keeps at most max_total_bytes of them.
TEST(KvStoreTest, FifteenHundredValuesOfOneMebibyteAreCapped) {
  KvStoreOptions o;  // The defaults: 1 MiB values, 256 MiB in all...
  o.max_bytes_per_job = o.max_total_bytes;  // ... with no job's cap first.
  KvStore store(o);
  const std::string value(size_t{1} << 20, 'v');
  int stored = 0, refused = 0;
  for (int i = 0; i < 1500; ++i) {
    const absl::Status s =
        store.Set(absl::StrCat("jobs/j", i % 10, "/a0/v", i), value);
    if (s.ok()) {
      ++stored;
    } else {
      ASSERT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
      ASSERT_NE(s.message().find("--max_store_bytes=268435456"),
                std::string::npos)
          << s;
      ++refused;
    }
  }
  EXPECT_EQ(stored, 255);  // Each costs its key too.
  EXPECT_EQ(refused, 1500 - 255);
  EXPECT_LE(store.bytes(), store.options().max_total_bytes);
  for (int j = 0; j < 10; ++j)
    store.DeletePrefix(absl::StrCat("jobs/j", j, "/"));
  EXPECT_EQ(store.bytes(), 0u);
}

TEST(KvStoreTest, AddRefusesToOverflow) {
  KvStore store;
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  ASSERT_EQ(*store.Add("jobs/j/a0/c", kMax), kMax);
  const absl::StatusOr<int64_t> over = store.Add("jobs/j/a0/c", 1);
  EXPECT_EQ(over.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(over.status().message(),
            "store counter 'jobs/j/a0/c' holds 9223372036854775807; adding 1 "
            "would overflow 64 bits");
  EXPECT_EQ(*store.Get("jobs/j/a0/c", absl::Now()), "9223372036854775807");
  EXPECT_EQ(*store.Add("jobs/j/a0/c", kMin), -1);
  EXPECT_EQ(*store.Add("jobs/j/a0/c", -kMax), kMin);
  EXPECT_EQ(store.Add("jobs/j/a0/c", -1).status().code(),
            absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace aqueduct
