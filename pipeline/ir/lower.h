// Lowering a compute-only program (generate.h, or a user's file) into the
// one the executor obeys: each F and B/I gets the receive it needs before
// it and the send the next rank needs after it (none between two stages of
// one rank, as the V's turn), and each rank ends with, for every stage it
// holds, the all-reduce of its gradients (when asked) and the step.
// Receives block; sends do not (they are buffered).
//
// Thread-safety: stateless functions.
#ifndef AQUEDUCT_PIPELINE_IR_LOWER_H_
#define AQUEDUCT_PIPELINE_IR_LOWER_H_

#include "pipeline/ir/action.h"

namespace aqueduct::ir {

struct LowerOptions {
  // Stages are replicated: REDUCE_GRAD before each STEP.
  bool reduce_grad = false;
};

// Whether `program` holds only F, B, I and W.
bool IsComputeOnly(const Program& program);

// `compute` with its communication, all-reduces and steps. Actions other
// than F, B, I, W in `compute` are dropped (re-lowering is idempotent).
Program Lower(const Program& compute, const LowerOptions& options = {});

}  // namespace aqueduct::ir

#endif  // AQUEDUCT_PIPELINE_IR_LOWER_H_
