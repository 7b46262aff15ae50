#include "pipeline/weight_stash.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "pipeline/schedule.h"

namespace aqueduct {
namespace {

TEST(WeightVersionForTest, EachScheduleRule) {
  // Stage 2 of 4 with warm-up depth 1; stage 0's depth is 3.
  EXPECT_EQ(WeightVersionFor(v1::SCHEDULE_1F1B_STASHED, 2, 4, 1, 3, 0), 0);
  EXPECT_EQ(WeightVersionFor(v1::SCHEDULE_1F1B_STASHED, 2, 4, 1, 3, 5), 4);
  EXPECT_EQ(WeightVersionFor(v1::SCHEDULE_1F1B_VERTICAL_SYNC, 2, 4, 1, 3, 5),
            2);
  EXPECT_EQ(WeightVersionFor(v1::SCHEDULE_1F1B_FLUSH, 2, 4, 1, 3, 5), 5);
  EXPECT_EQ(WeightVersionFor(v1::SCHEDULE_GPIPE, 2, 4, 1, 3, 5), 5);
  // 2BW: a uniform one-step delay, whatever the stage.
  EXPECT_EQ(WeightVersionFor(v1::SCHEDULE_2BW, 2, 4, 1, 3, 0), 0);
  EXPECT_EQ(WeightVersionFor(v1::SCHEDULE_2BW, 2, 4, 1, 3, 1), 0);
  EXPECT_EQ(WeightVersionFor(v1::SCHEDULE_2BW, 0, 4, 3, 3, 5), 4);
  EXPECT_EQ(WeightVersionFor(v1::SCHEDULE_2BW, 3, 4, 0, 3, 5), 4);
}

TEST(WeightStashRulesTest, KeepsWhatInFlightOrFutureMinibatchesUse) {
  WeightStashRules rules(v1::SCHEDULE_1F1B_STASHED, 0, 4, 3, 3, 10);
  // Next forward is minibatch 6, which uses version 3: 3 and newer stay.
  EXPECT_TRUE(rules.MustKeep(3, 6, {}));
  EXPECT_TRUE(rules.MustKeep(4, 6, {}));
  EXPECT_FALSE(rules.MustKeep(2, 6, {}));
  // Version 2 stays while a minibatch in flight uses it.
  EXPECT_TRUE(rules.MustKeep(2, 6, {2, 3}));
  // After the last forward only in-flight versions are kept.
  EXPECT_FALSE(rules.MustKeep(9, 10, {}));
  EXPECT_TRUE(rules.MustKeep(9, 10, {9}));
}

// Runs a stage's schedule with a stash governed by the rules, as the stage
// executor does, and checks every backward finds the version its forward
// used and that the stash never holds more than MaxStashedVersions().
void Simulate(Schedule schedule, int stage, int stages, int64_t minibatches) {
  const int depth = stages - stage - 1, depth0 = stages - 1;
  WeightStashRules rules(schedule, stage, stages, depth, depth0, minibatches);
  ScheduleConfig c;
  c.policy = schedule;
  c.stage = stage;
  c.num_stages = stages;
  c.num_minibatches = minibatches;
  auto ops = BuildSchedule(c);
  ASSERT_TRUE(ops.ok()) << ops.status();
  int64_t version = 0, next_forward = 0;
  std::set<int64_t> stash;
  std::map<int64_t, int64_t> in_flight;  // minibatch -> version used.
  size_t peak = 0;
  auto versions = [&] {
    std::vector<int64_t> v;
    for (const auto& [m, used] : in_flight) v.push_back(used);
    return v;
  };
  for (const Op& op : *ops) {
    if (op.kind == OpKind::kForward) {
      const int64_t used = rules.VersionFor(op.minibatch);
      ASSERT_TRUE(used == version || stash.count(used))
          << "forward " << op.minibatch << " needs version " << used;
      in_flight[op.minibatch] = used;
      next_forward = op.minibatch + 1;
    } else if (op.kind == OpKind::kBackward) {
      const int64_t used = in_flight[op.minibatch];
      ASSERT_TRUE(used == version || stash.count(used))
          << "backward " << op.minibatch << " lost version " << used;
      in_flight.erase(op.minibatch);
    } else if (op.kind == OpKind::kOptimizerStep) {
      if (rules.MustKeep(version, next_forward, versions())) {
        stash.insert(version);
      }
      ++version;
      for (auto it = stash.begin(); it != stash.end();) {
        it = rules.MustKeep(*it, next_forward, versions()) ? std::next(it)
                                                           : stash.erase(it);
      }
      peak = std::max(peak, stash.size());
    }
  }
  EXPECT_EQ(static_cast<int>(peak), rules.MaxStashedVersions())
      << ScheduleName(schedule) << " stage " << stage << " of " << stages;
  EXPECT_TRUE(in_flight.empty());
}

TEST(WeightStashRulesTest, StashedScheduleKeepsOneVersionPerWarmupForward) {
  for (int stages : {1, 2, 4, 6}) {
    for (int stage = 0; stage < stages; ++stage) {
      Simulate(v1::SCHEDULE_1F1B_STASHED, stage, stages, 12);
    }
  }
}

TEST(WeightStashRulesTest, FlushSchedulesKeepNoStash) {
  for (Schedule s : {v1::SCHEDULE_1F1B_FLUSH, v1::SCHEDULE_GPIPE}) {
    for (int stage = 0; stage < 3; ++stage) Simulate(s, stage, 3, 5);
  }
}

}  // namespace
}  // namespace aqueduct
