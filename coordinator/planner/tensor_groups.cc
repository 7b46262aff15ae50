#include "coordinator/planner/tensor_groups.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "pipeline/spec.h"

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

// The group's collectives' seconds per minibatch for one member, in the
// forward or the backward pass.
double SumSeconds(const TransformerShape& t, const MemberCosts& c,
                  bool backward) {
  if (c.degree == 1) return 0;
  const bool sequence = c.sequence && t.block;
  const int64_t rows = c.batch_size * std::max<int64_t>(1, t.context);
  const double forward =
      TensorGroupBytesPerLayer(rows, t.dim, c.degree, t.block, true, sequence);
  const double bytes =
      backward ? TensorGroupBytesPerLayer(rows, t.dim, c.degree, t.block, false,
                                          sequence) -
                     forward
               : forward;
  // In all-reduces (two halves each): sequence parallelism's backward
  // gathers two halves more.
  const int sums = ((t.block ? 2 : 1) + (backward && sequence ? 1 : 0)) *
                   std::max(1, c.microbatches);
  return bytes / c.bandwidth_bytes_per_s +
         sums * 2.0 * (c.degree - 1) * c.step_latency_s;
}

// The whole layer's backward (ms) and saved bytes in the costs' mode: the
// profiler's measurement, or else an estimate from the mode none figures
// (selective: the attention core again, 2T^2C of 24TC^2 + 2T^2C of the
// forward, and no attention weights; full: the forward again, and the
// input alone).
std::pair<double, double> InMode(const LayerProfile& p,
                                 const TransformerShape& t,
                                 const MemberCosts& c) {
  if (c.recompute == Recompute::kNone) {
    return {p.backward_ms(), p.saved_bytes()};
  }
  for (const v1::RecomputeCost& m : p.recompute_costs()) {
    if (m.mode() == RecomputeName(c.recompute)) {
      return {m.backward_ms(), m.saved_bytes()};
    }
  }
  const double T = static_cast<double>(std::max<int64_t>(1, t.context));
  const double C = static_cast<double>(t.dim);
  const double B = static_cast<double>(c.batch_size);
  if (c.recompute == Recompute::kFull) {
    return {p.backward_ms() + p.forward_ms(), B * T * C * 4};
  }
  const double core = 2 * T * T * C / (24 * T * C * C + 2 * T * T * C);
  const double probs = B * t.heads * T * T * 4;
  return {p.backward_ms() + p.forward_ms() * core,
          std::max(0.0, p.saved_bytes() - probs)};
}

// A member's share of what the whole layer keeps: the residual stream's
// tensors (x, and a block's x2; full recomputation's input) whole (a
// sequence-parallel block's split by rows), the rest split.
double MemberSaved(double saved, const TransformerShape& t,
                   const MemberCosts& c) {
  const double tensor = static_cast<double>(c.batch_size) *
                        std::max<int64_t>(1, t.context) * t.dim * 4;
  const double share = c.sequence && t.block ? 1.0 / c.degree : 1.0;
  if (c.recompute == Recompute::kFull) return std::min(saved, tensor) * share;
  const double stream = std::min(saved, (t.block ? 2 : 1) * tensor);
  return stream * share + (saved - stream) / c.degree;
}

// A vocabulary-parallel embedding or head (pipeline/spec.h
// SplitsVocabulary): V / t rows, and the head's V / t logits; the
// embedding's output, and the head's input gradient, summed over the
// group (one all-reduce of B*T*C floats each).
void VocabularyShare(const ModelSpec& model, const MemberCosts& c,
                     LayerProfile* p) {
  const int l = p->layer_index();
  const int last = model.layers_size() - 1;
  if ((l != 0 && l != last) || !SplitsVocabulary(model, c.degree)) return;
  const double d = c.degree;
  int64_t context = 1;
  for (const LayerSpec& other : model.layers()) {
    if (other.has_position_embedding()) {
      context = other.position_embedding().context();
    }
  }
  const int64_t dim = l == 0 ? model.layers(0).token_embedding().dim()
                             : model.layers(last).linear().in_features();
  const double bytes = static_cast<double>(c.batch_size) * context * dim * 4 *
                       2.0 * (c.degree - 1) / c.degree;
  const double sum_ms =
      (bytes / c.bandwidth_bytes_per_s +
       std::max(1, c.microbatches) * 2.0 * (c.degree - 1) * c.step_latency_s) *
      1e3;
  p->set_parameter_bytes(p->parameter_bytes() / d);
  p->set_optimizer_ms(p->optimizer_ms() / d);
  if (l == 0) {
    p->set_forward_ms(p->forward_ms() + sum_ms);
    return;
  }
  p->set_forward_ms(p->forward_ms() / d);
  p->set_backward_ms(p->backward_ms() / d + sum_ms);
  p->set_activation_bytes(p->activation_bytes() / d);
}

}  // namespace

absl::StatusOr<ModelProfile> MemberProfile(const ModelSpec& model,
                                           const ModelProfile& profile,
                                           const MemberCosts& costs) {
  ModelProfile out = profile;
  for (LayerProfile& p : *out.mutable_nodes()) {
    TransformerShape t;
    if (!p.has_layer_index()) continue;
    if (!TransformerOf(model, p.layer_index(), &t)) {
      VocabularyShare(model, costs, &p);
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
    const double sum_ms = SumSeconds(t, costs, false) * 1e3;
    const auto [backward_ms, saved] = InMode(p, t, costs);
    // Full recomputation runs the forward's sums again in backward.
    const double backward_sums =
        SumSeconds(t, costs, true) * 1e3 +
        (costs.recompute == Recompute::kFull ? sum_ms : 0);
    p.set_forward_ms(p.forward_ms() / d + sum_ms);
    p.set_backward_ms(backward_ms / d + backward_sums);
    p.set_parameter_bytes(p.parameter_bytes() / d);
    p.set_optimizer_ms(p.optimizer_ms() / d);
    p.set_saved_bytes(MemberSaved(saved, t, costs));
    p.clear_recompute_costs();
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
