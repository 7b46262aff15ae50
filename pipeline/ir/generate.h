// Compute-only schedules (F, B, I, W per rank, no communication): one
// minibatch of `microbatches` microbatches over `ranks` ranks. Lower()
// (lower.h) adds the communication, the all-reduce and the step.
//
//   gpipe             every F, then every B (reversed); 1 stage per rank.
//   1f1b_flush        PipeDream-Flush: p-r-1 warm-up F, then one F and one
//                     B, then the drain.
//   interleaved_1f1b  Megatron-LM's interleaved 1F1B: v chunks per rank in a
//                     loop (rank r: stages r, r+p, ...); warm-up
//                     2(p-r-1) + (v-1)p; microbatches taken p at a time per
//                     chunk, so they must be a multiple of p.
//   zb_h1             zero bubble, the 1F1B memory, as the zero-bubble paper
//                     builds it: 1F1B with B split into I and W, rank r's
//                     W's lagging its I's by r, so a rank holds at most p
//                     microbatches from F to W; bubble (p-1)/(3m).
//   zb_h2             zero bubble with about twice the memory: at most
//                     2(p-r)-1 in flight, so the warm-up fills the bubble
//                     before the first I.
//   zb_v              zero bubble over 2 chunks per rank in a V (rank r:
//                     stages r and 2p-1-r), at most 2p stage-microbatches
//                     in flight per rank (1F1B's peak in activations).
// zb_h2 and zb_v are made by list scheduling at unit costs
// (F = I = W): each rank, when free, runs the ready I of its oldest
// microbatch, else the next F the memory bound allows, else a pending W
// (sail-sg/zero-bubble's heuristic, not its ILP).
//
// Thread-safety: stateless functions.
#ifndef AQUEDUCT_PIPELINE_IR_GENERATE_H_
#define AQUEDUCT_PIPELINE_IR_GENERATE_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "pipeline/ir/action.h"

namespace aqueduct::ir {

enum class ScheduleKind {
  kGpipe,
  k1F1B,
  kInterleaved1F1B,
  kZbH1,
  kZbH2,
  kZbV,
};

const char* ScheduleKindName(ScheduleKind kind);
// INVALID_ARGUMENT listing the names for an unknown one.
absl::StatusOr<ScheduleKind> ParseScheduleKind(const std::string& name);
// Every kind, in the order above.
std::vector<ScheduleKind> AllScheduleKinds();

struct ScheduleShape {
  int ranks = 1;
  int microbatches = 1;
  // Chunks per rank for interleaved_1f1b (zb_v always has 2; the others 1).
  int chunks = 1;
};

// The compute-only program. INVALID_ARGUMENT naming the rule a shape
// breaks (interleaved: microbatches a multiple of ranks; chunks >= 2 only
// for interleaved).
absl::StatusOr<Program> ComputeSchedule(ScheduleKind kind,
                                        const ScheduleShape& shape);

}  // namespace aqueduct::ir

#endif  // AQUEDUCT_PIPELINE_IR_GENERATE_H_
