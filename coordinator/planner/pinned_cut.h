// A cut the spec pins (pipeline.stages: the model layers of each stage):
// the profile's nodes merged into one node per pinned stage, so that the
// planner's straight pipeline over that many workers can only take the
// pinned cut and still prices it (compute, transfers, memory) under its
// cost model; and the plan's stages given back their layers and nodes.
//
// Pure code; thread-safe.
#ifndef AQUEDUCT_COORDINATOR_PLANNER_PINNED_CUT_H_
#define AQUEDUCT_COORDINATOR_PLANNER_PINNED_CUT_H_

#include <vector>

#include "absl/status/statusor.h"
#include "proto/types.h"

namespace aqueduct {

// `profile` (a chain whose nodes all know their layer) with the layers of
// each pinned stage merged: times, parameters and saved bytes summed, the
// stage's output the last layer's. INVALID_ARGUMENT naming
// pipeline.stages when the counts do not cover the profile's layers.
absl::StatusOr<ModelProfile> MergePinnedStages(
    const ModelProfile& profile, const std::vector<int>& layers_per_stage);

// The plan made over MergePinnedStages(profile, ...) with each stage's
// layer range and node ids those of `profile`.
void RestorePinnedLayers(const ModelProfile& profile,
                         const std::vector<int>& layers_per_stage,
                         PartitionPlan* plan);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_PLANNER_PINNED_CUT_H_
