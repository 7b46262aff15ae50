// Pipeline schedules as pure code: for one stage replica, the ordered list
// of operations it executes.
//
// Policies:
// - kOneFOneBStashed (PipeDream): `depth` warm-up forwards, then strictly
//   one forward and one backward, then the drain; an optimizer step after
//   every backward, on the newest weights; the backward of a minibatch uses
//   the weight version its forward used (weight stashing). Stage s's forward
//   of minibatch m uses version max(0, m - depth_s).
// - kOneFOneBVerticalSync: the same order, but every stage uses the version
//   stage 0 used for that minibatch (it travels with the activations).
// - kOneFOneBFlush (PipeDream-Flush): the microbatches of a minibatch go
//   through 1F1B; gradients accumulate; one all-reduce (replicated stages)
//   and one optimizer step per minibatch at the flush; one weight version.
// - kGpipe: all forwards of a minibatch's microbatches, then all backwards,
//   then the step.
// Replicated stages (flush and GPipe only) take microbatches round robin:
// microbatch j of a minibatch goes to replica j mod replicas.
//
// Thread-safe: stateless functions.
#ifndef AQUEDUCT_WORKER_RUNTIME_SCHEDULE_H_
#define AQUEDUCT_WORKER_RUNTIME_SCHEDULE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace aqueduct {

enum class Policy {
  kOneFOneBStashed,
  kOneFOneBVerticalSync,
  kOneFOneBFlush,
  kGpipe
};

absl::StatusOr<Policy> ParsePolicy(const std::string& name);
const char* PolicyName(Policy policy);

enum class OpKind {
  kRecvActivation,
  kForward,
  kSendActivation,
  kRecvGradient,
  kBackward,
  kSendGradient,
  kAllReduce,
  kOptimizerStep,
};

const char* OpKindName(OpKind kind);

struct Op {
  OpKind kind;
  int64_t minibatch = 0;
  int microbatch = 0;
  bool operator==(const Op& o) const {
    return kind == o.kind && minibatch == o.minibatch &&
           microbatch == o.microbatch;
  }
};

struct ScheduleConfig {
  Policy policy = Policy::kOneFOneBStashed;
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

// The weight version stage `stage` uses for minibatch m under the policy
// (the number of optimizer steps applied before it).
int64_t WeightVersionFor(Policy policy, int stage, int num_stages,
                         int warmup_depth_of_stage, int warmup_depth_of_stage0,
                         int64_t minibatch);

// Which replica of a stage with `replicas` replicas handles microbatch j.
inline int ReplicaFor(int microbatch, int replicas) {
  return microbatch % replicas;
}

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_RUNTIME_SCHEDULE_H_
