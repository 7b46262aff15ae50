#include "coordinator/planner/memory_fit.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "coordinator/planner/aqueduct_model.h"
#include "pipeline/memory.h"
#include "pipeline/policy.h"

namespace aqueduct {

namespace {

// Bytes as an int64 for FormatBytes: a prediction past 2^63 saturates.
int64_t Bytes(double bytes) {
  if (!(bytes < 9.2e18)) return kSaturated;
  return bytes > 0 ? static_cast<int64_t>(std::ceil(bytes)) : 0;
}

std::string Layers(const PlanStage& stage) {
  if (stage.first_layer() < 0) return "";
  return absl::StrCat(" (model.layers[", stage.first_layer(), ", ",
                      stage.end_layer(), "))");
}

}  // namespace

absl::Status CheckPlanFits(const PartitionPlan& plan,
                           const std::vector<int64_t>& memory_bytes,
                           const std::vector<std::string>& worker_ids) {
  for (int s = 0; s < plan.stages_size(); ++s) {
    const PlanStage& stage = plan.stages(s);
    for (int rank : stage.worker_ranks()) {
      if (rank < 0 || rank >= static_cast<int>(memory_bytes.size()) ||
          rank >= static_cast<int>(worker_ids.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat("plan stage ", s, " names worker rank ", rank, " of ",
                         memory_bytes.size()));
      }
      const int64_t has = memory_bytes[rank];
      const double needs = stage.predicted_memory_bytes();
      if (has <= 0 || needs <= static_cast<double>(has)) continue;
      return absl::FailedPreconditionError(absl::StrCat(
          "stage ", s, Layers(stage), " is predicted to need ",
          FormatBytes(Bytes(needs)), " (", Bytes(needs),
          " bytes) per worker, more than the ", FormatBytes(has), " (", has,
          " bytes) of worker ", worker_ids[rank],
          " it was assigned to; run it on more workers or on workers with "
          "more memory"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckProfileFits(const ProfileGraph& graph, const JobSpec& spec,
                              const MemoryLimit& memory) {
  if (memory.bytes <= 0) return absl::OkStatus();
  auto policy = ResolvePipeline(spec);
  if (!policy.ok()) return policy.status();
  const int micro =
      MicrobatchesFor(*policy, spec.batch_size(), policy->workers).value_or(1);
  const int factor = OptimizerStateFactor(spec.optimizer());
  for (const ProfileNode& node : graph.nodes()) {
    const double needs =
        StageMemoryBytes(policy->schedule, micro, node.parameter_bytes,
                         node.MemoryBytes(), /*depth=*/0, factor);
    if (needs <= static_cast<double>(memory.bytes)) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "profile node '", node.id, "'",
        node.layer_index >= 0
            ? absl::StrCat(" (model.layers[", node.layer_index, "])")
            : "",
        " needs at least ", FormatBytes(Bytes(needs)),
        " on any worker: parameter_bytes=", Bytes(node.parameter_bytes),
        " with gradients and optimizer state, and saved_bytes=",
        Bytes(node.MemoryBytes()), " in flight; more than ", Describe(memory)));
  }
  return absl::OkStatus();
}

}  // namespace aqueduct
