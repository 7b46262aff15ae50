// Gradient-norm clipping (torch.nn.utils.clip_grad_norm_) over a model's
// gradients, one process or a part of a pipeline: each part sums its
// squares (GradSquares), the parts add their sums (a pipeline's stages, a
// tensor group's members), and every part scales by the same factor
// (ClipFactor, ScaleGradients).
//
// Thread-safety: as the Device (one owner at a time).
#ifndef AQUEDUCT_WORKER_NN_CLIPPING_H_
#define AQUEDUCT_WORKER_NN_CLIPPING_H_

#include "absl/status/statusor.h"
#include "common/device/device.h"
#include "worker/nn/model.h"

namespace aqueduct {

// The sum of the squares of `grads`' elements (in double, on the host). A
// tied copy's weight (a layer with tie_weight_to) is left out: its owner's
// holds the same sum of both. With `whole_too` false, tensors every member
// of a tensor group holds whole (ParamSplit dim -1) are left out too, so
// that a group adding its members' sums counts them once (member 0 passes
// true).
absl::StatusOr<double> GradSquares(const Model& model, Device& device,
                                   const ParameterSet& grads, bool whole_too);

// torch's factor: max_norm / (norm + 1e-6), clamped to at most 1, in
// float as torch computes it; norm = sqrt(squares).
float ClipFactor(double squares, float max_norm);

// Every gradient *= factor (nothing when factor is 1).
void ScaleGradients(Device& device, const ParameterSet& grads, float factor);

}  // namespace aqueduct

#endif  // AQUEDUCT_WORKER_NN_CLIPPING_H_
