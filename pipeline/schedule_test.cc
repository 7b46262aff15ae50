#include "pipeline/schedule.h"

#include <map>
#include <set>

#include "gtest/gtest.h"
#include "pipeline/weight_stash.h"

namespace aqueduct {
namespace {

std::string Compact(const std::vector<Op>& ops) {
  std::string s;
  for (const Op& op : ops) {
    if (op.kind == OpKind::kForward)
      s += "F" + std::to_string(op.minibatch) + " ";
    if (op.kind == OpKind::kBackward)
      s += "B" + std::to_string(op.minibatch) + " ";
  }
  return s;
}

TEST(ScheduleTest, OneFOneBOrder) {
  ScheduleConfig c;
  c.num_stages = 4;
  c.num_minibatches = 6;
  c.stage = 0;
  EXPECT_EQ(Compact(*BuildSchedule(c)), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5 ");
  c.stage = 3;  // The last stage does no warm-up.
  EXPECT_EQ(Compact(*BuildSchedule(c)), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 ");
  c.stage = 1;
  auto ops = *BuildSchedule(c);
  EXPECT_EQ(Compact(ops), "F0 F1 F2 B0 F3 B1 F4 B2 F5 B3 B4 B5 ");
  // Every forward is preceded by its receive and followed by its send;
  // one optimizer step per backward.
  EXPECT_EQ(ops[0].kind, OpKind::kRecvActivation);
  EXPECT_EQ(ops[1].kind, OpKind::kForward);
  EXPECT_EQ(ops[2].kind, OpKind::kSendActivation);
  int steps = 0;
  for (const Op& op : ops) steps += op.kind == OpKind::kOptimizerStep;
  EXPECT_EQ(steps, 6);
}

TEST(ScheduleTest, VersionsMatchTheStepsBeforeEachForward) {
  for (int stage = 0; stage < 4; ++stage) {
    ScheduleConfig c;
    c.num_stages = 4;
    c.stage = stage;
    c.num_minibatches = 9;
    auto ops = *BuildSchedule(c);
    int64_t steps = 0;
    for (const Op& op : ops) {
      if (op.kind == OpKind::kOptimizerStep) ++steps;
      if (op.kind == OpKind::kForward) {
        EXPECT_EQ(steps, WeightVersionFor(v1::SCHEDULE_1F1B_STASHED, stage, 4,
                                          3 - stage, 3, op.minibatch))
            << "stage " << stage << " minibatch " << op.minibatch;
        // Vertical sync uses stage 0's version, never newer than this
        // stage's own.
        EXPECT_LE(WeightVersionFor(v1::SCHEDULE_1F1B_VERTICAL_SYNC, stage, 4,
                                   3 - stage, 3, op.minibatch),
                  steps);
      }
    }
  }
}

TEST(ScheduleTest, InFlightNeverExceedsDepthPlusOne) {
  for (int stage = 0; stage < 5; ++stage) {
    ScheduleConfig c;
    c.num_stages = 5;
    c.stage = stage;
    c.num_minibatches = 20;
    int in_flight = 0, peak = 0;
    const std::vector<Op> ops = *BuildSchedule(c);
    for (const Op& op : ops) {
      if (op.kind == OpKind::kForward) peak = std::max(peak, ++in_flight);
      if (op.kind == OpKind::kBackward) --in_flight;
    }
    EXPECT_EQ(peak, 5 - stage);
    EXPECT_EQ(in_flight, 0);
  }
}

TEST(ScheduleTest, FlushAndGpipeWithReplicas) {
  ScheduleConfig c;
  c.policy = v1::SCHEDULE_1F1B_FLUSH;
  c.num_stages = 2;
  c.stage = 0;
  c.num_minibatches = 2;
  c.microbatches = 4;
  auto ops = *BuildSchedule(c);
  std::string order;
  for (const Op& op : ops) {
    if (op.kind == OpKind::kForward)
      order += "F" + std::to_string(op.microbatch);
    if (op.kind == OpKind::kBackward)
      order += "B" + std::to_string(op.microbatch);
    if (op.kind == OpKind::kOptimizerStep) order += "S ";
  }
  EXPECT_EQ(order, "F0F1B0F2B1F3B2B3S F0F1B0F2B1F3B2B3S ");
  c.policy = v1::SCHEDULE_GPIPE;
  c.replicas = 2;
  c.replica = 1;
  ops = *BuildSchedule(c);
  order.clear();
  for (const Op& op : ops) {
    if (op.kind == OpKind::kForward)
      order += "F" + std::to_string(op.microbatch);
    if (op.kind == OpKind::kBackward)
      order += "B" + std::to_string(op.microbatch);
    if (op.kind == OpKind::kAllReduce) order += "R";
    if (op.kind == OpKind::kOptimizerStep) order += "S ";
  }
  EXPECT_EQ(order, "F1F3B3B1RS F1F3B3B1RS ");
}

// The zero-bubble schedules split every backward: per minibatch each
// microbatch of this replica has one F, one I and one W, I before W, W's in
// I's order (the gradients accumulate in 1F1B's order), every receive and
// send around F and I, and one step at the end.
TEST(ScheduleTest, ZeroBubbleSplitsEveryBackward) {
  for (Schedule policy : {v1::SCHEDULE_ZB_H1, v1::SCHEDULE_ZB_H2}) {
    for (int stage = 0; stage < 4; ++stage) {
      ScheduleConfig c;
      c.policy = policy;
      c.num_stages = 4;
      c.stage = stage;
      c.replicas = 2;
      c.replica = 1;
      c.microbatches = 8;
      c.num_minibatches = 2;
      auto ops = BuildSchedule(c);
      ASSERT_TRUE(ops.ok()) << ops.status();
      std::map<std::pair<int64_t, int>, std::string> seen;
      std::vector<int> input_order, weight_order;
      int steps = 0;
      for (const Op& op : *ops) {
        std::string& s = seen[{op.minibatch, op.microbatch}];
        if (op.kind == OpKind::kForward) s += "F";
        if (op.kind == OpKind::kBackwardInput) {
          s += "I";
          if (op.minibatch == 0) input_order.push_back(op.microbatch);
        }
        if (op.kind == OpKind::kBackwardWeight) {
          s += "W";
          if (op.minibatch == 0) weight_order.push_back(op.microbatch);
        }
        EXPECT_NE(op.kind, OpKind::kBackward);
        if (op.kind == OpKind::kOptimizerStep) ++steps;
      }
      EXPECT_EQ(steps, 2);
      EXPECT_EQ(seen.size(), 2u * 4 + 2);  // Odd microbatches, and 2 steps.
      for (const auto& [key, s] : seen) {
        if (key.second % 2 == 1) {
          EXPECT_EQ(s, "FIW") << key.second;
        }
      }
      EXPECT_EQ(input_order, weight_order);
      EXPECT_EQ(input_order, (std::vector<int>{1, 3, 5, 7}));
    }
  }
}

// PipeDream-2BW: 1F1B over the microbatches of consecutive minibatches
// without a flush; a step after each minibatch's last backward; stage 0's
// forwards of minibatch k+1 start before minibatch k's backwards end.
TEST(ScheduleTest, TwoBwStreamsMicrobatchesAndStepsPerMinibatch) {
  ScheduleConfig c;
  c.policy = v1::SCHEDULE_2BW;
  c.num_stages = 3;
  c.stage = 0;
  c.microbatches = 2;
  c.num_minibatches = 3;
  auto ops = BuildSchedule(c);
  ASSERT_TRUE(ops.ok()) << ops.status();
  std::string s;
  for (const Op& op : *ops) {
    if (op.kind == OpKind::kForward) {
      s += "F" + std::to_string(op.minibatch) + "." +
           std::to_string(op.microbatch) + " ";
    } else if (op.kind == OpKind::kBackward) {
      s += "B" + std::to_string(op.minibatch) + "." +
           std::to_string(op.microbatch) + " ";
    } else if (op.kind == OpKind::kOptimizerStep) {
      s += "S" + std::to_string(op.minibatch) + " ";
    }
  }
  EXPECT_EQ(s,
            "F0.0 F0.1 F1.0 B0.0 F1.1 B0.1 S0 F2.0 B1.0 F2.1 B1.1 S1 B2.0 "
            "B2.1 S2 ");
  // Too few microbatches for the first stage's warm-up: refused by rule.
  c.num_stages = 4;
  auto refused = BuildSchedule(c);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("2bw needs at least"),
            std::string::npos)
      << refused.status();
  c.microbatches = 3;
  c.replicas = 2;
  EXPECT_FALSE(BuildSchedule(c).ok());
}

TEST(ScheduleTest, RejectsInconsistentConfigs) {
  ScheduleConfig c;
  c.num_stages = 2;
  c.replicas = 2;
  c.num_minibatches = 4;
  EXPECT_EQ(BuildSchedule(c).status().code(),
            absl::StatusCode::kInvalidArgument);
  c.policy = v1::SCHEDULE_GPIPE;
  c.microbatches = 1;
  EXPECT_NE(BuildSchedule(c).status().message().find("at least 2 microbatches"),
            std::string::npos);
  c.stage = 5;
  EXPECT_FALSE(BuildSchedule(c).ok());
  EXPECT_FALSE(ParseSchedule("zigzag").ok());
  EXPECT_EQ(*ParseSchedule("gpipe"), v1::SCHEDULE_GPIPE);
}

}  // namespace
}  // namespace aqueduct
