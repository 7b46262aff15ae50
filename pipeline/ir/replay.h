// Checking and timing a lowered program (lower.h) by replaying every rank
// together.
//
// Validate: each rank's actions are its own stages' and in order (F after
// the activation it needs, received or made on the rank; B or I after F
// and after the gradient it needs; W after I; each at most once; sends
// after what they send; the all-reduce and the step after every
// microbatch's weight gradients), every microbatch of every stage is
// complete (F, and B or I and W, and its sends), and the ranks, run
// together with blocking receives, neither deadlock nor wait for a send no
// rank makes. The error names the rank, the action's place and its text.
//
// Simulate: the same replay over per-action costs: the step time, each
// rank's busy time, the bubble and each rank's peak of activations held.
//
// Thread-safety: stateless functions.
#ifndef AQUEDUCT_PIPELINE_IR_REPLAY_H_
#define AQUEDUCT_PIPELINE_IR_REPLAY_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/ir/action.h"

namespace aqueduct::ir {

// The most (stage, microbatch) pairs a program may have (Validate's table).
inline constexpr int64_t kMaxStageMicrobatches = int64_t{1} << 22;

// INVALID_ARGUMENT naming the rank, the action (its index on the rank and
// its text) and the rule it breaks; or the ranks a deadlock blocks; or a
// program over kMaxStageMicrobatches.
absl::Status Validate(const Program& program);

// Costs of one rank's share of the model (the whole stage of a rank that
// holds one): a chunk's compute costs its share, cost / stages_per_rank.
// Any unit (seconds, or F = 1).
struct ActionCosts {
  double f = 1, b = 2, i = 1, w = 1;
  // From a send to its receive (latency and transfer of one message).
  double transfer = 0;
  double reduce_grad = 0, step = 0;
};

struct Simulation {
  // From the first action of any rank to the last: one minibatch alone.
  double makespan = 0;
  // The time per minibatch with minibatches back to back: each rank steps
  // on its own and starts the next minibatch once it finished this one, so
  // it is the longest span of a rank from its first action to its last
  // (rank r starts r forwards late in every minibatch alike).
  double step_time = 0;
  // Time each rank spends computing (F, B, I, W, the all-reduce, the step).
  std::vector<double> busy;
  // step_time over the busiest rank's compute time, less 1: (p-1)/m for
  // 1F1B with T_F = T_B (the zero-bubble paper's measure).
  double bubble = 0;
  // The most activations a rank holds at once, in microbatches of its whole
  // share: F adds 1/stages_per_rank, B or I frees it. (A W still to run
  // keeps its GEMMs' inputs and output gradients, a smaller part, not
  // counted here.)
  std::vector<double> peak_activations;
  // When each rank ran each computation (F, B, I, W, REDUCE_GRAD, STEP).
  struct Slot {
    double start = 0, end = 0;
    Action action;
  };
  std::vector<std::vector<Slot>> timeline;
};

// Replays `program` (which Validate accepts) with `costs`.
// FAILED_PRECONDITION naming the ranks when it deadlocks.
absl::StatusOr<Simulation> Simulate(const Program& program,
                                    const ActionCosts& costs = {});

// The timeline as text, one line per rank and one column per `quantum` of
// time (0: the shortest computation), each cell the action running in the
// middle of it ("." when idle), e.g.
//   rank 0 | 0F0 0F1 0F2 0F3 0I0 0F4 ...
// At most `max_columns` columns (the rest is cut, with "...").
std::string TimeGrid(const Simulation& simulation, double quantum = 0,
                     int max_columns = 200);

}  // namespace aqueduct::ir

#endif  // AQUEDUCT_PIPELINE_IR_REPLAY_H_
