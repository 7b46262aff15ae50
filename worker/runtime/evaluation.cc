#include "worker/runtime/evaluation.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/nn/weights.h"

namespace aqueduct {

namespace {

// Tags of the weights messages: kWeightsTag + stage (clear of frame tags).
constexpr uint64_t kWeightsTag = uint64_t{1} << 58;

// The parameters' bytes on the host, tensor after tensor.
absl::StatusOr<std::string> Flatten(Device& device,
                                    const ParameterSet& params) {
  size_t total = 0;
  for (const Tensor& t : params.tensors) total += t.nbytes();
  std::string out(total, '\0');
  size_t offset = 0;
  for (const Tensor& t : params.tensors) {
    RETURN_IF_ERROR(device.CopyToHost(t, out.data() + offset));
    offset += t.nbytes();
  }
  return out;
}

// Copies stage `s`'s flattened weights into its tensors of `full` (the
// whole model's parameters).
absl::Status Unflatten(const std::string& bytes, const PipelineLayout& layout,
                       int s, Device& device, ParameterSet& full) {
  const int first = full.offsets[layout.layer_begin[s]];
  const int end = full.offsets[layout.layer_begin[s + 1]];
  size_t offset = 0;
  for (int i = first; i < end; ++i) {
    const Tensor& t = full.tensors[i];
    if (offset + t.nbytes() > bytes.size()) {
      return absl::DataLossError(
          absl::StrCat("the weights of stage ", s, " have ", bytes.size(),
                       " bytes, fewer than the model needs"));
    }
    RETURN_IF_ERROR(device.CopyFromHost(bytes.data() + offset, t));
    offset += t.nbytes();
  }
  return absl::OkStatus();
}

// The evaluator: every stage's weights (its own, and replica 0's of the
// others) in one parameter set of the whole model.
absl::StatusOr<ParameterSet> GatherWeights(const EvaluationInputs& in) {
  const PipelineLayout& layout = in.layout->pipeline;
  const int S = layout.num_stages();
  ASSIGN_OR_RETURN(
      ParameterSet full,
      InitParameters(*in.model, 0, in.model->num_layers(), in.device));
  for (int s = 0; s < S; ++s) {
    std::string bytes;
    if (s == S - 1) {
      ASSIGN_OR_RETURN(bytes, Flatten(*in.device, *in.stage_params));
    } else {
      ASSIGN_OR_RETURN(bytes, in.comm->Recv(layout.ranks[s][0], kWeightsTag + s)
                                  ->Wait(absl::Now() + in.timeout));
    }
    RETURN_IF_ERROR(Unflatten(bytes, layout, s, *in.device, full));
  }
  return full;
}

}  // namespace

absl::StatusOr<EndOfJob> EvaluateAtEnd(const EvaluationInputs& in) {
  const JobLayout& layout = *in.layout;
  EndOfJob end;
  if (layout.replica != 0) return end;
  if (!layout.output_stage()) {
    ASSIGN_OR_RETURN(std::string flat, Flatten(*in.device, *in.stage_params));
    RETURN_IF_ERROR(in.comm
                        ->Send(layout.evaluator_rank(),
                               kWeightsTag + layout.stage, std::move(flat))
                        ->Wait(absl::Now() + in.timeout));
    return end;
  }
  ASSIGN_OR_RETURN(ParameterSet full, GatherWeights(in));
  if (in.has_test_split) {
    if (in.test == nullptr) {
      return absl::InternalError("the test split did not load");
    }
    ASSIGN_OR_RETURN(end.eval, Evaluate(*in.model, in.device, full, *in.test,
                                        layout.batch_size));
  }
  ASSIGN_OR_RETURN(end.model, ExportParameters(*in.device, full));
  return end;
}

}  // namespace aqueduct
