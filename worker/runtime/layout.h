// The layout of a pipeline job, computed from a worker's StageAssignment
// alone: which layers each stage runs, the ranks of each stage's replicas,
// warm-up depths, microbatches and total steps (PipelineLayout, identical on
// every worker of the job), and this worker's place in it (JobLayout). Pure:
// no device, no transport, no clock.
//
// Thread-safety: plain values and stateless functions.
#ifndef AQUEDUCT_WORKER_RUNTIME_LAYOUT_H_
#define AQUEDUCT_WORKER_RUNTIME_LAYOUT_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/ir/action.h"
#include "pipeline/policy.h"
#include "pipeline/recompute.h"
#include "pipeline/schedule.h"
#include "proto/service_types.h"
#include "proto/types.h"

namespace aqueduct {

// The layout of a pipeline, identical on every worker of a job.
struct PipelineLayout {
  Schedule policy = v1::SCHEDULE_1F1B_STASHED;
  // Stage s runs layers [layer_begin[s], layer_begin[s + 1]).
  std::vector<int> layer_begin;
  // Ranks of each stage's workers: its replicas' tensor groups,
  // replica-major (ranks[s][d * t + k]: member k of replica d).
  std::vector<std::vector<int>> ranks;
  // Tensor-parallel degree of each stage (empty: 1 everywhere).
  std::vector<int> tensor;
  // Activation recomputation of each stage (empty: none).
  std::vector<Recompute> recompute;
  // Warm-up depth of each stage.
  std::vector<int> warmup_depth;
  int64_t num_minibatches = 0;
  // Microbatches per minibatch (flush and GPipe).
  int microbatches = 1;
  // Model chunks per rank (interleaved_1f1b, zb_v): the stages are
  // num_stages() / chunks pipeline positions' chunks, placed as the
  // schedule places them (ir::Layout: a loop, or zb_v's V); every stage of
  // one position has the same ranks.
  int chunks = 1;
  // A custom program's chunks sit in a V (zb_v's always do).
  bool v_placement = false;
  // schedule "custom": the user's program, lowered (null otherwise).
  std::shared_ptr<const ir::Program> program;

  int num_stages() const { return static_cast<int>(ranks.size()); }
  int TensorDegree(int s) const { return tensor.empty() ? 1 : tensor[s]; }
  // Data-parallel replicas of stage s.
  int Replicas(int s) const {
    return static_cast<int>(ranks[s].size()) / TensorDegree(s);
  }
  Recompute RecomputeOf(int s) const {
    return recompute.empty() ? Recompute::kNone : recompute[s];
  }
  // Member k of replica d of stage s.
  int RankAt(int s, int d, int k) const {
    return ranks[s][d * TensorDegree(s) + k];
  }
  // The ranks of member k of every replica of stage s (its data-parallel
  // group), and of every member of replica d (its tensor group).
  std::vector<int> DataGroup(int s, int k) const;
  std::vector<int> TensorGroup(int s, int d) const;
  // Where the stages sit among the pipeline positions.
  ir::Layout ChunkLayout() const;
  // The stages `rank` holds, in increasing order (one but for chunks).
  std::vector<int> StagesOfRank(int rank) const;
};

// The op list of the rank `rank` of a chunked layout (every stage it holds)
// from its schedule's program (pipeline/schedule.h ProgramFor), from
// minibatch `first` to the end. INVALID_ARGUMENT naming the rule a layout
// breaks (CheckChunks; microbatches per replica a multiple of the
// positions for interleaved 1F1B).
absl::StatusOr<std::vector<Op>> RankSchedule(const PipelineLayout& layout,
                                             int rank, int64_t first);

// INVALID_ARGUMENT naming the stage when a chunked layout's stages do not
// sit as its schedule places them (same ranks for a position's chunks).
absl::Status CheckChunks(const PipelineLayout& layout);

// Builds the layout of a PartitionPlan for a model: stage layer ranges from
// the plan's layer ranges, ranks, depths. INVALID_ARGUMENT when the plan does
// not cover the model's layers in order.
absl::StatusOr<PipelineLayout> LayoutFromPlan(const PartitionPlan& plan,
                                              int num_layers, Schedule policy,
                                              int64_t num_minibatches,
                                              int microbatches);

// One worker's place in a pipeline job.
struct JobLayout {
  PipelineLayout pipeline;
  PipelinePolicy policy;
  int stage = 0;  // The first of `stages`.
  // Data-parallel replica, and member of that replica's tensor group (the
  // assignment's replica is d * t + k).
  int replica = 0;
  int member = 0;
  int rank = 0;
  int world_size = 1;
  // Every stage this worker holds, in order (several chunks: interleaved
  // 1F1B, ZB-V; else just `stage`).
  std::vector<int> stages;
  // The first stage's layers: [layer_begin, layer_end).
  int layer_begin = 0;
  int layer_end = 0;
  int64_t batch_size = 0;
  // Optimizer steps of the job (= pipeline.num_minibatches).
  int64_t total_steps = 0;

  int num_stages() const { return pipeline.num_stages(); }
  bool input_stage() const { return !stages.empty() && stages.front() == 0; }
  bool output_stage() const {
    return !stages.empty() && stages.back() == num_stages() - 1;
  }
  // The rank that gathers the whole model at the end and evaluates it: the
  // output stage's replica 0.
  int evaluator_rank() const { return pipeline.ranks.back()[0]; }
  // Output stage: the samples of each minibatch whose loss this replica
  // computes (its share of the microbatches).
  int64_t loss_samples_per_minibatch() const;
};

// Checks that the assignment's stage and replica exist in its plan.
// INVALID_ARGUMENT otherwise.
absl::Status CheckAssignment(const StageAssignment& assignment);

// A one-stage, one-replica plan: trained by the single-process trainer, no
// data plane.
bool RunsLocally(const PartitionPlan& plan);

// The layout of `assignment` for a model of `num_layers` layers and a
// training set of `train_samples` samples: policy from the spec's pipeline
// section, microbatches (pipeline/policy.h MicrobatchesFor, over the job's
// workers), total steps (TotalSteps) and the plan's stages.
// INVALID_ARGUMENT for a spec or plan that does not fit.
absl::StatusOr<JobLayout> LayoutFromAssignment(
    const StageAssignment& assignment, int num_layers, int64_t train_samples);

// "rank=worker (stage s)" for every rank of the assignment's plan, to name
// the workers behind the ranks an error mentions.
std::string DescribeRanks(const StageAssignment& assignment);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_LAYOUT_H_
