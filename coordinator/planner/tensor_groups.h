// The planner's view of tensor parallelism and recomputation (Megatron's):
// a stage run by a tensor group of `degree` workers is planned as one
// worker whose profile is a member's: the transformer layers' compute,
// parameters and saved activations split `degree` ways, plus the sums the
// members run over the group at the link's bandwidth, plus what
// recomputation adds to backward and takes from the saved activations.
// The plan is then expanded: each planned worker becomes a tensor group of
// consecutive ranks (tensor innermost, so a group stays on a host whose
// workers are numbered together).
//
// Costs per transformer layer (B samples of T positions, width C, H
// heads, MLP width F, all per minibatch):
//   compute, parameters:  / degree (the LayerNorms, and the row-parallel
//                         biases, stay whole: a few C floats)
//   sums:                 a block: 2 forward + 2 backward all-reduces of
//                         B*T*C floats; an attention layer: 1 + 1. A ring
//                         moves 2 (t - 1) / t of each per member, in
//                         2 (t - 1) steps of a latency each.
//   selective recompute:  saved bytes - B*H*T*T*4 / degree; backward +
//                         forward * 2T^2C / (24TC^2 + 2T^2C)  (the core)
//   full recompute:       saved bytes = the layer's input, B*T*C*4;
//                         backward + forward
//   sequence parallelism: a block's x and x2 (full: its input) / degree;
//                         backward gathers 2 B*T*C floats more
//
// Pure; thread-safe.
#ifndef AQUEDUCT_COORDINATOR_PLANNER_TENSOR_GROUPS_H_
#define AQUEDUCT_COORDINATOR_PLANNER_TENSOR_GROUPS_H_

#include "absl/status/statusor.h"
#include "pipeline/mesh.h"
#include "pipeline/recompute.h"
#include "proto/types.h"

namespace aqueduct {

struct MemberCosts {
  int degree = 1;
  Recompute recompute = Recompute::kNone;
  // Of the links between a group's members (bytes/s), and the latency of
  // one ring step on them (2 (t - 1) steps per all-reduce).
  double bandwidth_bytes_per_s = 1e9;
  double step_latency_s = 50e-6;
  int64_t batch_size = 1;
  // Each sum runs once per microbatch (the latencies add up).
  int microbatches = 1;
  // Sequence parallelism: a block's residual stream (x, x2; full
  // recomputation's input) split by rows, and backward's two all-gathers
  // more (pipeline/mesh.h TensorGroupBytesPerLayer).
  bool sequence = false;
};

// The profile of one member of a tensor group running `profile`'s layers
// (`model` says which are transformer layers, by LayerProfile.layer_index).
// INVALID_ARGUMENT naming the layer whose heads (or MLP width) the degree
// does not divide.
absl::StatusOr<ModelProfile> MemberProfile(const ModelSpec& model,
                                           const ModelProfile& profile,
                                           const MemberCosts& costs);

// Each stage's workers made tensor groups of `degree`: rank r becomes
// ranks r * degree .. r * degree + degree - 1; each stage records the
// degree and `recompute`.
void ExpandTensorGroups(int degree, Recompute recompute, PartitionPlan* plan);

}  // namespace aqueduct

#endif  // AQUEDUCT_COORDINATOR_PLANNER_TENSOR_GROUPS_H_
