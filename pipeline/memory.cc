#include "pipeline/memory.h"

#include <algorithm>

#include "pipeline/limits.h"
#include "pipeline/schedule.h"
#include "pipeline/spec.h"

namespace aqueduct {

namespace {

constexpr int64_t kFloatBytes = 4;

int64_t Mul(int64_t a, int64_t b) { return SaturatingMul(a, b); }
int64_t Add(int64_t a, int64_t b) { return SaturatingAdd(a, b); }

// Elements of a fully known shape; 0 when any of it is unknown.
int64_t KnownFloats(const SymbolicShape& s) {
  return s.FullyKnown() ? SaturatingProduct(s.dims) : 0;
}

// T of a [T, dim] input when known, else 0.
int64_t Positions(const SymbolicShape& in) {
  if (!in.rank_known || in.dims.empty() || in.dims[0] == kUnknownDim) return 0;
  return in.dims[0];
}

// c_attn [3C, C] and c_proj [C, C], with their biases.
int64_t AttentionParameters(int64_t dim, bool bias) {
  return Add(Mul(4, Mul(dim, dim)), bias ? Mul(4, dim) : 0);
}

// What attention keeps per sample over T positions: its input, q/k/v, the
// attention weights [heads, T, T] and the merged heads.
int64_t AttentionSaved(int64_t t, int64_t dim, int64_t heads) {
  return Add(Mul(5, Mul(t, dim)), Mul(heads, Mul(t, t)));
}

// A member's share of a transformer layer (EstimateModel). `whole_params`
// of the parameters stay whole (LayerNorms, row-parallel biases).
// `sequence`: a block's residual stream split by rows.
LayerFootprint Member(LayerFootprint whole, int64_t whole_params, int64_t t,
                      int64_t dim, int64_t heads, int64_t hidden, bool block,
                      int degree, Recompute mode, bool sequence) {
  LayerFootprint f;
  f.parameters = Add((whole.parameters - whole_params) / degree, whole_params);
  const int64_t td = Mul(t, dim);
  const int64_t stream = block && sequence ? td / degree : td;
  const int64_t probs = Mul(heads, Mul(t, t)) / degree;
  switch (mode) {
    case Recompute::kFull:
      f.activations_per_sample = stream;
      return f;
    case Recompute::kSelective:
    case Recompute::kNone: {
      // x (and x2) whole; q, k, v, merged, the weights, the MLP hidden split.
      int64_t kept = Add(Mul(block ? 2 : 1, stream),
                         Add(Mul(4, td) / degree, Mul(t, hidden) / degree));
      if (mode == Recompute::kNone) kept = Add(kept, probs);
      f.activations_per_sample = kept;
      return f;
    }
  }
  return f;
}

LayerFootprint TransformerBlock(const v1::TransformerBlockSpec& s,
                                const SymbolicShape& in) {
  const int64_t dim = s.dim();
  const int64_t hidden = s.has_mlp_hidden() ? s.mlp_hidden() : Mul(4, dim);
  const bool bias = !s.has_bias() || s.bias();
  LayerFootprint f;
  // Attention, two LayerNorms, c_fc [hidden, C] and c_proj [C, hidden].
  f.parameters =
      Add(Add(AttentionParameters(dim, bias), Mul(4, dim)),
          Add(Mul(2, Mul(hidden, dim)), bias ? Add(hidden, dim) : 0));
  // Attention's tensors, the residual x2 and the MLP's pre-GELU hidden.
  const int64_t t = Positions(in);
  f.activations_per_sample =
      Add(Add(AttentionSaved(t, dim, s.heads()), Mul(t, dim)), Mul(t, hidden));
  return f;
}

// The LLaMA block keeps its input, the residual after attention, the
// rotated q and k, v, the attention weights, the merged heads and the
// MLP's gate and up [T, hidden] (worker/nn/llama.h).
LayerFootprint LlamaBlock(const v1::LlamaBlockSpec& s,
                          const SymbolicShape& in) {
  const int64_t dim = s.dim();
  const int64_t kv = s.has_kv_heads() ? s.kv_heads() : s.heads();
  const int64_t kv_width = s.heads() > 0 ? Mul(kv, dim / s.heads()) : 0;
  const int64_t t = Positions(in);
  LayerFootprint f;
  f.parameters =
      Add(Add(Mul(2, dim), Mul(2, Mul(dim, dim))),
          Add(Mul(2, Mul(kv_width, dim)), Mul(3, Mul(s.hidden(), dim))));
  f.activations_per_sample =
      Add(Add(Mul(4, Mul(t, dim)), Mul(2, Mul(t, kv_width))),
          Add(Mul(s.heads(), Mul(t, t)), Mul(2, Mul(t, s.hidden()))));
  return f;
}

LayerFootprint Conv2d(const Conv2dSpec& s, int64_t x) {
  LayerFootprint f;
  const int64_t k2 = Mul(s.kernel_size(), s.kernel_size());
  f.parameters = Add(Mul(Mul(s.out_channels(), s.in_channels()), k2),
                     !s.has_bias() || s.bias() ? s.out_channels() : 0);
  f.activations_per_sample = x;
  return f;
}

}  // namespace

LayerFootprint EstimateLayer(const LayerSpec& spec, const SymbolicShape& in,
                             const SymbolicShape& out) {
  const int64_t x = KnownFloats(in);
  const int64_t y = KnownFloats(out);
  LayerFootprint f;
  switch (spec.kind_case()) {
    case LayerSpec::kLinear: {
      const LinearSpec& s = spec.linear();
      const bool bias = !s.has_bias() || s.bias();
      f.parameters = Add(Mul(s.in_features(), s.out_features()),
                         bias ? s.out_features() : 0);
      f.activations_per_sample = x;
      return f;
    }
    case LayerSpec::kRelu:
    case LayerSpec::kMaxPool2D:  // Its argmax, as large as its output.
      f.activations_per_sample = y;
      return f;
    case LayerSpec::kGelu:
      f.activations_per_sample = x;
      return f;
    case LayerSpec::kConv2D:
      return Conv2d(spec.conv2d(), x);
    case LayerSpec::kLayerNorm: {
      const int64_t n = spec.layer_norm().normalized_shape();
      f.parameters = Mul(2, n);
      // Its input, and a mean and a reciprocal deviation per row.
      f.activations_per_sample = n > 0 ? Add(x, Mul(2, x / n)) : x;
      return f;
    }
    case LayerSpec::kTokenEmbedding:
      f.parameters = Mul(spec.token_embedding().vocab_size(),
                         spec.token_embedding().dim());
      f.activations_per_sample = x;  // The token ids.
      return f;
    case LayerSpec::kPositionEmbedding:
      f.parameters = Mul(spec.position_embedding().context(),
                         spec.position_embedding().dim());
      return f;
    case LayerSpec::kCausalSelfAttention: {
      const v1::CausalSelfAttentionSpec& s = spec.causal_self_attention();
      f.parameters = AttentionParameters(s.dim(), !s.has_bias() || s.bias());
      f.activations_per_sample =
          AttentionSaved(Positions(in), s.dim(), s.heads());
      return f;
    }
    case LayerSpec::kTransformerBlock:
      return TransformerBlock(spec.transformer_block(), in);
    case LayerSpec::kLlamaBlock:
      return LlamaBlock(spec.llama_block(), in);
    case LayerSpec::kRmsNorm: {
      const int64_t n = spec.rms_norm().dim();
      f.parameters = n;
      // Its input and a reciprocal RMS per row.
      f.activations_per_sample = n > 0 ? Add(x, x / n) : x;
      return f;
    }
    default:  // Dropout (its mask is recomputed), flatten, delay.
      return f;
  }
}

// A member's share of layer `spec` (EstimateModel); other layers whole.
LayerFootprint MemberLayer(const LayerSpec& spec, const SymbolicShape& in,
                           const LayerFootprint& whole, int degree,
                           Recompute mode, bool sequence) {
  if (degree <= 1 && mode == Recompute::kNone) return whole;
  const int64_t t = Positions(in);
  if (spec.has_transformer_block()) {
    const auto& s = spec.transformer_block();
    const int64_t hidden =
        s.has_mlp_hidden() ? s.mlp_hidden() : Mul(4, s.dim());
    const bool bias = !s.has_bias() || s.bias();
    return Member(whole, Add(Mul(4, s.dim()), bias ? Mul(2, s.dim()) : 0), t,
                  s.dim(), s.heads(), hidden, true, degree, mode, sequence);
  }
  if (spec.has_causal_self_attention()) {
    const auto& s = spec.causal_self_attention();
    const bool bias = !s.has_bias() || s.bias();
    return Member(whole, bias ? s.dim() : 0, t, s.dim(), s.heads(), 0, false,
                  degree, mode, false);
  }
  if (spec.has_llama_block()) {  // Whole on every member (degree 1).
    LayerFootprint f = whole;
    const auto& s = spec.llama_block();
    if (mode == Recompute::kFull) f.activations_per_sample = Mul(t, s.dim());
    if (mode == Recompute::kSelective) {
      f.activations_per_sample -= Mul(s.heads(), Mul(t, t));
    }
    return f;
  }
  return whole;
}

std::vector<LayerFootprint> EstimateModel(
    const ModelSpec& model, const SymbolicShape& input,
    const std::vector<SymbolicShape>& outputs, int degree, Recompute mode,
    bool sequence) {
  std::vector<LayerFootprint> layers;
  const int n = std::min(model.layers_size(), static_cast<int>(outputs.size()));
  for (int l = 0; l < n; ++l) {
    const SymbolicShape& in = l == 0 ? input : outputs[l - 1];
    LayerFootprint f = MemberLayer(
        model.layers(l), in, EstimateLayer(model.layers(l), in, outputs[l]),
        std::max(1, degree), mode, sequence && degree > 1);
    // A vocabulary-parallel embedding and head: V / t rows and logits.
    if ((l == 0 || l == n - 1) && n == model.layers_size() &&
        SplitsVocabulary(model, degree)) {
      f.parameters /= degree;
      if (l == n - 1) f.activations_per_sample /= degree;
    }
    layers.push_back(f);
  }
  if (!layers.empty()) {
    // The logits, which the loss reads.
    layers.back().activations_per_sample =
        Add(layers.back().activations_per_sample, KnownFloats(outputs[n - 1]));
  }
  return layers;
}

int OptimizerStateFactor(const OptimizerSpec& spec) {
  if (spec.has_adam() || spec.has_adamw()) return 2;
  return spec.has_sgd() && spec.sgd().momentum() > 0 ? 1 : 0;
}

StageFootprint EstimateStage(const std::vector<LayerFootprint>& layers,
                             int begin, int end, int copies, int64_t samples) {
  StageFootprint f;
  begin = std::max(begin, 0);
  end = std::min(end, static_cast<int>(layers.size()));
  for (int l = begin; l < end; ++l) {
    const int64_t params = Mul(layers[l].parameters, Mul(copies, kFloatBytes));
    const int64_t act =
        Mul(Mul(layers[l].activations_per_sample, samples), kFloatBytes);
    f.parameters = Add(f.parameters, layers[l].parameters);
    f.parameter_bytes = Add(f.parameter_bytes, params);
    f.activation_bytes = Add(f.activation_bytes, act);
    const int64_t total = Add(params, act);
    if (f.heaviest_layer < 0 || total > f.heaviest_bytes) {
      f.heaviest_layer = l;
      f.heaviest_bytes = total;
    }
  }
  f.total_bytes = Add(f.parameter_bytes, f.activation_bytes);
  return f;
}

int64_t MinimumStages(const std::vector<LayerFootprint>& layers, int copies,
                      int64_t samples, int64_t limit_bytes) {
  int64_t stages = 0;
  int64_t held = 0;
  for (int l = 0; l < static_cast<int>(layers.size()); ++l) {
    const int64_t bytes =
        EstimateStage(layers, l, l + 1, copies, samples).total_bytes;
    const int64_t with = Add(held, bytes);
    if (stages > 0 && with <= limit_bytes) {
      held = with;
    } else {
      ++stages;
      held = bytes;
    }
  }
  return stages;
}

int64_t SyntheticDataBytes(const SyntheticData& s, int64_t train,
                           int64_t test) {
  const int64_t per = SaturatingProduct(
      std::vector<int64_t>(s.sample_shape().begin(), s.sample_shape().end()));
  const int64_t samples = Add(train, test);
  const int64_t inputs = Mul(Mul(samples, per), kFloatBytes);
  const int64_t labels = Mul(samples, sizeof(int32_t));
  const int64_t teacher = Mul(Mul(s.num_classes(), per), kFloatBytes);
  return Add(Add(inputs, labels), teacher);
}

int64_t PerStepBytes(bool pipeline, int64_t microbatches) {
  if (!pipeline) return sizeof(double);
  const int64_t ops = Add(Mul(4, std::max<int64_t>(microbatches, 1)), 1);
  return Mul(ops, sizeof(Op));
}

}  // namespace aqueduct
