#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "pipeline/ir/action.h"
#include "pipeline/ir/generate.h"
#include "pipeline/ir/lower.h"
#include "pipeline/ir/replay.h"

namespace aqueduct::ir {
namespace {

Program Make(ScheduleKind kind, int p, int m, int chunks = 1) {
  absl::StatusOr<Program> program =
      ComputeSchedule(kind, ScheduleShape{p, m, chunks});
  EXPECT_TRUE(program.ok()) << program.status();
  return Lower(*program);
}

int ChunksOf(ScheduleKind kind) {
  return kind == ScheduleKind::kInterleaved1F1B || kind == ScheduleKind::kZbV
             ? 2
             : 1;
}

TEST(ActionTest, TextRoundTrips) {
  const std::vector<Action> actions = {
      {2, Kind::kF, 0},         {3, Kind::kSendF, 1}, {0, Kind::kRecvB, 12},
      {1, Kind::kI, 4},         {1, Kind::kW, 4},     {7, Kind::kB, 3},
      {0, Kind::kRecvF, 9},     {5, Kind::kSendB, 2}, {1, Kind::kStep, 0},
      {4, Kind::kReduceGrad, 0}};
  for (const Action& a : actions) {
    absl::StatusOr<Action> back = ParseAction(ActionText(a));
    ASSERT_TRUE(back.ok()) << ActionText(a) << ": " << back.status();
    EXPECT_EQ(*back, a) << ActionText(a);
  }
  EXPECT_EQ(ActionText({3, Kind::kSendF, 1}), "3SEND_F1");
  EXPECT_EQ(ActionText({1, Kind::kStep, 0}), "1STEP");
}

TEST(ActionTest, BadTextIsRefusedByName) {
  for (const char* text :
       {"", "F0", "2X0", "2F", "2F-1", "2STEP3", "2SEND_Fx", "99999999F0"}) {
    absl::StatusOr<Action> a = ParseAction(text);
    ASSERT_FALSE(a.ok()) << text;
    EXPECT_TRUE(absl::StrContains(a.status().message(), "is not an action"))
        << a.status();
  }
}

TEST(LayoutTest, LoopAndV) {
  const Layout loop{4, 2, Placement::kLoop};
  EXPECT_EQ(loop.RankOf(5), 1);
  EXPECT_EQ(loop.StagesOf(1), (std::vector<int>{1, 5}));
  const Layout v{4, 2, Placement::kV};
  EXPECT_EQ(v.RankOf(3), 3);
  EXPECT_EQ(v.RankOf(4), 3);
  EXPECT_EQ(v.RankOf(7), 0);
  EXPECT_EQ(v.StagesOf(0), (std::vector<int>{0, 7}));
  EXPECT_FALSE(CheckLayout(Layout{4, 3, Placement::kV}).ok());
  EXPECT_FALSE(CheckLayout(Layout{0, 1, Placement::kLoop}).ok());
}

// Every schedule, lowered, passes the validator for many shapes.
TEST(GenerateTest, EverySchedulePassesTheValidator) {
  for (ScheduleKind kind : AllScheduleKinds()) {
    for (int p = 1; p <= 6; ++p) {
      for (int m = 1; m <= 12; ++m) {
        if (kind == ScheduleKind::kInterleaved1F1B && m % p != 0) continue;
        const Program program = Make(kind, p, m, ChunksOf(kind));
        absl::Status s = Validate(program);
        EXPECT_TRUE(s.ok())
            << ScheduleKindName(kind) << " p=" << p << " m=" << m << ": " << s;
      }
    }
  }
}

TEST(GenerateTest, OneFOneBIsPipeDreamFlushOrder) {
  absl::StatusOr<Program> p =
      ComputeSchedule(ScheduleKind::k1F1B, ScheduleShape{2, 3, 1});
  ASSERT_TRUE(p.ok());
  const std::vector<Action> rank0 = {{0, Kind::kF, 0}, {0, Kind::kF, 1},
                                     {0, Kind::kB, 0}, {0, Kind::kF, 2},
                                     {0, Kind::kB, 1}, {0, Kind::kB, 2}};
  EXPECT_EQ(p->ranks[0], rank0);
}

TEST(GenerateTest, InterleavedFollowsMegatron) {
  // p = 2, v = 2, m = 4: rank 0 warms up with 2(p-1) + (v-1)p = 4
  // forwards: microbatches 0, 1 through chunk 0 (stage 0), then through
  // chunk 1 (stage 2).
  absl::StatusOr<Program> p =
      ComputeSchedule(ScheduleKind::kInterleaved1F1B, ScheduleShape{2, 4, 2});
  ASSERT_TRUE(p.ok());
  const std::vector<Action> head = {{0, Kind::kF, 0}, {0, Kind::kF, 1},
                                    {2, Kind::kF, 0}, {2, Kind::kF, 1},
                                    {0, Kind::kF, 2}, {2, Kind::kB, 0}};
  EXPECT_EQ(std::vector<Action>(p->ranks[0].begin(), p->ranks[0].begin() + 6),
            head);
}

TEST(GenerateTest, RulesAreNamed) {
  absl::StatusOr<Program> p =
      ComputeSchedule(ScheduleKind::kInterleaved1F1B, ScheduleShape{4, 6, 2});
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(absl::StrContains(p.status().message(), "multiple of the ranks"))
      << p.status();
  p = ComputeSchedule(ScheduleKind::kZbH1, ScheduleShape{4, 8, 2});
  EXPECT_FALSE(p.ok());
  EXPECT_FALSE(ParseScheduleKind("zb_h3").ok());
  EXPECT_EQ(*ParseScheduleKind("zb_v"), ScheduleKind::kZbV);
}

// The bubbles of PARALLELISM.md's table at p = 4, m = 8 and
// T_F = T_I = T_W (B = I + W).
TEST(SimulateTest, BubblesMatchTheFormulas) {
  struct Case {
    ScheduleKind kind;
    double bubble, tolerance;
  };
  const Case cases[] = {{ScheduleKind::kGpipe, 0.375, 1e-9},
                        {ScheduleKind::k1F1B, 0.375, 1e-9},
                        {ScheduleKind::kInterleaved1F1B, 0.1875, 1e-9},
                        {ScheduleKind::kZbH1, 0.125, 1e-9},
                        {ScheduleKind::kZbH2, 0.0, 0.03},
                        {ScheduleKind::kZbV, 0.0, 0.03}};
  for (const Case& c : cases) {
    absl::StatusOr<Simulation> s =
        Simulate(Make(c.kind, 4, 8, ChunksOf(c.kind)), ActionCosts{});
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_NEAR(s->bubble, c.bubble, c.tolerance) << ScheduleKindName(c.kind);
  }
}

TEST(SimulateTest, PeakActivations) {
  auto peak0 = [](ScheduleKind kind) {
    return Simulate(Make(kind, 4, 8, ChunksOf(kind)))->peak_activations[0];
  };
  EXPECT_DOUBLE_EQ(peak0(ScheduleKind::k1F1B), 4);
  EXPECT_DOUBLE_EQ(peak0(ScheduleKind::kGpipe), 8);
  EXPECT_DOUBLE_EQ(peak0(ScheduleKind::kZbH1), 4);  // 1F1B's.
  EXPECT_DOUBLE_EQ(peak0(ScheduleKind::kZbH2), 7);  // About twice.
  EXPECT_LE(peak0(ScheduleKind::kZbV), 4);
}

// ZB-H1 at 1F1B's memory counting what a deferred W keeps too: every rank
// holds at most p microbatches from F to W (the W's of rank r lag its I's
// by r), at (p-1)/(3m)'s bubble.
TEST(GenerateTest, ZbH1HoldsAtMostPMicrobatchesFromFToW) {
  for (int m : {4, 8, 16}) {
    const Program p = Make(ScheduleKind::kZbH1, 4, m);
    for (int r = 0; r < 4; ++r) {
      int held = 0, most = 0;
      for (const Action& a : p.ranks[r]) {
        if (a.kind == Kind::kF) most = std::max(most, ++held);
        if (a.kind == Kind::kW) --held;
      }
      EXPECT_LE(most, 4) << "rank " << r << ", m = " << m;
      EXPECT_EQ(held, 0);
    }
    ActionCosts costs;
    costs.f = costs.i = costs.w = 1;
    costs.b = 2;
    EXPECT_NEAR(Simulate(Lower(p), costs)->bubble, 3.0 / (3 * m), 1e-9)
        << "m = " << m;
  }
}

TEST(SimulateTest, TransferTimeLengthensTheStep) {
  ActionCosts slow;
  slow.transfer = 0.5;
  const Program p = Make(ScheduleKind::k1F1B, 4, 8);
  EXPECT_GT(Simulate(p, slow)->step_time, Simulate(p)->step_time);
}

TEST(FileTest, ProgramsRoundTrip) {
  for (ScheduleKind kind : AllScheduleKinds()) {
    const Program p = Make(kind, 4, 8, ChunksOf(kind));
    absl::StatusOr<Program> back = ParseProgram(ProgramText(p));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->ranks, p.ranks) << ScheduleKindName(kind);
    EXPECT_EQ(back->layout.placement, p.layout.placement);
    EXPECT_EQ(back->microbatches, 8);
  }
}

TEST(FileTest, ErrorsNameTheLine) {
  const std::string header =
      "# aqueduct schedule: ranks=2 stages_per_rank=1 placement=loop "
      "microbatches=1\n";
  absl::StatusOr<Program> p = ParseProgram(header + "0: 0F0\n\n7: 1F0\n");
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(absl::StrContains(p.status().message(), "line 4")) << p.status();
  p = ParseProgram(header + "1: 1F0 1Q0\n");
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(absl::StrContains(p.status().message(), "line 2: \"1Q0\""))
      << p.status();
  p = ParseProgram("0: 0F0\n");
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(absl::StrContains(p.status().message(), "line 1")) << p.status();
}

// The validator's errors, on hand-broken programs.
std::string Broken(Program p, int rank, size_t index, bool remove,
                   const Action& insert = {}) {
  auto& actions = p.ranks[rank];
  if (remove) {
    actions.erase(actions.begin() + index);
  } else {
    actions.insert(actions.begin() + index, insert);
  }
  return std::string(Validate(p).message());
}

size_t IndexOf(const Program& p, int rank, const Action& a) {
  const auto& actions = p.ranks[rank];
  for (size_t k = 0; k < actions.size(); ++k) {
    if (actions[k] == a) return k;
  }
  ADD_FAILURE() << "no " << ActionText(a) << " on rank " << rank;
  return 0;
}

TEST(ValidateTest, AMissingReceiveIsNamed) {
  const Program p = Make(ScheduleKind::k1F1B, 2, 2);
  const size_t k = IndexOf(p, 1, {1, Kind::kRecvF, 1});
  const std::string why = Broken(p, 1, k, true);
  EXPECT_TRUE(absl::StrContains(why, "rank 1, action")) << why;
  EXPECT_TRUE(absl::StrContains(why, "(1F1): F before its RECV_F")) << why;
}

TEST(ValidateTest, WBeforeIIsNamed) {
  const Program p = Make(ScheduleKind::kZbH1, 2, 2);
  const size_t k = IndexOf(p, 1, {1, Kind::kI, 0});
  const std::string why = Broken(p, 1, k, false, {1, Kind::kW, 0});
  EXPECT_TRUE(absl::StrContains(why, "(1W0): W before its I")) << why;
}

TEST(ValidateTest, ADeadlockNamesTheRanks) {
  // Rank 0 waits for microbatch 0's gradient before sending microbatch
  // 1's activation, and rank 1 runs F1 before B0: each waits for the other.
  const std::string header =
      "# aqueduct schedule: ranks=2 stages_per_rank=1 placement=loop "
      "microbatches=2\n";
  const std::string text =
      header +
      "0: 0F0 0SEND_F0 0F1 0RECV_B0 0SEND_F1 0B0 0RECV_B1 0B1 0STEP\n"
      "1: 1RECV_F0 1F0 1RECV_F1 1F1 1B0 1SEND_B0 1B1 1SEND_B1 1STEP\n";
  absl::StatusOr<Program> p = ParseProgram(text);
  ASSERT_TRUE(p.ok()) << p.status();
  const std::string why(Validate(*p).message());
  EXPECT_TRUE(absl::StrContains(why, "deadlock")) << why;
  EXPECT_TRUE(absl::StrContains(why, "rank 0 waits at action 3 (0RECV_B0)"))
      << why;
  EXPECT_TRUE(absl::StrContains(why, "rank 1 waits at action 2 (1RECV_F1)"))
      << why;
}

TEST(ValidateTest, AHugeProgramIsRefusedNotAllocated) {
  absl::StatusOr<Program> p = ParseProgram(
      "# aqueduct schedule: ranks=4096 stages_per_rank=64 placement=loop "
      "microbatches=65536\n");
  ASSERT_TRUE(p.ok()) << p.status();
  const absl::Status s = Validate(*p);
  EXPECT_TRUE(absl::StrContains(s.message(), "(stage, microbatch) pairs")) << s;
}

TEST(ValidateTest, OtherBreaks) {
  const Program p = Make(ScheduleKind::k1F1B, 2, 2);
  // A stage of another rank.
  EXPECT_TRUE(absl::StrContains(Broken(p, 0, 0, false, {1, Kind::kF, 0}),
                                "stage 1 is on rank 1"));
  // A duplicate.
  EXPECT_TRUE(absl::StrContains(Broken(p, 0, 1, false, {0, Kind::kF, 0}),
                                "a second F"));
  // No step.
  EXPECT_TRUE(absl::StrContains(Broken(p, 0, p.ranks[0].size() - 1, true),
                                "rank 0: stage 0: no STEP"));
  // A send that is missing: its receiver is left waiting.
  const size_t k = IndexOf(p, 0, {0, Kind::kSendF, 1});
  EXPECT_TRUE(absl::StrContains(Broken(p, 0, k, true), "no SEND_F"));
}

TEST(LowerTest, TheVTurnsOnItsRank) {
  // ZB-V: stages 3 and 4 are both on rank 3: no message between them.
  const Program p = Make(ScheduleKind::kZbV, 4, 4, 2);
  for (const Action& a : p.ranks[3]) {
    if (a.kind == Kind::kSendF) {
      EXPECT_NE(a.stage, 3) << ActionText(a);
    }
    if (a.kind == Kind::kRecvF) {
      EXPECT_NE(a.stage, 4) << ActionText(a);
    }
  }
  EXPECT_TRUE(IsComputeOnly(
      *ComputeSchedule(ScheduleKind::kZbV, ScheduleShape{4, 4, 2})));
  EXPECT_FALSE(IsComputeOnly(p));
  LowerOptions reduce;
  reduce.reduce_grad = true;
  const Program twice = Lower(Lower(p), reduce);
  EXPECT_TRUE(Validate(twice).ok()) << Validate(twice);
}

}  // namespace
}  // namespace aqueduct::ir

namespace aqueduct::ir {
namespace {

TEST(TimeGridTest, ShowsIdleAndActions) {
  absl::StatusOr<Program> p =
      ComputeSchedule(ScheduleKind::k1F1B, ScheduleShape{2, 2, 1});
  ASSERT_TRUE(p.ok());
  ActionCosts costs;
  costs.b = 1;  // One column per action.
  absl::StatusOr<Simulation> s = Simulate(Lower(*p), costs);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(TimeGrid(*s),
            "rank 0 | 0F0 0F1 .   0B0 .   0B1\n"
            "rank 1 | .   1F0 1B0 1F1 1B1 .  \n");
}

}  // namespace
}  // namespace aqueduct::ir
