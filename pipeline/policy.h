// The pipeline's policies, decided once: a job spec spells its schedule,
// transport and cost model as strings (PipelineSpec, e.g. "1f1b_stashed");
// ResolvePipeline parses them into the proto enums, applies every default
// and checks every pipeline field, so no other code compares a policy string
// or restates a default. The rules that depend on a policy live here too.
//
// Thread-safety: stateless functions.
#ifndef AQUEDUCT_PIPELINE_POLICY_H_
#define AQUEDUCT_PIPELINE_POLICY_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "pipeline/ir/action.h"
#include "pipeline/recompute.h"
#include "proto/types.h"

namespace aqueduct {

// The start of the error training fails with when a loss is not finite
// (for people: the coordinator's non-finite policy,
// FaultToleranceSpec.on_nonfinite, reads the typed cause
// FAILURE_NONFINITE_LOSS, pipeline/failure.h).
inline constexpr char kNonFiniteLoss[] = "non-finite loss";

// The start of a stage's error when a peer it timed out on does not answer
// from its host at all (a network partition, not a stalled neighbour):
// "could not reach stage S on worker W (HOST): ..." (worker/runtime/
// stage_job.cc). The coordinator learns the pair from the typed cause
// (FAILURE_PEER_UNREACHABLE with the peer's id), not from this text.
inline constexpr char kCouldNotReach[] = "could not reach ";

using Schedule = v1::Schedule;
using Transport = v1::Transport;
using CostModel = v1::CostModel;
using Topology = v1::Topology;

// Parse the spec's spelling; "" is the default. INVALID_ARGUMENT naming the
// field and the accepted values otherwise.
absl::StatusOr<Schedule> ParseSchedule(const std::string& name);
absl::StatusOr<Transport> ParseTransport(const std::string& name);
absl::StatusOr<CostModel> ParseCostModel(const std::string& name);
absl::StatusOr<Topology> ParseTopology(const std::string& name);

// The spec's spelling of each value ("1f1b_stashed", "nccl", "pipedream").
const char* ScheduleName(Schedule schedule);
const char* TransportName(Transport transport);
const char* CostModelName(CostModel cost_model);
const char* TopologyName(Topology topology);

// 1F1B with weight stashing or vertical sync, and PipeDream-2BW: several
// weight versions are live, so stages are not replicated (the planner
// plans a straight pipeline).
bool StashesWeights(Schedule schedule);
// Microbatches, gradients accumulated over a minibatch, one step per
// minibatch, and every stage on the same weight version for a minibatch
// (so a weight tied across stages stays one): the flushing schedules and
// 2BW.
bool SplitsMinibatches(Schedule schedule);
// The schedules that flush (PipeDream-Flush, GPipe, the zero-bubble ones,
// interleaved 1F1B, and "auto", which picks one of them): one weight
// version; a minibatch ends before the next begins.
bool Flushes(Schedule schedule);
// The zero-bubble schedules: each backward split into its input gradient
// (I) and its weight gradient (W, run later; worker/nn/layer.h).
bool SplitsBackward(Schedule schedule);
// Several model chunks (virtual stages) per worker: interleaved_1f1b, zb_v.
bool HoldsChunks(Schedule schedule);

// The most chunks per worker.
inline constexpr int kMaxChunks = 64;
// The largest tensor-parallel degree (a group's ring has at most this many
// steps per phase; Megatron keeps it within a node, 8 GPUs).
inline constexpr int kMaxTensorParallel = 64;
// JobSpec.priority's range: [-kMaxJobPriority, kMaxJobPriority].
inline constexpr int kMaxJobPriority = 1000;

// A job's pipeline section with every default applied.
struct PipelinePolicy {
  Schedule schedule = v1::SCHEDULE_1F1B_STASHED;
  Transport transport = v1::TRANSPORT_GLOO;
  CostModel cost_model = v1::COST_MODEL_PIPEDREAM;
  // Levels from bandwidth_bytes_per_s, or measured before planning.
  Topology topology = v1::TOPOLOGY_FLAT;
  int workers = 1;
  // Bandwidth between workers assumed by the planner.
  double bandwidth_bytes_per_s = 1e9;
  // Wait for workers in PENDING; zero when the spec sets none (the
  // coordinator's default applies).
  absl::Duration wait_for_workers = absl::ZeroDuration();
  // Microbatches per minibatch as the spec asks (0: unset). Use
  // MicrobatchesFor() for the number a plan runs with.
  int microbatches = 0;
  // PipeMare's learning-rate rescheduling for the stale schedules, over
  // this many steps (0: no correction). StalenessLrScale applies it.
  int64_t pipemare_warmup_steps = 0;
  // Model chunks per worker (pipeline.chunks with its default): 1 but for
  // interleaved_1f1b and zb_v (and a custom program's).
  int chunks = 1;
  // A custom program's chunks sit in a V (rank r: r and 2p-1-r).
  bool v_placement = false;
  // pipeline.tensor_parallel (0: unset, the planner's choice) and
  // pipeline.recompute ("" or "auto": the planner's choice, when
  // recompute_fixed is false).
  int tensor_parallel = 0;
  Recompute recompute = Recompute::kNone;
  bool recompute_fixed = false;
  // pipeline.sequence_parallel, and the positions per sample its degree
  // must divide (the text's context; 0 for other data, which transformer
  // blocks do not take).
  bool sequence_parallel = false;
  int64_t positions = 0;
  // pipeline.straight: no replicated stages.
  bool straight = false;
};

// The longest schedule program a spec may carry.
inline constexpr size_t kMaxScheduleProgramBytes = size_t{1} << 20;

// The spec's schedule program, lowered (its communication added when it
// has none) and validated. INVALID_ARGUMENT naming pipeline.schedule_program
// and, from the validator, the line, rank and action.
absl::StatusOr<ir::Program> CustomProgram(const v1::PipelineSpec& p);

// The factor of the learning rate of a step at 0-based `step` whose
// gradient is `delay` steps stale, under PipeMare's rescheduling over
// `warmup_steps` (0: none): delay^-(1 - step / warmup_steps) while step <
// warmup_steps, else 1 (and 1 for a delay of 0 or 1).
double StalenessLrScale(int64_t delay, int64_t step, int64_t warmup_steps);

// Whether the weights of `version` (steps applied) of a job of `total`
// steps are checkpointed: every `every` steps (0: never), or at `at` (the
// coordinator's every_seconds pick; null: none), never at the last step
// (the trained model is kept instead). The one rule for the pipeline's
// stages and the single-process trainer.
bool CheckpointDue(int64_t version, int64_t total, int64_t every,
                   const std::atomic<int64_t>* at);

// The most workers one job may ask for.
inline constexpr int kMaxJobWorkers = 100000;

// Validates spec.pipeline() (and its relation to batch_size) and applies
// the defaults. INVALID_ARGUMENT naming the field.
absl::StatusOr<PipelinePolicy> ResolvePipeline(const JobSpec& spec);

// Microbatches per minibatch a job runs with on `workers` workers: 1 for
// the stashing schedules; otherwise the spec's value (INVALID_ARGUMENT if
// it does not divide the batch), or when it sets none the smallest divisor
// of the batch that is at least `workers` (the batch size when none is):
// 4 for a batch of 8 on 3 workers. Interleaved 1F1B takes them a round of
// `workers` at a time: a multiple of `workers` (INVALID_ARGUMENT naming
// the rule otherwise).
absl::StatusOr<int> MicrobatchesFor(const PipelinePolicy& policy,
                                    int64_t batch_size, int workers);

// Optimizer steps a job runs: epochs * floor(train_samples / batch_size),
// capped by max_steps (either may be unset, not both). INVALID_ARGUMENT
// when the batch is larger than the training set.
absl::StatusOr<int64_t> TotalSteps(const JobSpec& spec, int64_t train_samples);

}  // namespace aqueduct

#endif  // AQUEDUCT_PIPELINE_POLICY_H_
