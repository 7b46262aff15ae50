// The joint planner (coordinator/planning.h) on a hand-made GPT profile:
// what it weighs when the spec leaves the tensor degree and the
// recomputation open, what it keeps when they are fixed, the memory that
// rules configurations out, and the collectives' latency from the hosts'
// cores.
#include "coordinator/planning.h"

#include <algorithm>
#include <set>
#include <string>

#include "coordinator/planner/tensor_groups.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

// 2 embeddings, 4 blocks (width 64, 4 heads, context 32), a head; batch 16.
JobSpec Gpt() {
  JobSpec spec;
  ModelSpec* m = spec.mutable_model();
  auto* wte = m->add_layers()->mutable_token_embedding();
  wte->set_vocab_size(128);
  wte->set_dim(64);
  auto* wpe = m->add_layers()->mutable_position_embedding();
  wpe->set_context(32);
  wpe->set_dim(64);
  for (int b = 0; b < 4; ++b) {
    auto* block = m->add_layers()->mutable_transformer_block();
    block->set_dim(64);
    block->set_heads(4);
  }
  auto* head = m->add_layers()->mutable_linear();
  head->set_in_features(64);
  head->set_out_features(128);
  spec.set_batch_size(16);
  spec.mutable_optimizer()->mutable_adam()->set_lr(1e-3);
  spec.mutable_pipeline()->set_schedule("1f1b_flush");
  spec.mutable_pipeline()->set_workers(4);
  return spec;
}

// Blocks of `block_ms` forward (twice that backward) and 4 MB saved each.
ModelProfile Profile(double block_ms) {
  ModelProfile p;
  p.set_batch_size(16);
  for (int l = 0; l < 7; ++l) {
    LayerProfile* n = p.add_nodes();
    n->set_id("layer" + std::to_string(l));
    n->set_layer_index(l);
    const bool block = l >= 2 && l < 6;
    n->set_forward_ms(block ? block_ms : 0.1);
    n->set_backward_ms(block ? 2 * block_ms : 0.2);
    n->set_activation_bytes(16 * 32 * 64 * 4);
    n->set_parameter_bytes(block ? 12 * 64 * 64 * 4 : 128 * 64 * 4);
    n->set_saved_bytes(block ? 4e6 : 16 * 32 * 64 * 4);
    if (l > 0) {
      ProfileEdge* e = p.add_edges();
      e->set_from("layer" + std::to_string(l - 1));
      e->set_to(n->id());
    }
  }
  return p;
}

TEST(PlanningTest, WeighsEveryOpenDegreeAndModeAndListsThem) {
  auto plan = PlanOn(Gpt(), Profile(10), 4, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  const v1::PipelineDecision& d = plan->pipeline();
  // Degrees 1, 2, 4 (all divide 4 workers and 4 heads) x 3 modes.
  ASSERT_EQ(d.candidates_size(), 9);
  EXPECT_TRUE(d.candidates(0).rejected().empty());
  EXPECT_EQ(d.candidates(0).tensor_parallel(), d.tensor_parallel());
  EXPECT_EQ(d.candidates(0).recompute(), d.recompute());
  for (int i = 1; i < d.candidates_size(); ++i) {
    EXPECT_GE(d.candidates(i).predicted_step_s(),
              d.candidates(0).predicted_step_s());
    EXPECT_NE(d.candidates(i).rejected().find("slower"), std::string::npos)
        << d.candidates(i).rejected();
  }
  // Recomputation only costs time when memory does not bind.
  EXPECT_EQ(d.recompute(), "none");
  for (const PlanStage& s : plan->stages()) {
    EXPECT_EQ(s.worker_ranks_size(),
              s.replicas() * std::max(1, s.tensor_parallel()));
  }
}

TEST(PlanningTest, FixedDegreeAndModeArePlannedAlone) {
  JobSpec spec = Gpt();
  spec.mutable_pipeline()->set_tensor_parallel(2);
  spec.mutable_pipeline()->set_recompute("selective");
  auto plan = PlanOn(spec, Profile(10), 4, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->pipeline().candidates_size(), 0);
  EXPECT_EQ(plan->pipeline().tensor_parallel(), 2);
  for (const PlanStage& s : plan->stages()) {
    EXPECT_EQ(s.tensor_parallel(), 2);
    EXPECT_EQ(s.recompute(), "selective");
    // Tensor innermost: a group's ranks are consecutive.
    for (int i = 0; i + 1 < s.worker_ranks_size(); i += 2) {
      EXPECT_EQ(s.worker_ranks(i + 1), s.worker_ranks(i) + 1);
    }
  }
  spec.mutable_pipeline()->set_tensor_parallel(3);
  EXPECT_FALSE(PlanOn(spec, Profile(10), 4, {}).ok());
}

// Memory rules the whole layers out; what is left says why it lost.
TEST(PlanningTest, MemoryRulesConfigurationsOut) {
  auto open = PlanOn(Gpt(), Profile(10), 4, {});
  ASSERT_TRUE(open.ok());
  double whole = 0;
  for (const v1::PlanCandidate& c : open->pipeline().candidates()) {
    if (c.tensor_parallel() == 1 && c.recompute() == "none") {
      whole = c.predicted_memory_bytes();
    }
  }
  ASSERT_GT(whole, 0);
  const int64_t limit = static_cast<int64_t>(whole * 0.6);
  auto plan = PlanOn(Gpt(), Profile(10), 4, {}, limit);
  ASSERT_TRUE(plan.ok()) << plan.status();
  const v1::PipelineDecision& d = plan->pipeline();
  EXPECT_LE(d.candidates(0).predicted_memory_bytes(), limit);
  bool refused = false;
  for (const v1::PlanCandidate& c : d.candidates()) {
    if (c.tensor_parallel() == 1 && c.recompute() == "none") {
      refused = c.rejected().find("more than the smallest worker's") !=
                std::string::npos;
    }
  }
  EXPECT_TRUE(refused);
  EXPECT_FALSE(PlanOn(Gpt(), Profile(10), 4, {}, 1000).ok());
}

// With cores to spare the group's sums are cheap and heavy blocks go to
// tensor groups; on an oversubscribed host the same job stays a pipeline.
TEST(PlanningTest, OversubscribedHostsMakeTensorGroupsDear) {
  EXPECT_EQ(StepLatencyOf({{"a", 1, 4}, {"a", 1, 4}, {"b", 2, 2}}),
            kRingStepLatencyS);
  EXPECT_EQ(StepLatencyOf({{"a", 1, 2}, {"a", 1, 2}, {"a", 1, 2}}),
            kOversubscribedStepLatencyS);
  EXPECT_EQ(StepLatencyOf({{"a", 0, 0}, {"a", 0, 0}}), kRingStepLatencyS);
  auto idle = PlanOn(Gpt(), Profile(20), 4, {}, 0, kRingStepLatencyS);
  auto busy = PlanOn(Gpt(), Profile(20), 4, {}, 0, kOversubscribedStepLatencyS);
  ASSERT_TRUE(idle.ok() && busy.ok());
  EXPECT_GT(idle->pipeline().tensor_parallel(), 1);
  EXPECT_EQ(busy->pipeline().tensor_parallel(), 1);
}

// Stage-aware recomputation: under 1F1B the first stage keeps 4
// minibatches in flight and the last 1. When memory rules out no
// recomputation for the first stage, the last, which bounds the step (its
// head is heavy), still runs a lighter mode, and the step is faster than
// with one mode everywhere; the stages that do not bound it keep it.
TEST(PlanningTest, TheBusiestStageRecomputesLessWhereItFits) {
  JobSpec spec = Gpt();
  // Weight stashing: a straight pipeline, depth 3 to 0.
  spec.mutable_pipeline()->set_schedule("1f1b_stashed");
  ModelProfile profile = Profile(10);
  profile.mutable_nodes(6)->set_forward_ms(12);
  profile.mutable_nodes(6)->set_backward_ms(24);
  auto open = PlanOn(spec, profile, 4, {});
  ASSERT_TRUE(open.ok()) << open.status();
  ASSERT_EQ(open->stages_size(), 4);
  double whole = 0;
  for (const PlanStage& s : open->stages()) {
    whole = std::max(whole, s.predicted_memory_bytes());
  }
  const int64_t limit = static_cast<int64_t>(whole * 0.75);
  auto plan = PlanOn(spec, profile, 4, {}, limit);
  ASSERT_TRUE(plan.ok()) << plan.status();
  for (const PlanStage& s : plan->stages()) {
    EXPECT_LE(s.predicted_memory_bytes(), limit) << s.DebugString();
  }
  const std::string heavy = plan->stages(0).recompute();
  EXPECT_NE(heavy, "none");
  EXPECT_EQ(plan->stages(3).recompute(), "none")
      << plan->pipeline().recompute();
  EXPECT_EQ(plan->stages(1).recompute(), heavy);
  EXPECT_EQ(plan->pipeline().candidates(0).recompute(),
            plan->pipeline().recompute());
  // One mode for every stage, fixed: slower.
  JobSpec fixed = spec;
  fixed.mutable_pipeline()->set_recompute(heavy);
  auto uniform = PlanOn(fixed, profile, 4, {}, limit);
  ASSERT_TRUE(uniform.ok()) << uniform.status();
  EXPECT_LT(plan->time_per_minibatch_s(), uniform->time_per_minibatch_s());
}

// pipeline.straight: no replicated stages, whatever the profile favours.
TEST(PlanningTest, AStraightPipelineHasNoReplicas) {
  JobSpec spec = Gpt();
  spec.mutable_pipeline()->set_tensor_parallel(1);
  ModelProfile profile = Profile(10);
  profile.mutable_nodes(6)->set_forward_ms(12);
  profile.mutable_nodes(6)->set_backward_ms(24);
  auto open = PlanOn(spec, profile, 4, {});
  ASSERT_TRUE(open.ok()) << open.status();
  EXPECT_EQ(open->stages_size(), 1);  // Data parallel: 4 replicas.
  spec.mutable_pipeline()->set_straight(true);
  auto straight = PlanOn(spec, profile, 4, {});
  ASSERT_TRUE(straight.ok()) << straight.status();
  EXPECT_GT(straight->stages_size(), 1);
  for (const PlanStage& s : straight->stages()) EXPECT_EQ(s.replicas(), 1);
}

// pipeline.stages: the plan is exactly the pinned cut (a lopsided one the
// planner would not choose), priced under the cost model, with every
// layer's node on its stage; tensor groups hold one pinned stage each; a
// count the workers do not hold is refused, naming both.
TEST(PlanningTest, APinnedCutIsPlannedAsPinned) {
  JobSpec spec = Gpt();
  spec.mutable_pipeline()->set_tensor_parallel(1);
  for (int n : {4, 1, 1, 1}) spec.mutable_pipeline()->add_stages(n);
  auto plan = PlanOn(spec, Profile(10), 4, {});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->stages_size(), 4);
  const int first[] = {0, 4, 5, 6}, end[] = {4, 5, 6, 7};
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(plan->stages(s).first_layer(), first[s]);
    EXPECT_EQ(plan->stages(s).end_layer(), end[s]);
    EXPECT_EQ(plan->stages(s).replicas(), 1);
    EXPECT_EQ(plan->stages(s).node_ids_size(), end[s] - first[s]);
  }
  EXPECT_EQ(plan->stages(0).node_ids(3), "layer3");
  // Two blocks' compute bound the step.
  EXPECT_GT(plan->stages(0).compute_time_s(), 0.055);
  spec.mutable_pipeline()->set_tensor_parallel(2);
  spec.mutable_pipeline()->clear_stages();
  for (int n : {5, 2}) spec.mutable_pipeline()->add_stages(n);
  auto groups = PlanOn(spec, Profile(10), 4, {});
  ASSERT_TRUE(groups.ok()) << groups.status();
  ASSERT_EQ(groups->stages_size(), 2);
  EXPECT_EQ(groups->stages(1).first_layer(), 5);
  spec.mutable_pipeline()->set_tensor_parallel(1);
  auto wrong = PlanOn(spec, Profile(10), 4, {});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find("pins 2 stages"), std::string::npos)
      << wrong.status();
  EXPECT_NE(wrong.status().message().find("hold 4"), std::string::npos);
}

// Sequence parallelism in a member's profile: a block keeps half of its
// residual stream (x and x2, 16 x 32 x 64 floats each) and its backward
// gathers twice more; other layers do not change.
TEST(PlanningTest, SequenceParallelMembersKeepLessAndSendMore) {
  MemberCosts costs;
  costs.degree = 2;
  costs.batch_size = 16;
  const auto plain = MemberProfile(Gpt().model(), Profile(10), costs);
  costs.sequence = true;
  const auto split = MemberProfile(Gpt().model(), Profile(10), costs);
  ASSERT_TRUE(plain.ok() && split.ok());
  const LayerProfile& a = plain->nodes(2);
  const LayerProfile& b = split->nodes(2);
  EXPECT_DOUBLE_EQ(a.saved_bytes() - b.saved_bytes(), 16.0 * 32 * 64 * 4);
  EXPECT_GT(b.backward_ms(), a.backward_ms());
  EXPECT_DOUBLE_EQ(b.forward_ms(), a.forward_ms());
  EXPECT_EQ(plain->nodes(6).DebugString(), split->nodes(6).DebugString());
}

}  // namespace
}  // namespace aqueduct
