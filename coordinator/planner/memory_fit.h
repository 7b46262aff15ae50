// A plan's memory against its workers' (issue 14): the planner predicts
// each stage's memory per worker (PlanStage.predicted_memory_bytes, from
// StageMemoryBytes in aqueduct_model.h: weights and their stashed
// versions, gradients, optimizer state, activations in flight), and every
// registered worker states its memory (WorkerInfo.device.memory_bytes). A
// job whose plan does not fit the workers it was given, or whose supplied
// profile has a node that no worker could hold, is refused naming the
// stage (or node) and both numbers, instead of reaching a worker that
// would fail to allocate.
//
// Pure code; thread-safe.
#ifndef AQUEDUCT_COORDINATOR_PLANNER_MEMORY_FIT_H_
#define AQUEDUCT_COORDINATOR_PLANNER_MEMORY_FIT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "coordinator/planner/profile_graph.h"
#include "pipeline/limits.h"
#include "proto/types.h"

namespace aqueduct {

// Every stage of `plan` against the workers of its ranks: rank r is
// worker `worker_ids[r]` with `memory_bytes[r]` bytes (0: not known, not
// compared). FAILED_PRECONDITION naming the first stage that does not fit,
// its layers, its predicted bytes and the worker's; INVALID_ARGUMENT for a
// rank with no worker.
absl::Status CheckPlanFits(const PartitionPlan& plan,
                           const std::vector<int64_t>& memory_bytes,
                           const std::vector<std::string>& worker_ids);

// Each node of a profile supplied with `spec` on its own: the least memory
// any plan gives it (a stage of that node alone, with no warm-up: its
// weights, gradients, optimizer state and the saved bytes of what the
// schedule keeps in flight) against `memory` (unknown: nothing is
// compared). INVALID_ARGUMENT naming the node, its layer and the numbers.
absl::Status CheckProfileFits(const ProfileGraph& graph, const JobSpec& spec,
                              const MemoryLimit& memory);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_PLANNER_MEMORY_FIT_H_
