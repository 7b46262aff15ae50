// Plans and supplied profiles against the workers' memory, and the numbers
// of profiles and plan requests bounded before the planner uses them
// (issue 14).
#include "coordinator/planner/memory_fit.h"

#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "coordinator/planner/plan.h"
#include "gtest/gtest.h"
#include "pipeline/spec.h"

namespace aqueduct {
namespace {

// A chain of `n` layers of `param_bytes` each, 1e6 bytes of activations.
ProfileGraph Chain(int n, double param_bytes) {
  std::vector<ProfileNode> nodes;
  for (int i = 0; i < n; ++i) {
    ProfileNode node{absl::StrCat("layer", i), "L", 2, 4, 1e6, param_bytes};
    node.layer_index = i;
    nodes.push_back(node);
  }
  return *ProfileGraph::Chain(nodes);
}

TEST(MemoryFitTest, APlanLargerThanItsWorkerNamesTheStageAndTheNumbers) {
  PlanRequest request;
  request.levels = {{2, 1e9}};
  request.straight_pipeline = true;
  auto plan = MakePlan(Chain(4, 1e9), request);
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_EQ(plan->stages_size(), 2);
  const double first = plan->stages(0).predicted_memory_bytes();
  ASSERT_GT(first, plan->stages(1).predicted_memory_bytes());
  // Workers that hold the plan, and workers of unknown memory.
  EXPECT_TRUE(
      CheckPlanFits(*plan, {20000000000, 20000000000}, {"a", "b"}).ok());
  EXPECT_TRUE(CheckPlanFits(*plan, {0, 0}, {"a", "b"}).ok());
  // Stage 0 keeps a stashed version for the stage after it: 2 weight
  // versions, gradients and SGD's state of 2 GB, and 2 minibatches of 2 MB
  // of activations.
  EXPECT_DOUBLE_EQ(first, 2e9 * 4 + 2 * 2e6);
  const absl::Status small =
      CheckPlanFits(*plan, {6000000000, 20000000000}, {"w1:7071", "w2:7071"});
  EXPECT_EQ(small.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(small.message(),
            "stage 0 (model.layers[0, 2)) is predicted to need 8.0 GB "
            "(8004000000 bytes) per worker, more than the 6.0 GB (6000000000 "
            "bytes) of worker w1:7071 it was assigned to; run it on more "
            "workers or on workers with more memory");
  EXPECT_EQ(CheckPlanFits(*plan, {0}, {"a"}).code(),  // No rank 1.
            absl::StatusCode::kInvalidArgument);
}

JobSpec Spec(const std::string& extra) {
  auto spec = ParseJobSpec(
      "model { layers { linear { in_features: 1000000 out_features: 1000000 "
      "} } } data { fashion_mnist_dir: \"/d\" } optimizer { adam { lr: "
      "0.001 } } batch_size: 32 max_steps: 2 " +
          extra,
      "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// The 1e6 x 1e6 Linear of issue 14, with a profile that says so: refused
// at submit instead of reaching a worker.
TEST(MemoryFitTest, ASuppliedProfileWhoseNodeFitsNoWorker) {
  ModelProfile profile;
  LayerProfile* node = profile.add_nodes();
  node->set_id("layer0");
  node->set_layer_index(0);
  node->set_forward_ms(1);
  node->set_parameter_bytes(4.000004e12);
  node->set_activation_bytes(1.28e8);
  auto graph = ProfileGraph::FromProto(profile);
  ASSERT_TRUE(graph.ok()) << graph.status();
  const JobSpec spec = Spec("");
  EXPECT_TRUE(CheckProfileFits(*graph, spec, {}).ok());  // Memory unknown.
  const absl::Status s = CheckProfileFits(
      *graph, spec, {64000000000, "the largest registered worker's memory"});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "profile node 'layer0' (model.layers[0]) needs at least 16.0 TB "
            "on any worker: parameter_bytes=4000004000000 with gradients and "
            "optimizer state, and saved_bytes=128000000 in flight; more than "
            "the largest registered worker's memory (64.0 GB)");
  // A profile that claims the layer is small passes here; the worker then
  // refuses its stage (pipeline/spec.h, CheckStageMemory).
  profile.mutable_nodes(0)->set_parameter_bytes(4e6);
  EXPECT_TRUE(CheckProfileFits(*ProfileGraph::FromProto(profile), spec,
                               {64000000000, "w"})
                  .ok());
}

TEST(MemoryFitTest, ProfileValuesAreFiniteAndBounded) {
  ModelProfile profile;
  LayerProfile* node = profile.add_nodes();
  node->set_id("n");
  node->set_saved_bytes(NAN);
  EXPECT_EQ(ProfileGraph::FromProto(profile).status().message(),
            "nodes[0]: node 'n': saved_bytes=nan must be finite and >= 0");
  node->set_saved_bytes(0);
  node->set_parameter_bytes(1e300);
  EXPECT_EQ(ProfileGraph::FromProto(profile).status().message(),
            "nodes[0]: node 'n': parameter_size=1e+300 must be at most 1e+18");
  node->set_parameter_bytes(0);
  node->set_backward_ms(INFINITY);
  EXPECT_FALSE(ProfileGraph::FromProto(profile).ok());
  node->set_backward_ms(0);
  profile.set_gemm_gflops(NAN);
  EXPECT_EQ(ProfileGraph::FromProto(profile).status().message(),
            "gemm_gflops=nan must be finite and >= 0");
  profile.set_gemm_gflops(1);
  profile.set_batch_size(-1);
  EXPECT_EQ(ProfileGraph::FromProto(profile).status().message(),
            "batch_size=-1 must be in [0, 16777216]");
  ModelProfile many;
  for (int i = 0; i <= kMaxLayers; ++i)
    many.add_nodes()->set_id(absl::StrCat(i));
  EXPECT_EQ(ProfileGraph::FromProto(many).status().message(),
            "nodes[4096]: node '4096': a profile has at most 4096 nodes");
}

TEST(MemoryFitTest, PlanRequestNumbersAreFiniteAndBounded) {
  const ProfileGraph graph = Chain(3, 1e6);
  PlanRequest request;
  request.levels = {{2, NAN}};
  EXPECT_EQ(MakePlan(graph, request).status().message(),
            "levels[0].bandwidth_bytes_per_s=nan must be finite and in [1, "
            "1e+15]");
  request.levels = {{2, INFINITY}};
  EXPECT_FALSE(MakePlan(graph, request).ok());
  // Each level in range; the product would overflow an int.
  request.levels = {{100000, 1e9}, {100000, 1e9}, {100000, 1e9}};
  EXPECT_EQ(MakePlan(graph, request).status().message(),
            "the levels' workers multiply to 1000000000000000, more than "
            "100000");
  request.levels = {{-1, 1e9}};
  EXPECT_EQ(MakePlan(graph, request).status().message(),
            "levels[0].workers=-1 must be in [1, 100000]");
  request.levels = {{2, 1e9}};
  request.allreduce_overlap = NAN;
  EXPECT_EQ(MakePlan(graph, request).status().message(),
            "allreduce_overlap=nan must be finite and in [0, 1]");
  request.allreduce_overlap = 0;
  request.memory_limit_bytes = NAN;
  EXPECT_FALSE(MakePlan(graph, request).ok());
  request.memory_limit_bytes.reset();
  request.worker_speed = {1, INFINITY};
  EXPECT_EQ(MakePlan(graph, request).status().message(),
            "worker_speed[1]=inf must be finite and in [1e-06, 1e+06]");
  request.worker_speed.clear();
  request.microbatches = -1;
  EXPECT_EQ(MakePlan(graph, request).status().message(),
            "microbatches=-1 must be in [0, 65536]");
  request.microbatches = 0;
  // The solvers' tables of 200 states over 100,000 workers are too large.
  request.levels = {{100000, 1e9}};
  request.use_fewer_machines = true;
  EXPECT_NE(MakePlan(Chain(200, 1e6), request)
                .status()
                .message()
                .find("more than the planner's tables hold"),
            std::string::npos);
}

}  // namespace
}  // namespace aqueduct
