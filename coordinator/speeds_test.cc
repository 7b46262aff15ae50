#include "coordinator/speeds.h"

#include <cmath>
#include <limits>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

using ::testing::ElementsAre;

TEST(RelativeSpeedsTest, EqualProbesAreNoSpeedsAtAll) {
  EXPECT_TRUE(RelativeSpeeds({}).empty());
  EXPECT_TRUE(RelativeSpeeds({150, 150, 150}).empty());
  // Within kEqualSpeedRatio of the fastest: probe noise, equally fast.
  EXPECT_TRUE(RelativeSpeeds({200, 160, 151}).empty());
  // Nothing measured (--measure_gemm=false): equal.
  EXPECT_TRUE(RelativeSpeeds({0, 0}).empty());
}

TEST(RelativeSpeedsTest, ASlowWorkerIsTheRatioToTheFastest) {
  // One worker at half the throughput (--slowdown 2): 0.5; the probe's
  // noise is rounded to kSpeedStep.
  EXPECT_THAT(RelativeSpeeds({150, 74, 160, 40}),
              ElementsAre(1.0, 0.45, 1.0, 0.25));
  // Very slow workers get the smallest step, never 0.
  EXPECT_THAT(RelativeSpeeds({1000, 1}), ElementsAre(1.0, kSpeedStep));
}

TEST(RelativeSpeedsTest, UnmeasuredWorkersCountAsFast) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(RelativeSpeeds({0, 100, 50, nan}),
              ElementsAre(1.0, 1.0, 0.5, 1.0));
}

TEST(FastestFirstTest, SortsStablyWithinGroups) {
  EXPECT_THAT(FastestFirst({}), ElementsAre());
  EXPECT_THAT(FastestFirst({0.5, 1, 0.5, 1}), ElementsAre(1, 3, 0, 2));
  // Groups of 2 then 2: never across a group's bounds.
  EXPECT_THAT(FastestFirst({0.5, 1, 1, 0.25}, {2, 2}), ElementsAre(1, 0, 2, 3));
  EXPECT_THAT(FastestFirst({0.5, 1, 1}, {1, 2}), ElementsAre(0, 1, 2));
}

}  // namespace
}  // namespace aqueduct
