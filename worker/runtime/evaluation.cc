#include "worker/runtime/evaluation.h"

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/nn/weights.h"

namespace aqueduct {

namespace {

// Tags of the weights messages: kWeightsTag + (member << 40) + stage at
// the end, and kEvalTag + (member << 46) + (version << 12) + stage for a
// periodic evaluation (member: of a tensor group, below kMaxTensorParallel
// = 64; clear of frame tags, which stay below 2^58 for any feasible
// minibatch count, and of group tags, from 2^60).
constexpr uint64_t kWeightsTag = uint64_t{1} << 58;
constexpr uint64_t kEvalTag = uint64_t{1} << 59;

uint64_t WeightsTag(int stage, int member) {
  return kWeightsTag + (static_cast<uint64_t>(member) << 40) +
         static_cast<uint64_t>(stage);
}

uint64_t EvalTag(int64_t version, int stage, int member) {
  return kEvalTag + (static_cast<uint64_t>(member) << 46) +
         (static_cast<uint64_t>(version) << 12) + static_cast<uint64_t>(stage);
}

// The worker that gathers and evaluates: member 0 of the output stage's
// replica 0.
bool IsEvaluator(const JobLayout& layout) {
  return layout.output_stage() && layout.member == 0;
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

// One tensor of `full` from every member's part of it, at `offset` in each
// member's flattened weights (advanced past it).
absl::Status UnflattenTensor(const std::vector<std::string>& parts,
                             const Tensor& whole, const ParamSplit& split,
                             int s, Device& device, size_t* offset) {
  const int t = static_cast<int>(parts.size());
  const bool split_here = t > 1 && split.dim >= 0;
  const size_t bytes = split_here ? whole.nbytes() / t : whole.nbytes();
  for (const std::string& part : parts) {
    if (*offset + bytes > part.size()) {
      return absl::DataLossError(
          absl::StrCat("the weights of stage ", s, " have ", part.size(),
                       " bytes, fewer than the model needs"));
    }
  }
  if (!split_here) {
    RETURN_IF_ERROR(device.CopyFromHost(parts[0].data() + *offset, whole));
    *offset += bytes;
    return absl::OkStatus();
  }
  std::vector<std::vector<float>> shards(t);
  for (int k = 0; k < t; ++k) {
    shards[k].resize(bytes / sizeof(float));
    std::memcpy(shards[k].data(), parts[k].data() + *offset, bytes);
  }
  *offset += bytes;
  const std::vector<float> values = WholeOfShards(shards, whole.shape(), split);
  return device.CopyFromHost(values.data(), whole);
}

// Copies stage `s`'s flattened weights (one part per member of its tensor
// group) into its tensors of `full` (the whole model's parameters).
absl::Status Unflatten(const std::vector<std::string>& parts,
                       const Model& model, const PipelineLayout& layout, int s,
                       Device& device, ParameterSet& full) {
  size_t offset = 0;
  for (int l = layout.layer_begin[s]; l < layout.layer_begin[s + 1]; ++l) {
    for (int i = full.offsets[l]; i < full.offsets[l + 1]; ++i) {
      const ParamSplit split = model.layer(l).SplitOf(i - full.offsets[l]);
      RETURN_IF_ERROR(
          UnflattenTensor(parts, full.tensors[i], split, s, device, &offset));
    }
  }
  return absl::OkStatus();
}

// The evaluator: every stage's weights (its own, and replica 0's of the
// others, each member's part of a tensor-parallel one) in one parameter set
// of the whole model.
absl::StatusOr<ParameterSet> GatherWeights(
    const EvaluationInputs& in, std::function<uint64_t(int, int)> tag_of) {
  const PipelineLayout& layout = in.layout->pipeline;
  const int S = layout.num_stages();
  ASSIGN_OR_RETURN(
      ParameterSet full,
      InitParameters(*in.model, 0, in.model->num_layers(), in.device));
  for (int s = 0; s < S; ++s) {
    std::vector<std::string> parts(layout.TensorDegree(s));
    for (int k = 0; k < layout.TensorDegree(s); ++k) {
      auto mine = in.local.find(s);
      auto flat = in.local_flat.find(s);
      if (k == 0 && flat != in.local_flat.end()) {
        parts[k] = flat->second;
      } else if (k == 0 && mine != in.local.end()) {
        ASSIGN_OR_RETURN(parts[k], Flatten(*in.device, *mine->second));
      } else {
        ASSIGN_OR_RETURN(parts[k],
                         in.comm->Recv(layout.RankAt(s, 0, k), tag_of(s, k))
                             ->Wait(absl::Now() + in.timeout));
      }
    }
    const int t = layout.TensorDegree(s);
    std::unique_ptr<Model> member;
    if (t > 1) {
      if (in.model_spec == nullptr) {
        return absl::InternalError("the evaluator has no model spec");
      }
      ASSIGN_OR_RETURN(member,
                       Model::Build(*in.model_spec, in.model->input_shape(),
                                    in.model->seed(), {0, t}));
    }
    RETURN_IF_ERROR(Unflatten(parts, t > 1 ? *member : *in.model, layout, s,
                              *in.device, full));
  }
  return full;
}

}  // namespace

absl::StatusOr<EndOfJob> EvaluateAtEnd(const EvaluationInputs& in) {
  const JobLayout& layout = *in.layout;
  EndOfJob end;
  if (layout.replica != 0) return end;
  if (!IsEvaluator(layout)) {
    for (const auto& [stage, params] : in.local) {
      ASSIGN_OR_RETURN(std::string flat, Flatten(*in.device, *params));
      RETURN_IF_ERROR(in.comm
                          ->Send(layout.evaluator_rank(),
                                 WeightsTag(stage, layout.member),
                                 std::move(flat))
                          ->Wait(absl::Now() + in.timeout));
    }
    return end;
  }
  ASSIGN_OR_RETURN(ParameterSet full, GatherWeights(in, WeightsTag));
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

bool GathersEvaluation(const JobLayout& layout, int stage) {
  return layout.replica == 0 && IsEvaluator(layout) &&
         stage == layout.num_stages() - 1;
}

absl::Status LocalSnapshot(EvaluationInputs* in) {
  for (const auto& [stage, params] : in->local) {
    ASSIGN_OR_RETURN(in->local_flat[stage], Flatten(*in->device, *params));
  }
  in->local.clear();
  return absl::OkStatus();
}

absl::StatusOr<std::optional<EvalResult>> EvaluateAtVersion(
    const EvaluationInputs& in, int64_t version,
    std::vector<std::unique_ptr<Work>>* sends) {
  const JobLayout& layout = *in.layout;
  if (layout.replica != 0) return std::nullopt;
  auto mine = in.local.find(in.stage);
  if (mine == in.local.end() && in.local_flat.count(in.stage) == 0) {
    return absl::InternalError(
        absl::StrCat("an evaluation called for stage ", in.stage,
                     ", which this worker does not hold"));
  }
  if (!IsEvaluator(layout)) {
    if (mine == in.local.end()) {
      return absl::InternalError("a periodic evaluation's sender snapshot");
    }
    ASSIGN_OR_RETURN(std::string flat, Flatten(*in.device, *mine->second));
    sends->push_back(in.comm->Send(layout.evaluator_rank(),
                                   EvalTag(version, in.stage, layout.member),
                                   std::move(flat)));
    return std::nullopt;
  }
  // The evaluator's rank: its other chunks step before the output stage
  // (a rank's steps run in stage order), which gathers.
  if (in.stage != layout.num_stages() - 1) return std::nullopt;
  if (in.test == nullptr) {
    return absl::InternalError("the held-out split did not load");
  }
  ASSIGN_OR_RETURN(ParameterSet full,
                   GatherWeights(in, [version](int s, int member) {
                     return EvalTag(version, s, member);
                   }));
  return Evaluate(*in.model, in.device, full, *in.test, layout.batch_size);
}

}  // namespace aqueduct
