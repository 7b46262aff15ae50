#include "coordinator/planner/pinned_cut.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace aqueduct {

namespace {

// The first layer of each pinned stage, and one past the last stage's.
std::vector<int> StageStarts(const std::vector<int>& layers_per_stage) {
  std::vector<int> starts = {0};
  for (int n : layers_per_stage) starts.push_back(starts.back() + n);
  return starts;
}

// The pinned stage holding `layer` (starts from StageStarts).
int StageOf(const std::vector<int>& starts, int layer) {
  int s = 0;
  while (s + 2 < static_cast<int>(starts.size()) && layer >= starts[s + 1]) {
    ++s;
  }
  return s;
}

void Absorb(const LayerProfile& node, LayerProfile* merged) {
  merged->set_forward_ms(merged->forward_ms() + node.forward_ms());
  merged->set_backward_ms(merged->backward_ms() + node.backward_ms());
  merged->set_optimizer_ms(merged->optimizer_ms() + node.optimizer_ms());
  merged->set_parameter_bytes(merged->parameter_bytes() +
                              node.parameter_bytes());
  merged->set_saved_bytes(merged->saved_bytes() + node.saved_bytes());
  merged->set_activation_bytes(node.activation_bytes());
}

absl::Status CheckCovers(const ModelProfile& profile,
                         const std::vector<int>& layers_per_stage) {
  int layers = 0;
  for (const LayerProfile& node : profile.nodes()) {
    if (!node.has_layer_index()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline.stages pins a cut by model layers, but the profile's "
          "node '",
          node.id(), "' does not say which layer it measures"));
    }
    layers = std::max(layers, node.layer_index() + 1);
  }
  int pinned = 0;
  for (int n : layers_per_stage) pinned += n;
  if (pinned != layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.stages holds ", pinned,
                     " layers in all, but the profile measures ", layers));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelProfile> MergePinnedStages(
    const ModelProfile& profile, const std::vector<int>& layers_per_stage) {
  if (absl::Status s = CheckCovers(profile, layers_per_stage); !s.ok()) {
    return s;
  }
  const std::vector<int> starts = StageStarts(layers_per_stage);
  ModelProfile merged = profile;
  merged.clear_nodes();
  merged.clear_edges();
  for (size_t s = 0; s < layers_per_stage.size(); ++s) {
    LayerProfile* node = merged.add_nodes();
    node->set_id(absl::StrCat("pinned_stage", s));
    node->set_description(
        absl::StrCat("model.layers[", starts[s], ", ", starts[s + 1], ")"));
    node->set_layer_index(starts[s]);
    if (s > 0) {
      ProfileEdge* edge = merged.add_edges();
      edge->set_from(absl::StrCat("pinned_stage", s - 1));
      edge->set_to(node->id());
    }
  }
  for (const LayerProfile& node : profile.nodes()) {
    Absorb(node, merged.mutable_nodes(StageOf(starts, node.layer_index())));
  }
  return merged;
}

void RestorePinnedLayers(const ModelProfile& profile,
                         const std::vector<int>& layers_per_stage,
                         PartitionPlan* plan) {
  const std::vector<int> starts = StageStarts(layers_per_stage);
  for (PlanStage& stage : *plan->mutable_stages()) {
    if (stage.first_layer() < 0) continue;
    const int last = std::max(stage.first_layer(), stage.end_layer() - 1);
    stage.set_end_layer(starts[StageOf(starts, last) + 1]);
    stage.clear_node_ids();
    for (const LayerProfile& node : profile.nodes()) {
      if (node.layer_index() >= stage.first_layer() &&
          node.layer_index() < stage.end_layer()) {
        stage.add_node_ids(node.id());
      }
    }
  }
}

}  // namespace aqueduct
