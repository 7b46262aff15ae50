#include "common/clock.h"

#include <ctime>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

TEST(ClockTest, MonotonicNowNeverGoesBack) {
  absl::Time last = MonotonicNow();
  for (int i = 0; i < 100000; ++i) {
    const absl::Time now = MonotonicNow();
    ASSERT_GE(now, last);
    last = now;
  }
}

TEST(ClockTest, MonotonicNowStartsAtTheWallClock) {
  // Anchored at the wall clock on first use: within a second of it here
  // (nothing steps the clock during a unit test).
  EXPECT_LT(absl::AbsDuration(MonotonicNow() - absl::Now()), absl::Seconds(1));
}

TEST(ClockTest, MonotonicNowFollowsClockMonotonic) {
  timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  const absl::Time m0 = MonotonicNow();
  absl::SleepFor(absl::Milliseconds(20));
  const absl::Time m1 = MonotonicNow();
  clock_gettime(CLOCK_MONOTONIC, &b);
  const absl::Duration mono =
      absl::DurationFromTimespec(b) - absl::DurationFromTimespec(a);
  EXPECT_GE(m1 - m0, absl::Milliseconds(20));
  EXPECT_LE(m1 - m0, mono);
}

TEST(ClockTest, FakeClockStepsTheWallAlone) {
  FakeClock clock;
  const absl::Time start = clock.Now();
  clock.StepWall(absl::Hours(1));
  EXPECT_EQ(clock.Now(), start);
  EXPECT_EQ(clock.WallNow(), start + absl::Hours(1));
  clock.Advance(absl::Seconds(2));
  EXPECT_EQ(clock.Now(), start + absl::Seconds(2));
  EXPECT_EQ(clock.WallNow(), start + absl::Hours(1) + absl::Seconds(2));
}

}  // namespace
}  // namespace aqueduct
