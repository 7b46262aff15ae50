// PipeDream's partitioner: the dynamic program of PipeDream's
// optimizer_graph_hierarchical.py over antichain states, with stage
// replication and a hierarchical topology, reproduced exactly (same
// objective value; split points may differ where candidates tie).
//
// For each level (innermost first) with M workers and bandwidth B, and
// `within` = 1 at the first level, else the previous level's M:
//   A[i][j][m] = (T(i..j) + 4 m W(i..j) / (B (m+1)) / within) / (m+1)
//   improved for m >= 1, j > i by
//   min over k in preds(j) (k not in preds(i-1)), m' in 1..m of
//     max(A[i][k][m-m'], (T(k+1..j) + 4 (m'-1) W(k+1..j) / (B m')) / m'
//         [, 2 out(k) / (B m' c), 2 out(j) / (B m' c) with compression c])
// with PipeDream's memory test, straight-pipeline and fewer-machines
// options. Levels after the first use the previous level's A[i][j][M-1] as
// T(i..j). The answer is A[0][N-1][M-1] of the last level.
//
// Speed: PipeDream's loops are O(N^3 M^2) per level. Here rows i are
// independent and solved in parallel, and on chains (where T(k+1..j) can
// only fall as k grows) the minimum over k for each (i, j, m, m') is found
// by a binary search for the crossing of the suffix minimum of
// A[i][.][m-m'] (a sparse table) with the last-stage time, O(log N) instead
// of O(N). Where that monotonicity does not hold (some T matrices of upper
// levels, activation compression, DAGs) the plain loop runs.
//
// Pure code; thread-safe (SolvePipeDream has no shared state).
#ifndef AQUEDUCT_COORDINATOR_PLANNER_PIPEDREAM_H_
#define AQUEDUCT_COORDINATOR_PLANNER_PIPEDREAM_H_

#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "coordinator/planner/antichain.h"

namespace aqueduct {

struct PlannerLevel {
  int workers = 1;
  double bandwidth_bytes_per_s = 1e9;
};

struct PipeDreamOptions {
  // Innermost level first.
  std::vector<PlannerLevel> levels;
  bool straight_pipeline = false;
  bool use_memory_constraint = false;
  double memory_bytes = 16e9;
  bool use_fewer_machines = false;
  std::optional<double> activation_compression_ratio;
  // Threads for independent rows (0: hardware concurrency).
  int threads = 0;
  // Disables the fast path (for tests that compare both).
  bool force_plain_loops = false;
};

struct PipeDreamStage {
  // States [start, end).
  int start = 0;
  int end = 0;
  // Workers running this stage: the product of its replication at every
  // level.
  int replicas = 1;
};

struct PipeDreamSolution {
  // A[0][N-1][M-1] of the last level: seconds per minibatch.
  double time_per_stage_s = 0;
  // states[-1].compute_time: one worker for everything.
  double single_worker_time_s = 0;
  // PipeDream's data-parallel estimate over all levels.
  double data_parallel_time_s = 0;
  // Innermost stages with their total replication.
  std::vector<PipeDreamStage> stages;
  // Per level (innermost first): that level's stages and replication
  // within the enclosing stage.
  std::vector<std::vector<PipeDreamStage>> level_stages;
};

// Solves. INVALID_ARGUMENT for no levels, a level with < 1 worker or a
// non-positive bandwidth, or a bad compression ratio; FAILED_PRECONDITION
// when no partition satisfies the memory limit.
absl::StatusOr<PipeDreamSolution> SolvePipeDream(
    const StateSequence& states, const PipeDreamOptions& options);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_PLANNER_PIPEDREAM_H_
