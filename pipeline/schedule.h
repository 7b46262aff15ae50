// Pipeline schedules as pure code: for one stage replica, the ordered list
// of operations it executes.
//
// Schedules (pipeline/policy.h parses the spec's spelling):
// - 1f1b_stashed (PipeDream): `depth` warm-up forwards, then strictly
//   one forward and one backward, then the drain; an optimizer step after
//   every backward, on the newest weights; the backward of a minibatch uses
//   the weight version its forward used (weight stashing). Stage s's forward
//   of minibatch m uses version max(0, m - depth_s).
// - 1f1b_vertical_sync: the same order, but every stage uses the version
//   stage 0 used for that minibatch (it travels with the activations).
// - 1f1b_flush (PipeDream-Flush): the microbatches of a minibatch go
//   through 1F1B; gradients accumulate; one all-reduce (replicated stages)
//   and one optimizer step per minibatch at the flush; one weight version.
// - gpipe: all forwards of a minibatch's microbatches, then all backwards,
//   then the step.
// - zb_h1, zb_h2: the zero-bubble schedules of pipeline/ir/generate.h (its
//   list scheduling), each backward split into I and W; a flush per
//   minibatch as 1f1b_flush.
// Replicated stages (flush and GPipe only) take microbatches round robin:
// microbatch j of a minibatch goes to replica j mod replicas.
//
// Thread-safe: stateless functions.
#ifndef AQUEDUCT_PIPELINE_SCHEDULE_H_
#define AQUEDUCT_PIPELINE_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/ir/action.h"
#include "pipeline/ir/replay.h"
#include "pipeline/policy.h"

namespace aqueduct {

enum class OpKind {
  kRecvActivation,
  kForward,
  kSendActivation,
  kRecvGradient,
  kBackward,
  // The zero-bubble schedules' split backward: the input gradient (sent on
  // at once), and later the weight gradient.
  kBackwardInput,
  kBackwardWeight,
  kSendGradient,
  kAllReduce,
  kOptimizerStep,
};

const char* OpKindName(OpKind kind);

struct Op {
  OpKind kind;
  int64_t minibatch = 0;
  int microbatch = 0;
  // The stage (chunk) it belongs to: a rank that holds several runs one
  // list over all of them.
  int stage = 0;
  bool operator==(const Op& o) const {
    return kind == o.kind && minibatch == o.minibatch &&
           microbatch == o.microbatch && stage == o.stage;
  }
};

struct ScheduleConfig {
  Schedule policy = v1::SCHEDULE_1F1B_STASHED;
  int stage = 0;
  int num_stages = 1;
  int replica = 0;
  int replicas = 1;
  // Warm-up forwards (1F1B); -1: num_stages - stage - 1.
  int warmup_depth = -1;
  int64_t num_minibatches = 0;
  // Microbatches per minibatch (flush and GPipe; 1F1B-stashed uses 1).
  int microbatches = 1;
};

// INVALID_ARGUMENT for an inconsistent config (replicas with a 1F1B
// stashing policy, microbatches not divisible, ...).
absl::StatusOr<std::vector<Op>> BuildSchedule(const ScheduleConfig& config);

// A rank's list from an action program (pipeline/ir: a schedule with
// several chunks per rank, or a user's schedule file): one minibatch's
// actions of `program`'s rank `rank`, stamped for every minibatch. The
// program covers this replica's share of a minibatch (its k-th microbatch
// is the minibatch's microbatch `mine[k]`); a compute-only program gets its
// communication (ir::Lower). Every stage's all-reduce (replicas > 1) comes
// before the rank's first step, so the steps (and the tied weights'
// exchange at the first) see reduced gradients.
struct ProgramConfig {
  const ir::Program* program = nullptr;
  int rank = 0;
  int replicas = 1;
  std::vector<int> mine;
  int64_t num_minibatches = 0;
};
absl::StatusOr<std::vector<Op>> BuildProgramSchedule(const ProgramConfig& c);

// The compute-only program of one minibatch of a schedule that flushes
// (gpipe, 1f1b_flush, zb_h1, zb_h2, interleaved_1f1b, zb_v) over `ranks`
// ranks with `chunks` chunks each (interleaved_1f1b; zb_v has 2, the
// others 1) and `microbatches` per minibatch (a replica's share).
// INVALID_ARGUMENT naming the rule a shape breaks, or for a stashing
// schedule (its minibatches overlap: no one-minibatch program).
absl::StatusOr<ir::Program> ProgramFor(Schedule policy, int ranks, int chunks,
                                       int microbatches);

// The dry-run simulation of ProgramFor's program when each rank's share of
// the model computes for `rank_compute_s` per minibatch (forward and
// backward; F:B as 1:2, and I = W = F where the backward is split).
absl::StatusOr<ir::Simulation> PredictSchedule(Schedule policy, int ranks,
                                               int chunks, int microbatches,
                                               double rank_compute_s);
// The same for a given program (compute-only or lowered).
absl::StatusOr<ir::Simulation> SimulateProgram(const ir::Program& program,
                                               double rank_compute_s);

// Which replica of a stage with `replicas` replicas handles microbatch j.
inline int ReplicaFor(int microbatch, int replicas) {
  return microbatch % replicas;
}

}  // namespace aqueduct

#endif  // AQUEDUCT_PIPELINE_SCHEDULE_H_
