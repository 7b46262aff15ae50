#include "worker/runtime/coordinator_store.h"

#include <thread>

#include "common/fake_coordinator_client.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

using Rpc = FakeCoordinatorClient::Rpc;

TEST(CoordinatorStoreTest, SetThenGetAndAdd) {
  FakeCoordinatorClient client;
  CoordinatorStore store(&client);
  ASSERT_TRUE(store.Set("jobs/j/gloo/0", "addr0").ok());
  absl::StatusOr<std::string> got =
      store.Get("jobs/j/gloo/0", absl::Milliseconds(10));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "addr0");
  EXPECT_EQ(*store.Add("jobs/j/count", 2), 2);
  EXPECT_EQ(*store.Add("jobs/j/count", 3), 5);
  EXPECT_EQ(client.calls(Rpc::kStoreAdd), 2);
}

TEST(CoordinatorStoreTest, GetDeadlineCoversTheWait) {
  FakeCoordinatorClient client;
  CoordinatorStore store(&client);
  (void)store.Get("k", absl::Seconds(0));
  EXPECT_EQ(client.last_timeout(), CoordinatorStore::kGetSlack);
  std::thread setter([&store] {
    absl::SleepFor(absl::Milliseconds(20));
    (void)store.Set("k", "v");
  });
  absl::StatusOr<std::string> got = store.Get("k", absl::Seconds(5));
  setter.join();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "v");
  EXPECT_EQ(client.last_timeout(),
            absl::Seconds(5) + CoordinatorStore::kGetSlack);
}

TEST(CoordinatorStoreTest, MissingKeyAndErrorsPassThrough) {
  FakeCoordinatorClient client;
  CoordinatorStore store(&client);
  EXPECT_EQ(store.Get("absent", absl::Milliseconds(1)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  client.FailNext(Rpc::kStoreSet, absl::ResourceExhaustedError("store full"));
  EXPECT_EQ(store.Set("k", "v").code(), absl::StatusCode::kResourceExhausted);
  client.set_unavailable(true);
  EXPECT_EQ(store.Get("k", absl::Milliseconds(1)).status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(store.Add("c", 1).status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace aqueduct
