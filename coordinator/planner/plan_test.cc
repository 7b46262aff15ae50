// Aqueduct's cost model (by hand, and its DP against exhaustive search) and
// PartitionPlan assembly.
#include "coordinator/planner/plan.h"

#include <cmath>
#include <functional>
#include <random>

#include "absl/strings/str_cat.h"
#include "coordinator/planner/aqueduct_model.h"
#include "coordinator/planner/pipedream.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

ProfileGraph Chain(const std::vector<ProfileNode>& nodes) {
  auto g = ProfileGraph::Chain(nodes);
  EXPECT_TRUE(g.ok());
  return *g;
}

TEST(AqueductModelTest, StageCostByHand) {
  // Two layers: 10 ms (4 of them backward), 2 MB of parameters, 1 MB out.
  ProfileGraph g =
      Chain({{"a", "A", 6, 4, 1e6, 2e6}, {"b", "B", 6, 4, 1e6, 2e6}});
  auto seq = BuildAntichainStates(g);
  ASSERT_TRUE(seq.ok());
  AqueductModelOptions o;
  o.levels = {{4, 1e9}};
  // Layer b alone on ranks 2..3 (two replicas), after layer a on 0..1.
  StageCost c = AqueductStageCost(*seq, o, 1, 1, 2, 3);
  // All-reduce 2 * (1/2) * 2e6 / 1e9 = 2 ms, none hidden; per minibatch
  // (10 + 2) / 2 = 6 ms. Transfer in: 2 * 1e6 / 1e9 / 2 = 1 ms.
  EXPECT_DOUBLE_EQ(c.allreduce_s, 0.001);
  EXPECT_DOUBLE_EQ(c.transfer_s, 0.001);
  EXPECT_DOUBLE_EQ(c.time_s, 0.006);
  EXPECT_EQ(c.warmup_depth, 0);
  // 1 version + gradients + momentum = 3 x 2 MB, plus 1 MB of activations.
  EXPECT_DOUBLE_EQ(c.memory_bytes, 7e6);

  // Half the backward (2 ms) hides the whole all-reduce.
  o.allreduce_overlap = 0.5;
  c = AqueductStageCost(*seq, o, 1, 1, 2, 3);
  EXPECT_DOUBLE_EQ(c.allreduce_s, 0);
  EXPECT_DOUBLE_EQ(c.time_s, 0.005);

  // On a slow link: all-reduce 20 ms, 2 ms of it hidden: (10 + 18) / 2 =
  // 14 ms of compute; transfer 10 ms overlaps it (max, not sum).
  o.levels = {{4, 1e8}};
  c = AqueductStageCost(*seq, o, 1, 1, 2, 3);
  EXPECT_DOUBLE_EQ(c.transfer_s, 0.01);
  EXPECT_NEAR(c.time_s, 0.014, 1e-15);
  // Without parameters the transfer alone sets the time.
  ProfileGraph light =
      Chain({{"a", "A", 6, 4, 1e6, 0}, {"b", "B", 6, 4, 1e6, 0}});
  auto light_seq = BuildAntichainStates(light);
  c = AqueductStageCost(*light_seq, o, 1, 1, 2, 3);
  EXPECT_DOUBLE_EQ(c.time_s, 0.01);

  // A slow worker slows its stage; the first stage's depth counts the
  // workers after it, and stashing keeps depth + 1 versions.
  o.levels = {{4, 1e9}};
  o.allreduce_overlap = 0;
  o.worker_speed = {0.5, 1, 1, 1};
  c = AqueductStageCost(*seq, o, 0, 0, 0, 0);
  EXPECT_DOUBLE_EQ(c.compute_s, 0.010);
  EXPECT_DOUBLE_EQ(c.time_s, 0.020);
  EXPECT_EQ(c.warmup_depth, 3);
  EXPECT_DOUBLE_EQ(c.memory_bytes, 2e6 * (4 + 1 + 1) + 1e6 * 4);
  // Flushing schedules keep one version; 1F1B-flush at most depth + 1 of
  // the minibatch's microbatches in flight, GPipe all of them.
  o.schedule = v1::SCHEDULE_1F1B_FLUSH;
  o.microbatches = 8;
  EXPECT_DOUBLE_EQ(AqueductStageCost(*seq, o, 0, 0, 0, 0).memory_bytes,
                   2e6 * 3 + 1e6 * 4 / 8);
  o.microbatches = 2;
  EXPECT_DOUBLE_EQ(AqueductStageCost(*seq, o, 0, 0, 0, 0).memory_bytes,
                   2e6 * 3 + 1e6);
  o.schedule = v1::SCHEDULE_GPIPE;
  o.microbatches = 8;
  EXPECT_DOUBLE_EQ(AqueductStageCost(*seq, o, 0, 0, 0, 0).memory_bytes,
                   2e6 * 3 + 1e6);
  o.microbatches = 0;

  // Replicas across servers all-reduce at the outer bandwidth.
  o.schedule = v1::SCHEDULE_1F1B_STASHED;
  o.worker_speed.clear();
  o.levels = {{2, 1e10}, {2, 1e9}};
  EXPECT_DOUBLE_EQ(AqueductStageCost(*seq, o, 1, 1, 2, 3).allreduce_s, 1e-4);
  EXPECT_DOUBLE_EQ(AqueductStageCost(*seq, o, 1, 1, 1, 2).allreduce_s, 1e-3);
}

// Every partition into contiguous stages on contiguous ranks.
double BruteForce(const StateSequence& seq, const AqueductModelOptions& o) {
  const int n = static_cast<int>(seq.states.size());
  int M = 1;
  for (const PlannerLevel& l : o.levels) M *= l.workers;
  double best = std::numeric_limits<double>::infinity();
  std::function<void(int, int, double)> go = [&](int state, int rank,
                                                 double worst) {
    if (state == n) {
      if (rank == M || o.use_fewer_machines) best = std::min(best, worst);
      return;
    }
    for (int end = state; end < n; ++end) {
      for (int r = 1; rank + r <= M; ++r) {
        if (o.straight_pipeline && r > 1) break;
        const StageCost c =
            AqueductStageCost(seq, o, state, end, rank, rank + r - 1);
        if (!c.feasible) continue;
        go(end + 1, rank + r, std::max(worst, c.time_s));
      }
    }
  };
  go(0, 0, 0);
  return best;
}

TEST(AqueductModelTest, MatchesExhaustiveSearch) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> ms(0.1, 10), bytes(1e4, 2e7);
  for (int trial = 0; trial < 120; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 6);
    std::vector<ProfileNode> nodes;
    for (int i = 0; i < n; ++i) {
      nodes.push_back({absl::StrCat("n", i), "L", ms(rng), ms(rng), bytes(rng),
                       bytes(rng)});
    }
    auto seq = BuildAntichainStates(Chain(nodes));
    AqueductModelOptions o;
    const int workers = 1 + static_cast<int>(rng() % 5);
    o.levels = {{workers, 1e9}};
    if (trial % 4 == 1 && workers > 1) o.levels = {{2, 1e10}, {workers, 1e9}};
    int M = 1;
    for (const PlannerLevel& l : o.levels) M *= l.workers;
    if (trial % 3 == 0) {
      for (int w = 0; w < M; ++w)
        o.worker_speed.push_back(0.5 + (rng() % 4) / 2.0);
    }
    o.straight_pipeline = trial % 5 == 0 && M <= n;
    o.use_fewer_machines = trial % 6 == 2;
    o.allreduce_overlap = (trial % 3) * 0.4;
    if (trial % 7 == 0) o.memory_limit_bytes = 1e8;
    const double brute = BruteForce(*seq, o);
    auto dp = SolveAqueductModel(*seq, o);
    if (brute == std::numeric_limits<double>::infinity()) {
      EXPECT_FALSE(dp.ok()) << "trial " << trial;
      continue;
    }
    ASSERT_TRUE(dp.ok()) << "trial " << trial << ": " << dp.status();
    EXPECT_NEAR(dp->time_per_minibatch_s, brute, 1e-12 * brute)
        << "trial " << trial;
    double worst = 0;
    int next = 0, rank = 0;
    for (const AqueductStage& s : dp->stages) {
      EXPECT_EQ(s.start, next);
      EXPECT_EQ(s.first_rank, rank);
      next = s.end;
      rank += s.replicas;
      worst = std::max(worst, s.cost.time_s);
    }
    EXPECT_EQ(next, n);
    EXPECT_DOUBLE_EQ(worst, dp->time_per_minibatch_s);
  }
}

TEST(AqueductModelTest, RejectsBadOptions) {
  auto seq = BuildAntichainStates(Chain({{"a", "A", 1, 1, 1, 1}}));
  AqueductModelOptions o;
  o.levels = {{2, 1e9}};
  o.schedule = static_cast<Schedule>(99);
  EXPECT_NE(SolveAqueductModel(*seq, o).status().message().find(
                "schedule 99 is not a known schedule"),
            std::string::npos);
  o.schedule = v1::SCHEDULE_GPIPE;
  o.worker_speed = {1};
  EXPECT_NE(SolveAqueductModel(*seq, o).status().message().find(
                "1 worker speeds given for 2 workers"),
            std::string::npos);
  o.worker_speed = {1, -1};
  EXPECT_FALSE(SolveAqueductModel(*seq, o).ok());
}

TEST(PlanTest, PipeDreamPlanFields) {
  std::vector<ProfileNode> nodes;
  for (int i = 0; i < 6; ++i) {
    ProfileNode n{absl::StrCat("layer", i), "L", 2, 4, 1e5, 1e5};
    n.layer_index = i;
    nodes.push_back(n);
  }
  PlanRequest request;
  request.levels = {{3, 1e9}};
  request.straight_pipeline = true;
  auto plan = MakePlan(Chain(nodes), request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->stages_size(), 3);
  EXPECT_EQ(plan->noam(), 3);
  EXPECT_DOUBLE_EQ(plan->time_per_minibatch_s(), 0.012);
  EXPECT_DOUBLE_EQ(plan->single_worker_time_s(), 0.036);
  EXPECT_DOUBLE_EQ(plan->speedup_vs_single(), 3.0);
  EXPECT_EQ(plan->stages(1).start(), 2);
  EXPECT_EQ(plan->stages(1).end(), 4);
  EXPECT_EQ(plan->stages(1).first_layer(), 2);
  EXPECT_EQ(plan->stages(1).end_layer(), 4);
  EXPECT_EQ(plan->stages(1).warmup_depth(), 1);
  EXPECT_EQ(plan->stages(2).warmup_depth(), 0);
  EXPECT_EQ(plan->stages(2).worker_ranks(0), 2);
  EXPECT_EQ(plan->stages(0).node_ids_size(), 2);
  EXPECT_NE(FormatPlan(*plan).find("time per minibatch 0.012000 s"),
            std::string::npos)
      << FormatPlan(*plan);

  // More straight stages than states is refused.
  request.levels = {{7, 1e9}};
  auto too_many = MakePlan(Chain(nodes), request);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(too_many.status().message().find("needs at least 7 stages"),
            std::string::npos);
  request.levels = {{2, 1e9}};
  request.cost_model = static_cast<CostModel>(7);
  EXPECT_FALSE(MakePlan(Chain(nodes), request).ok());
  request.cost_model = v1::COST_MODEL_AQUEDUCT;
  auto aq = MakePlan(Chain(nodes), request);
  ASSERT_TRUE(aq.ok()) << aq.status();
  EXPECT_EQ(aq->cost_model(), "aqueduct");
  EXPECT_GT(aq->speedup_vs_single(), 1.0);
}

// PipeDream's stage time in the contiguous-rank DP (pipedream_costs): with
// equal speeds on one level it reaches SolvePipeDream's objective, and with
// unequal ones the exhaustive search's.
TEST(AqueductModelTest, PipeDreamCostsMatchPipeDreamAndExhaustiveSearch) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> ms(0.1, 10), bytes(1e4, 2e7);
  for (int trial = 0; trial < 120; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 6);
    std::vector<ProfileNode> nodes;
    for (int i = 0; i < n; ++i) {
      nodes.push_back({absl::StrCat("n", i), "L", ms(rng), ms(rng), bytes(rng),
                       bytes(rng)});
    }
    auto seq = BuildAntichainStates(Chain(nodes));
    ASSERT_TRUE(seq.ok());
    const int workers = 1 + static_cast<int>(rng() % 5);
    AqueductModelOptions o;
    o.pipedream_costs = true;
    o.levels = {{workers, trial % 2 ? 1e9 : 5e8}};
    o.straight_pipeline = trial % 5 == 0 && workers <= n;
    const std::string what = absl::StrCat("trial ", trial);
    // Against PipeDream with every worker used (PipeDream's
    // use_fewer_machines leaves workers idle level by level, not as this
    // DP does; the coordinator never asks for it).
    if (trial % 2 == 0) {
      PipeDreamOptions p;
      p.levels = o.levels;
      p.straight_pipeline = o.straight_pipeline;
      auto pipedream = SolvePipeDream(*seq, p);
      auto dp = SolveAqueductModel(*seq, o);
      ASSERT_TRUE(pipedream.ok()) << what << ": " << pipedream.status();
      ASSERT_TRUE(dp.ok()) << what << ": " << dp.status();
      EXPECT_NEAR(dp->time_per_minibatch_s, pipedream->time_per_stage_s,
                  1e-9 * pipedream->time_per_stage_s)
          << what;
      continue;
    }
    o.use_fewer_machines = trial % 6 == 3;
    for (int w = 0; w < workers; ++w) {
      o.worker_speed.push_back(0.25 + (rng() % 4) / 4.0);
    }
    const double brute = BruteForce(*seq, o);
    auto dp = SolveAqueductModel(*seq, o);
    ASSERT_TRUE(dp.ok()) << what << ": " << dp.status();
    EXPECT_NEAR(dp->time_per_minibatch_s, brute, 1e-12 * brute) << what;
  }
}

// Nine equal layers of 6 ms, no parameters.
ProfileGraph NineLayers() {
  std::vector<ProfileNode> nodes;
  for (int i = 0; i < 9; ++i) {
    ProfileNode n{absl::StrCat("layer", i), "L", 2, 4, 1e3, 0};
    n.layer_index = i;
    nodes.push_back(n);
  }
  return Chain(nodes);
}

TEST(PlanTest, ASlowWorkerGetsFewerLayersUnderEitherCostModel) {
  for (CostModel model : {v1::COST_MODEL_PIPEDREAM, v1::COST_MODEL_AQUEDUCT}) {
    const std::string what = CostModelName(model);
    PlanRequest request;
    request.cost_model = model;
    request.levels = {{2, 1e12}};
    request.straight_pipeline = true;
    // Rank 1 at half speed: 6 layers (36 ms) and 3 (18 ms at half speed).
    request.worker_speed = {1, 0.5};
    auto plan = MakePlan(NineLayers(), request);
    ASSERT_TRUE(plan.ok()) << what << ": " << plan.status();
    ASSERT_EQ(plan->stages_size(), 2) << what;
    EXPECT_EQ(plan->stages(0).end_layer() - plan->stages(0).first_layer(), 6)
        << what;
    EXPECT_EQ(plan->stages(1).end_layer() - plan->stages(1).first_layer(), 3)
        << what;
    EXPECT_EQ(plan->stages(1).worker_ranks(0), 1) << what;
    EXPECT_DOUBLE_EQ(plan->stages(0).worker_speed(), 1) << what;
    EXPECT_DOUBLE_EQ(plan->stages(1).worker_speed(), 0.5) << what;
    ASSERT_EQ(plan->worker_speeds_size(), 2) << what;
    EXPECT_NEAR(plan->time_per_minibatch_s(), 0.036, 1e-9) << what;
    // The slow stage's compute is its time at full speed; the simulator's
    // busiest worker runs it at its speed.
    EXPECT_NEAR(plan->stages(1).compute_time_s(), 0.018, 1e-12) << what;
    EXPECT_NE(FormatPlan(*plan).find("worker speeds by rank (fastest 1): "
                                     "1.00 0.50"),
              std::string::npos)
        << FormatPlan(*plan);

    // The slow worker first: it still gets the 3 layers.
    request.worker_speed = {0.5, 1};
    plan = MakePlan(NineLayers(), request);
    ASSERT_TRUE(plan.ok()) << what << ": " << plan.status();
    EXPECT_EQ(plan->stages(0).end_layer() - plan->stages(0).first_layer(), 3)
        << what;

    // Equal workers: the homogeneous plan's 5 + 4 split (either way).
    request.worker_speed = {};
    plan = MakePlan(NineLayers(), request);
    ASSERT_TRUE(plan.ok()) << what << ": " << plan.status();
    const int first =
        plan->stages(0).end_layer() - plan->stages(0).first_layer();
    EXPECT_TRUE(first == 4 || first == 5) << what << "\n" << FormatPlan(*plan);
    EXPECT_EQ(plan->worker_speeds_size(), 0) << what;
  }
}

TEST(PlanTest, ASlowWorkerIsNotMadeAReplicaOfFastOnes) {
  // Four workers, the last four times slower: no parameters, so the equal
  // workers' plan replicates; the slow one must not hold a share of a
  // replicated stage it would slow down, and holds the fewest layers.
  PlanRequest request;
  request.levels = {{4, 1e12}};
  auto equal = MakePlan(NineLayers(), request);
  ASSERT_TRUE(equal.ok()) << equal.status();
  request.worker_speed = {1, 1, 1, 0.25};
  auto plan = MakePlan(NineLayers(), request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  int slow_layers = -1, most_layers = 0;
  for (const PlanStage& stage : plan->stages()) {
    const int layers = stage.end_layer() - stage.first_layer();
    most_layers = std::max(most_layers, layers);
    for (int rank : stage.worker_ranks()) {
      if (rank != 3) continue;
      EXPECT_EQ(stage.replicas(), 1) << FormatPlan(*plan);
      slow_layers = layers;
    }
  }
  EXPECT_EQ(slow_layers, 1) << FormatPlan(*plan);
  // 8 layers on 3 fast replicas (16 ms) beat the slow worker's 24 ms per
  // layer only if it holds one layer: 24 ms.
  EXPECT_NEAR(plan->time_per_minibatch_s(), 0.024, 1e-9) << FormatPlan(*plan);
  EXPECT_GT(plan->time_per_minibatch_s(), equal->time_per_minibatch_s());
}

TEST(PlanTest, EqualSpeedsGiveTheHomogeneousPlanBitForBit) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> ms(0.1, 10), bytes(1e4, 2e7);
  std::vector<ProfileNode> nodes;
  for (int i = 0; i < 12; ++i) {
    ProfileNode n{absl::StrCat("layer", i),
                  "L",
                  ms(rng),
                  ms(rng),
                  bytes(rng),
                  bytes(rng)};
    n.layer_index = i;
    nodes.push_back(n);
  }
  for (CostModel model : {v1::COST_MODEL_PIPEDREAM, v1::COST_MODEL_AQUEDUCT}) {
    for (bool straight : {false, true}) {
      PlanRequest request;
      request.cost_model = model;
      request.levels = {{4, 1e9}};
      request.straight_pipeline = straight;
      auto none = MakePlan(Chain(nodes), request);
      request.worker_speed = {1, 1, 1, 1};
      auto ones = MakePlan(Chain(nodes), request);
      request.worker_speed = {0.5, 0.5, 0.5, 0.5};
      auto halves = MakePlan(Chain(nodes), request);
      ASSERT_TRUE(none.ok() && ones.ok() && halves.ok());
      EXPECT_EQ(none->SerializeAsString(), ones->SerializeAsString());
      EXPECT_EQ(ones->worker_speeds_size(), 0);
      // The same cut and placement (equal speeds place nothing).
      ASSERT_EQ(halves->stages_size(), none->stages_size());
      for (int s = 0; s < none->stages_size(); ++s) {
        EXPECT_EQ(halves->stages(s).end(), none->stages(s).end());
        EXPECT_EQ(halves->stages(s).replicas(), none->stages(s).replicas());
      }
    }
  }
}

}  // namespace
}  // namespace aqueduct
