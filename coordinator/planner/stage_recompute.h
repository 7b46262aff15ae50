// Stage-aware recomputation (Merak's): under 1F1B a stage near the input
// keeps more microbatches' activations in flight than one near the
// output, so one recomputation mode for every stage recomputes where it
// need not. Given a plan whose stages all recompute as one mode, the
// busiest stage (the one that bounds the step) takes the lightest mode
// (none, then selective, then the plan's) whose predicted memory still
// fits the smallest worker's memory, and again while the busiest stage
// can: its compute, time and memory become that mode's (from a member's
// profile in each mode, coordinator/planner/tensor_groups.h). Stages that
// do not bound the step keep the plan's mode (lightening them would buy
// no time and spread the workers' memory apart).
//
// Pure; thread-safe.
#ifndef AQUEDUCT_COORDINATOR_PLANNER_STAGE_RECOMPUTE_H_
#define AQUEDUCT_COORDINATOR_PLANNER_STAGE_RECOMPUTE_H_

#include <array>
#include <cstdint>

#include "pipeline/recompute.h"
#include "proto/types.h"

namespace aqueduct {

// A member's profile in each mode, indexed by Recompute (none, selective,
// full); nodes matched by LayerProfile.layer_index.
using ProfilesByMode = std::array<const ModelProfile*, 3>;

// Lightens the busiest stages of `plan` (each recomputing as `mode`, with
// first_layer/end_layer known) while `worker_memory` (> 0) allows, under
// the plan's decided schedule and microbatches. Returns whether any stage
// changed; the caller re-simulates the step.
bool LightenRecomputation(const ProfilesByMode& profiles, Recompute mode,
                          int64_t worker_memory, PartitionPlan* plan);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_PLANNER_STAGE_RECOMPUTE_H_
