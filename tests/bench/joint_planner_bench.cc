// Time of the joint planner (coordinator/planning.h PlanOn with the tensor
// degree and the recomputation left to it) on a GPT-3-like profile: 2 + L
// transformer blocks + 2 layers (width 2048, 16 heads, context 1024, batch
// 64, compute from FLOPs at 100 TFLOP/s), on 8 and 64 workers (one level,
// 10 GB/s) and 1,024 workers (128 servers of 8: 100 GB/s inside, 10 GB/s
// between), each under a memory of `--memory_gib` per worker. Prints one
// line per case: the workers, the wall time, the configurations weighed
// and the chosen one.
//
//   joint_planner_bench [--layers 48] [--memory_gib 80] [--repeat 3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "coordinator/planning.h"

namespace aqueduct {
namespace {

constexpr int64_t kDim = 2048, kHeads = 16, kContext = 1024, kBatch = 64,
                  kVocab = 50304;
constexpr double kFlops = 100e12;

JobSpec GptSpec(int blocks) {
  JobSpec spec;
  ModelSpec* m = spec.mutable_model();
  auto* wte = m->add_layers()->mutable_token_embedding();
  wte->set_vocab_size(kVocab);
  wte->set_dim(kDim);
  auto* wpe = m->add_layers()->mutable_position_embedding();
  wpe->set_context(kContext);
  wpe->set_dim(kDim);
  for (int b = 0; b < blocks; ++b) {
    auto* block = m->add_layers()->mutable_transformer_block();
    block->set_dim(kDim);
    block->set_heads(kHeads);
  }
  m->add_layers()->mutable_layer_norm()->set_normalized_shape(kDim);
  auto* head = m->add_layers()->mutable_linear();
  head->set_in_features(kDim);
  head->set_out_features(kVocab);
  spec.set_batch_size(kBatch);
  spec.mutable_optimizer()->mutable_adam()->set_lr(1e-4);
  spec.mutable_pipeline()->set_schedule("1f1b_flush");
  return spec;
}

LayerProfile Node(int i, double flops, double activation, double params,
                  double saved) {
  LayerProfile p;
  p.set_id(absl::StrCat("layer", i));
  p.set_description(absl::StrCat("layer ", i));
  p.set_layer_index(i);
  p.set_forward_ms(flops / kFlops * 1e3);
  p.set_backward_ms(2 * flops / kFlops * 1e3);
  p.set_activation_bytes(activation);
  p.set_parameter_bytes(params);
  p.set_saved_bytes(saved);
  return p;
}

ModelProfile GptProfile(int blocks) {
  ModelProfile profile;
  profile.set_batch_size(kBatch);
  const double tokens = static_cast<double>(kBatch * kContext);
  const double act = tokens * kDim * 4;
  *profile.add_nodes() = Node(0, tokens * kDim, act, kVocab * kDim * 4.0, 0);
  *profile.add_nodes() = Node(1, tokens * kDim, act, kContext * kDim * 4.0, 0);
  const double c = kDim, t = kContext;
  const double block_flops = kBatch * (24 * t * c * c + 4 * t * t * c);
  // x, x2, qkv, probs (H T T), merged, mlp hidden: Megatron's ~34 T C + 5
  // H T^2 bytes per sample.
  const double saved = kBatch * (34 * t * c + 5 * kHeads * t * t);
  for (int b = 0; b < blocks; ++b) {
    *profile.add_nodes() = Node(2 + b, block_flops, act, 12 * c * c * 4, saved);
  }
  *profile.add_nodes() =
      Node(2 + blocks, tokens * kDim * 5, act, 2 * c * 4, act);
  *profile.add_nodes() =
      Node(3 + blocks, 2 * tokens * kDim * kVocab, tokens * kVocab * 4,
           kVocab * c * 4, tokens * kVocab * 4);
  for (int i = 0; i + 1 < profile.nodes_size(); ++i) {
    ProfileEdge* e = profile.add_edges();
    e->set_from(profile.nodes(i).id());
    e->set_to(profile.nodes(i + 1).id());
  }
  return profile;
}

int Main(int argc, char** argv) {
  int layers = 48, repeat = 3;
  double memory_gib = 80;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--layers") {
      (void)absl::SimpleAtoi(argv[i + 1], &layers);
    } else if (flag == "--repeat") {
      (void)absl::SimpleAtoi(argv[i + 1], &repeat);
    } else if (flag == "--memory_gib") {
      (void)absl::SimpleAtod(argv[i + 1], &memory_gib);
    } else {
      std::fprintf(stderr, "joint_planner_bench: unknown flag %s\n",
                   flag.c_str());
      return 2;
    }
  }
  const JobSpec spec = GptSpec(layers);
  const ModelProfile profile = GptProfile(layers);
  const int64_t memory = static_cast<int64_t>(memory_gib * (1LL << 30));
  struct Case {
    int workers;
    std::vector<PlannerLevel> levels;
  };
  const std::vector<Case> cases = {
      {8, {{8, 1e10}}}, {64, {{64, 1e10}}}, {1024, {{8, 1e11}, {128, 1e10}}}};
  for (const Case& c : cases) {
    std::vector<double> seconds;
    absl::StatusOr<PartitionPlan> plan;
    for (int r = 0; r < repeat; ++r) {
      const auto start = std::chrono::steady_clock::now();
      plan = PlanOn(spec, profile, c.workers, c.levels, memory);
      seconds.push_back(std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - start)
                            .count());
    }
    std::sort(seconds.begin(), seconds.end());
    if (!plan.ok()) {
      std::printf("%5d workers: %.3f s, failed: %s\n", c.workers,
                  seconds[seconds.size() / 2],
                  std::string(plan.status().message()).c_str());
      continue;
    }
    const v1::PipelineDecision& d = plan->pipeline();
    int replicas = 0;
    for (const PlanStage& s : plan->stages()) {
      replicas = std::max(replicas, s.replicas());
    }
    std::printf(
        "%5d workers: %.3f s (median of %d), %d configurations weighed; "
        "chose %d stages x %d replicas x tensor %d, recompute %s, %.4f s per "
        "minibatch\n",
        c.workers, seconds[seconds.size() / 2], repeat, d.candidates_size(),
        plan->stages_size(), replicas, std::max(1, d.tensor_parallel()),
        d.recompute().c_str(), d.predicted_step_s());
  }
  return 0;
}

}  // namespace
}  // namespace aqueduct

int main(int argc, char** argv) { return aqueduct::Main(argc, argv); }
