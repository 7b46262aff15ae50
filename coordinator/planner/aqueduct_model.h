// Aqueduct's own cost model and its partitioner: closer to what the runtime
// does than PipeDream's. For a stage of states a..b on the contiguous worker
// ranks [lo, hi] (r = hi - lo + 1 replicas, taking minibatches round robin):
//
//   compute    = T(a..b) / speed          (speed: the slowest of its workers)
//   all-reduce = 2 (r-1)/r * W(a..b) / B_ar   (ring; B_ar: the bandwidth of
//                the smallest topology level holding all r workers)
//   exposed    = max(0, all-reduce - overlap * backward(a..b) / speed)
//   transfer   = (2 out(a-1) / B_in + 2 out(b) / B_out) / r
//                (activations in and out, gradients back; B_in/B_out: the
//                level that separates the neighbouring ranks)
//   time       = max((compute + exposed) / r, transfer)
//
// i.e. 1F1B overlaps transfers with compute (a max, not a sum), and the
// weight all-reduce hides behind the backward pass to the degree `overlap`
// says. Memory per worker counts what the schedule keeps: with warm-up
// depth d = ceil(workers after this stage / r), 1F1B with weight stashing
// keeps d + 1 weight versions and d + 1 minibatches of activations;
// 1F1B-flush and GPipe one version, and min(microbatches, d + 1) and all
// `microbatches` microbatches of activations; plus gradients and optimizer
// state (StageMemoryBytes). The plan is the partition minimising
// the largest stage time; the DP is exact over contiguous rank placements
// (heterogeneous speeds make the placement matter).
//
// Pure code; thread-safe.
#ifndef AQUEDUCT_COORDINATOR_PLANNER_AQUEDUCT_MODEL_H_
#define AQUEDUCT_COORDINATOR_PLANNER_AQUEDUCT_MODEL_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/planner/antichain.h"
#include "coordinator/planner/pipedream.h"
#include "pipeline/policy.h"

namespace aqueduct {

struct AqueductModelOptions {
  // Innermost level first; workers = the product of the levels' counts.
  std::vector<PlannerLevel> levels;
  // Relative speed of each worker rank (1 = the profiled device); empty for
  // all 1.
  std::vector<double> worker_speed;
  bool straight_pipeline = false;
  // Allow plans that leave workers idle.
  bool use_fewer_machines = false;
  std::optional<double> memory_limit_bytes;
  // 1f1b_stashed, 1f1b_vertical_sync, 1f1b_flush, gpipe, zb_h1 or zb_h2.
  Schedule schedule = v1::SCHEDULE_1F1B_STASHED;
  // Optimizer state per parameter byte (SGD with momentum 1, Adam 2).
  double optimizer_state_factor = 1;
  // Fraction of the stage's backward time that can hide its all-reduce.
  double allreduce_overlap = 0;
  // Microbatches in flight for gpipe (0: the warm-up depth + 1).
  int microbatches = 0;
  // PipeDream's stage time instead of the table above, for planning
  // PipeDream's cost model over workers of unequal speed (plan.h):
  //   time = (T(a..b) / speed + 4 (r-1) W(a..b) / (B_ar r)) / r
  // (PipeDream's A[i][j][m] with m = r - 1, its compute slowed to the
  // stage's slowest worker), no transfer term and no overlap. With equal
  // speeds on one level this is PipeDream's objective (tested against
  // SolvePipeDream).
  bool pipedream_costs = false;
};

struct StageCost {
  double time_s = 0;
  double compute_s = 0;
  double allreduce_s = 0;  // Exposed, per minibatch.
  double transfer_s = 0;   // Per minibatch.
  double memory_bytes = 0;
  int warmup_depth = 0;
  bool feasible = true;  // Within the memory limit.
};

struct AqueductStage {
  int start = 0;  // States [start, end).
  int end = 0;
  int first_rank = 0;
  int replicas = 1;
  StageCost cost;
};

struct AqueductSolution {
  double time_per_minibatch_s = 0;
  std::vector<AqueductStage> stages;
  int workers_used = 0;
};

// The cost of states [a, b] (inclusive) on ranks [lo, hi].
StageCost AqueductStageCost(const StateSequence& seq,
                            const AqueductModelOptions& options, int a, int b,
                            int lo, int hi);

// INVALID_ARGUMENT for bad options (unknown schedule, speeds of the wrong
// count or not positive, a DAG profile: this model plans chains);
// FAILED_PRECONDITION when nothing fits the memory limit.
absl::StatusOr<AqueductSolution> SolveAqueductModel(
    const StateSequence& seq, const AqueductModelOptions& options);

// Bytes a worker of a stage holds: weights `w` (versions as the schedule
// keeps them, gradients and optimizer_state_factor x w of optimizer state)
// and the activations in flight (`act` per minibatch; microbatches of
// 1/microbatches of it under 1F1B-flush and GPipe), at warm-up depth
// `depth`. Both cost models report it.
double StageMemoryBytes(Schedule schedule, int microbatches, double w,
                        double act, int depth, double optimizer_state_factor);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_PLANNER_AQUEDUCT_MODEL_H_
