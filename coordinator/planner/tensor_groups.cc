#include "coordinator/planner/tensor_groups.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"

namespace aqueduct {

namespace {

// The transformer layer a profile row measures, if any: width, heads, MLP
// width (0 for an attention layer) and context.
struct TransformerShape {
  int64_t dim = 0, heads = 0, hidden = 0, context = 0;
  bool block = false;
};

bool TransformerOf(const ModelSpec& model, int layer, TransformerShape* out) {
  if (layer < 0 || layer >= model.layers_size()) return false;
  const LayerSpec& l = model.layers(layer);
  if (l.has_transformer_block()) {
    const auto& b = l.transformer_block();
    out->dim = b.dim();
    out->heads = b.heads();
    out->hidden = b.has_mlp_hidden() ? b.mlp_hidden() : 4 * b.dim();
    out->block = true;
  } else if (l.has_causal_self_attention()) {
    out->dim = l.causal_self_attention().dim();
    out->heads = l.causal_self_attention().heads();
  } else {
    return false;
  }
  // The context: from the position embedding, the model's sequence length.
  for (const LayerSpec& other : model.layers()) {
    if (other.has_position_embedding()) {
      out->context = other.position_embedding().context();
    }
  }
  return true;
}

// The all-reduces' seconds per minibatch for one member.
double SumSeconds(const TransformerShape& t, const MemberCosts& c) {
  if (c.degree == 1) return 0;
  const double bytes = TensorGroupBytesPerLayer(
      c.batch_size * std::max<int64_t>(1, t.context), t.dim, c.degree,
      t.block, /*forward_only=*/false);
  const int sums = (t.block ? 4 : 2) * std::max(1, c.microbatches);
  return bytes / c.bandwidth_bytes_per_s +
         sums * 2.0 * (c.degree - 1) * c.step_latency_s;
}

void Recomputed(const TransformerShape& t, const MemberCosts& c,
                LayerProfile* p) {
  const double T = static_cast<double>(std::max<int64_t>(1, t.context));
  const double C = static_cast<double>(t.dim);
  if (c.recompute == Recompute::kFull) {
    p->set_backward_ms(p->backward_ms() + p->forward_ms());
    p->set_saved_bytes(static_cast<double>(c.batch_size) * T * C * 4);
  } else if (c.recompute == Recompute::kSelective) {
    const double core = 2 * T * T * C / (24 * T * C * C + 2 * T * T * C);
    p->set_backward_ms(p->backward_ms() + p->forward_ms() * core);
    const double probs = static_cast<double>(c.batch_size) * t.heads / c.degree *
                         T * T * 4;
    p->set_saved_bytes(std::max(0.0, p->saved_bytes() - probs));
  }
}

}  // namespace

absl::StatusOr<ModelProfile> MemberProfile(const ModelSpec& model,
                                           const ModelProfile& profile,
                                           const MemberCosts& costs) {
  ModelProfile out = profile;
  for (LayerProfile& p : *out.mutable_nodes()) {
    TransformerShape t;
    if (!p.has_layer_index() || !TransformerOf(model, p.layer_index(), &t)) {
      continue;
    }
    if (t.heads % costs.degree != 0 ||
        (t.block && t.hidden % costs.degree != 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "pipeline.tensor_parallel=", costs.degree, " does not divide ",
          "model.layers[", p.layer_index(), "]'s ", t.heads, " heads",
          t.block ? absl::StrCat(" and ", t.hidden, " MLP units") : ""));
    }
    const double d = costs.degree;
    const double sum_ms = SumSeconds(t, costs) * 1e3 / 2;  // per direction
    p.set_forward_ms(p.forward_ms() / d + sum_ms);
    p.set_backward_ms(p.backward_ms() / d + sum_ms);
    p.set_parameter_bytes(p.parameter_bytes() / d);
    p.set_optimizer_ms(p.optimizer_ms() / d);
    p.set_saved_bytes(p.saved_bytes() / d);
    Recomputed(t, costs, &p);
  }
  return out;
}

void ExpandTensorGroups(int degree, Recompute recompute, PartitionPlan* plan) {
  for (PlanStage& stage : *plan->mutable_stages()) {
    stage.set_recompute(RecomputeName(recompute));
    if (degree <= 1) continue;
    std::vector<int> ranks(stage.worker_ranks().begin(),
                           stage.worker_ranks().end());
    stage.clear_worker_ranks();
    for (int r : ranks) {
      for (int k = 0; k < degree; ++k) stage.add_worker_ranks(r * degree + k);
    }
    stage.set_tensor_parallel(degree);
  }
  if (degree > 1) {
    plan->set_workers_used(plan->workers_used() * degree);
    plan->set_workers_total(plan->workers_total() * degree);
  }
}

}  // namespace aqueduct
