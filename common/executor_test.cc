#include "common/executor.h"

#include <atomic>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(BoundedExecutorTest, RunsEveryTaskAndJoinsOnDestruction) {
  std::atomic<int> ran{0};
  {
    BoundedExecutor executor("test", 2, 100);
    for (int i = 0; i < 50; ++i) {
      ASSERT_TRUE(executor.Submit([&] { ++ran; }).ok());
    }
  }
  EXPECT_EQ(ran.load(), 50);
}

TEST(BoundedExecutorTest, RefusesBeyondTheBound) {
  absl::Notification release, started;
  BoundedExecutor executor("driver", 1, 2);
  ASSERT_TRUE(executor
                  .Submit([&] {
                    started.Notify();
                    release.WaitForNotification();
                  })
                  .ok());
  started.WaitForNotification();
  EXPECT_TRUE(executor.Submit([] {}).ok());
  EXPECT_TRUE(executor.Submit([] {}).ok());
  absl::Status full = executor.Submit([] {});
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("driver is busy"), absl::string_view::npos);
  EXPECT_EQ(executor.pending(), 3u);
  release.Notify();
}

}  // namespace
}  // namespace aqueduct
