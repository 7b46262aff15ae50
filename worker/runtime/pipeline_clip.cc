// Gradient-norm clipping across a pipeline's stages (PipelineStage's
// ClipAcrossStages): the global norm of torch.nn.utils.clip_grad_norm_
// over the whole model, every stage and every member of a tensor group.
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "worker/nn/clipping.h"
#include "worker/runtime/pipeline_stage.h"

namespace aqueduct {

absl::StatusOr<double> PipelineStage::StageSquares(absl::Time deadline) {
  ASSIGN_OR_RETURN(double squares,
                   GradSquares(*model_, *device_, grads_, member_ == 0));
  if (Degree() == 1) return squares;
  float sum = static_cast<float>(squares);
  RETURN_IF_ERROR(options_.tensor_group->AllReduce(&sum, 1, deadline));
  return static_cast<double>(sum);
}

std::vector<int> PipelineStage::NormPeers(
    const std::vector<PipelineStage*>& chunks) const {
  std::set<int> held, peers;
  for (const PipelineStage* c : chunks) held.insert(c->stage_);
  for (int other = 0; other < layout_.num_stages(); ++other) {
    if (held.count(other) != 0) continue;
    for (int d = replica_; d < layout_.Replicas(other);
         d += layout_.Replicas(stage_)) {
      for (int k = member_; k < layout_.TensorDegree(other); k += Degree()) {
        peers.insert(layout_.RankAt(other, d, k));
      }
    }
  }
  peers.erase(comm_->rank());
  return std::vector<int>(peers.begin(), peers.end());
}

absl::Status PipelineStage::ClipAcrossStages(
    const std::vector<PipelineStage*>& chunks, int64_t m) {
  const PipelineStage& first = *chunks[0];
  const float clip = first.spec_.optimizer().clip_grad_norm();
  if (clip <= 0) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + first.options_.timeout;
  std::map<int, double> mine;  // stage -> its sum of squares
  for (PipelineStage* c : chunks) {
    RETURN_IF_ERROR(c->FinishGradients(m));
    ASSIGN_OR_RETURN(mine[c->stage_], c->StageSquares(deadline));
  }
  std::vector<std::unique_ptr<Work>> sends;
  for (const PipelineStage* c : chunks) {
    const double squares = mine[c->stage_];
    std::string out(sizeof(squares), '\0');
    std::memcpy(out.data(), &squares, sizeof(squares));
    const uint64_t tag =
        FrameTag(FrameKind::kGradNorm, m, 0, c->ChunkOfStage(c->stage_));
    for (int peer : c->NormPeers(chunks)) {
      sends.push_back(c->comm_->SendExact(peer, tag, out));
    }
  }
  const PipelineLayout& layout = first.layout_;
  std::map<int, double> all = mine;
  for (int other = 0; other < layout.num_stages(); ++other) {
    if (mine.count(other) != 0) continue;
    const int from =
        layout.RankAt(other, first.replica_ % layout.Replicas(other),
                      first.member_ % layout.TensorDegree(other));
    const uint64_t tag =
        FrameTag(FrameKind::kGradNorm, m, 0, first.ChunkOfStage(other));
    ASSIGN_OR_RETURN(std::string in,
                     first.comm_->RecvExact(from, tag, 8)->Wait(deadline));
    std::memcpy(&all[other], in.data(), sizeof(double));
  }
  for (auto& send : sends) RETURN_IF_ERROR(send->Wait(deadline));
  // In stage order: the same sum, to the bit, on every rank.
  double total = 0;
  for (const auto& [stage, squares] : all) total += squares;
  const float factor = ClipFactor(total, clip);
  for (PipelineStage* c : chunks) {
    ScaleGradients(*c->device_, c->grads_, factor);
  }
  return absl::OkStatus();
}

}  // namespace aqueduct
