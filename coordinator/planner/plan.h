// From a profile to a PartitionPlan (proto/plan.proto), under either cost
// model: "pipedream" (PipeDream's optimizer, exactly) or "aqueduct"
// (coordinator/planner/aqueduct_model.h).
//
// Pure code; thread-safe.
#ifndef AQUEDUCT_COORDINATOR_PLANNER_PLAN_H_
#define AQUEDUCT_COORDINATOR_PLANNER_PLAN_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/planner/aqueduct_model.h"
#include "coordinator/planner/pipedream.h"
#include "coordinator/planner/profile_graph.h"
#include "pipeline/ir/replay.h"
#include "pipeline/policy.h"
#include "proto/types.h"

namespace aqueduct {

struct PlanRequest {
  CostModel cost_model = v1::COST_MODEL_PIPEDREAM;
  // Innermost level first.
  std::vector<PlannerLevel> levels;
  bool straight_pipeline = false;
  bool use_fewer_machines = false;
  // Applied when set (PipeDream's default size is 16e9 bytes).
  std::optional<double> memory_limit_bytes;
  std::optional<double> activation_compression_ratio;
  // Each rank's relative speed (empty: all equal). The Aqueduct model
  // always applies it; PipeDream's, when the speeds are unequal and the
  // profile a chain, cuts by the contiguous-rank DP with PipeDream's stage
  // time (AqueductModelOptions::pipedream_costs). Unequal speeds are
  // recorded in the plan (PartitionPlan.worker_speeds).
  std::vector<double> worker_speed;
  Schedule schedule = v1::SCHEDULE_1F1B_STASHED;
  double allreduce_overlap = 0;
  double optimizer_state_factor = 1;
  // Microbatches per minibatch (1F1B-flush and GPipe), for the predicted
  // memory; 0 counts as 1.
  int microbatches = 0;
  // Threads for the solver (0: all cores).
  int threads = 0;
};

// Plans `graph` (raw: inputs and __getitem__ sinks are dropped here, as
// PipeDream does). Errors: INVALID_ARGUMENT for a bad request or profile,
// FAILED_PRECONDITION when nothing fits in memory.
absl::StatusOr<PartitionPlan> MakePlan(const ProfileGraph& graph,
                                       const PlanRequest& request);

// A readable table of the plan.
std::string FormatPlan(const PartitionPlan& plan);

// The plan's busiest worker, for simulating its schedule: its compute per
// minibatch (forward and backward of every stage it holds, its share when
// a stage is replicated), the pipeline positions (workers over the most
// replicas) and those replicas.
struct BusiestWorker {
  double compute_s = 0;
  int positions = 1;
  int replicas = 1;
};
BusiestWorker BusiestWorkerOf(const PartitionPlan& plan);

// The dry run of one minibatch of the plan's decided schedule
// (plan.pipeline(): its program under "custom") at its busiest worker's
// compute. INVALID_ARGUMENT for a schedule without a one-minibatch program
// (the stashing ones) or a plan without a decision.
absl::StatusOr<ir::Simulation> SimulateDecision(const PartitionPlan& plan);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_PLANNER_PLAN_H_
