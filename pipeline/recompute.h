// Activation recomputation modes (Megatron-LM's), as specs and plans spell
// them: what a transformer layer keeps from its forward for its backward.
// kNone: everything its backward reads. kSelective: not the attention
// weights ([B, H, T, T], the largest part at long contexts); backward
// recomputes them from q and k. kFull: only the layer's input; backward
// reruns the forward first. Gradients are the same bits in every mode.
//
// Thread-safety: stateless functions.
#ifndef AQUEDUCT_PIPELINE_RECOMPUTE_H_
#define AQUEDUCT_PIPELINE_RECOMPUTE_H_

#include <string>

#include "absl/status/statusor.h"

namespace aqueduct {

enum class Recompute { kNone = 0, kSelective = 1, kFull = 2 };

// "none", "selective", "full".
const char* RecomputeName(Recompute mode);

// From a spec or plan ("" is none; the planner reads "" and "auto" in a
// spec as its choice, pipeline/policy.h). INVALID_ARGUMENT naming `field` and
// the accepted spellings otherwise.
absl::StatusOr<Recompute> ParseRecompute(const std::string& text,
                                         const std::string& field);

}  // namespace aqueduct

#endif  // AQUEDUCT_PIPELINE_RECOMPUTE_H_
