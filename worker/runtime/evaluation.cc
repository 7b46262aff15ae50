#include "worker/runtime/evaluation.h"

#include <functional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/nn/weights.h"

namespace aqueduct {

namespace {

// Tags of the weights messages: kWeightsTag + stage at the end, and
// kEvalTag + (version << 12) + stage for a periodic evaluation (clear of
// frame tags, which stay below 2^58 for any feasible minibatch count).
constexpr uint64_t kWeightsTag = uint64_t{1} << 58;
constexpr uint64_t kEvalTag = uint64_t{1} << 59;

uint64_t EvalTag(int64_t version, int stage) {
  return kEvalTag + (static_cast<uint64_t>(version) << 12) +
         static_cast<uint64_t>(stage);
}

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
absl::StatusOr<ParameterSet> GatherWeights(
    const EvaluationInputs& in, std::function<uint64_t(int)> tag_of) {
  const PipelineLayout& layout = in.layout->pipeline;
  const int S = layout.num_stages();
  ASSIGN_OR_RETURN(
      ParameterSet full,
      InitParameters(*in.model, 0, in.model->num_layers(), in.device));
  for (int s = 0; s < S; ++s) {
    std::string bytes;
    auto mine = in.local.find(s);
    if (mine != in.local.end()) {
      ASSIGN_OR_RETURN(bytes, Flatten(*in.device, *mine->second));
    } else {
      ASSIGN_OR_RETURN(bytes, in.comm->Recv(layout.ranks[s][0], tag_of(s))
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
    for (const auto& [stage, params] : in.local) {
      ASSIGN_OR_RETURN(std::string flat, Flatten(*in.device, *params));
      RETURN_IF_ERROR(in.comm
                          ->Send(layout.evaluator_rank(), kWeightsTag + stage,
                                 std::move(flat))
                          ->Wait(absl::Now() + in.timeout));
    }
    return end;
  }
  ASSIGN_OR_RETURN(ParameterSet full,
                   GatherWeights(in, [](int s) { return kWeightsTag + s; }));
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

absl::StatusOr<std::optional<EvalResult>> EvaluateAtVersion(
    const EvaluationInputs& in, int64_t version,
    std::vector<std::unique_ptr<Work>>* sends) {
  const JobLayout& layout = *in.layout;
  if (layout.replica != 0) return std::nullopt;
  auto mine = in.local.find(in.stage);
  if (mine == in.local.end()) {
    return absl::InternalError(
        absl::StrCat("an evaluation called for stage ", in.stage,
                     ", which this worker does not hold"));
  }
  if (!layout.output_stage()) {
    ASSIGN_OR_RETURN(std::string flat, Flatten(*in.device, *mine->second));
    sends->push_back(in.comm->Send(
        layout.evaluator_rank(), EvalTag(version, in.stage), std::move(flat)));
    return std::nullopt;
  }
  // The evaluator's rank: its other chunks step before the output stage
  // (a rank's steps run in stage order), which gathers.
  if (in.stage != layout.num_stages() - 1) return std::nullopt;
  if (in.test == nullptr) {
    return absl::InternalError("the held-out split did not load");
  }
  ASSIGN_OR_RETURN(ParameterSet full, GatherWeights(in, [version](int s) {
                     return EvalTag(version, s);
                   }));
  return Evaluate(*in.model, in.device, full, *in.test, layout.batch_size);
}

}  // namespace aqueduct
