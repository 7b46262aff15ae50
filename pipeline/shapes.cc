#include "pipeline/shapes.h"

#include <algorithm>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "common/status.h"
#include "pipeline/limits.h"

namespace aqueduct {

SymbolicShape SymbolicShape::Known(std::vector<int64_t> dims) {
  SymbolicShape s;
  s.rank_known = true;
  s.dims = std::move(dims);
  return s;
}

int64_t SymbolicShape::LastDim() const {
  if (!rank_known) return last;
  return dims.empty() ? kUnknownDim : dims.back();
}

bool SymbolicShape::FullyKnown() const {
  if (!rank_known) return false;
  for (int64_t d : dims) {
    if (d == kUnknownDim) return false;
  }
  return true;
}

std::string SymbolicShape::ToString() const {
  auto dim = [](std::string* out, int64_t d) {
    absl::StrAppend(out, d == kUnknownDim ? "?" : absl::StrCat(d));
  };
  if (!rank_known) {
    return last == kUnknownDim ? "[...]" : absl::StrCat("[..., ", last, "]");
  }
  return absl::StrCat("[", absl::StrJoin(dims, ", ", dim), "]");
}

namespace {

std::string Field(int index, absl::string_view kind) {
  return absl::StrCat("model.layers[", index, "].", kind);
}

absl::Status Invalid(const std::string& message) {
  return absl::InvalidArgumentError(message);
}

absl::Status CheckPositive(int64_t value, int index, absl::string_view field) {
  if (value > 0) return absl::OkStatus();
  return Invalid(
      absl::StrCat(Field(index, field), "=", value, " must be positive"));
}

// Positive and at most `max` (pipeline/limits.h's per-field maxima).
absl::Status CheckSize(int64_t value, int64_t max, int index,
                       absl::string_view field) {
  RETURN_IF_ERROR(CheckPositive(value, index, field));
  return CheckAtMost(Field(index, field), value, max);
}

// A weight of `shape` (named `what`, e.g. "[out_features, in_features]")
// must hold at most kMaxTensorFloats floats.
absl::Status CheckWeight(int index, absl::string_view kind,
                         absl::string_view what,
                         const std::vector<int64_t>& shape) {
  const int64_t floats = SaturatingProduct(shape);
  if (floats <= kMaxTensorFloats) return absl::OkStatus();
  return Invalid(
      absl::StrCat(Field(index, kind), ": the weight ", what, " = ",
                   SymbolicShape::Known(shape).ToString(), " has ", floats,
                   " parameters (", FormatBytes(SaturatingMul(floats, 4)),
                   "), more than one tensor may hold (", kMaxTensorFloats,
                   " floats, ", FormatBytes(kMaxTensorFloats * 4), ")"));
}

absl::Status CheckRank3(const SymbolicShape& in, int index,
                        absl::string_view kind) {
  if (!in.rank_known || in.dims.size() == 3) return absl::OkStatus();
  return Invalid(absl::StrCat(
      Field(index, kind),
      " expects [channels, height, width] per sample; the previous layer's "
      "output is ",
      in.ToString()));
}

// The input's dimensions as [channels, height, width], unknown where the
// rank is.
std::vector<int64_t> Chw(const SymbolicShape& in) {
  if (in.rank_known) return in.dims;
  return {kUnknownDim, kUnknownDim, kUnknownDim};
}

// Output side of a window over `size` (unknown stays unknown); an error if
// the padded input is smaller than the kernel.
absl::StatusOr<int64_t> WindowOut(int64_t size, int64_t kernel, int64_t stride,
                                  int64_t padding) {
  if (size == kUnknownDim) return kUnknownDim;
  if (size + 2 * padding < kernel) return Invalid("");
  return (size + 2 * padding - kernel) / stride + 1;
}

absl::StatusOr<SymbolicShape> Window(const SymbolicShape& in, int index,
                                     absl::string_view field, int64_t channels,
                                     int64_t kernel, int64_t stride,
                                     int64_t padding) {
  const std::vector<int64_t> chw = Chw(in);
  auto h = WindowOut(chw[1], kernel, stride, padding);
  auto w = WindowOut(chw[2], kernel, stride, padding);
  if (!h.ok() || !w.ok()) {
    return Invalid(absl::StrCat(Field(index, field), "=", kernel,
                                " is larger than the padded input ",
                                in.ToString()));
  }
  return SymbolicShape::Known({channels, *h, *w});
}

absl::StatusOr<SymbolicShape> Linear(const LinearSpec& s, int index,
                                     const SymbolicShape& in) {
  RETURN_IF_ERROR(
      CheckSize(s.in_features(), kMaxFeatures, index, "linear.in_features"));
  RETURN_IF_ERROR(
      CheckSize(s.out_features(), kMaxFeatures, index, "linear.out_features"));
  RETURN_IF_ERROR(CheckWeight(index, "linear", "[out_features, in_features]",
                              {s.out_features(), s.in_features()}));
  const int64_t last = in.LastDim();
  const bool rank0 = in.rank_known && in.dims.empty();
  if (rank0 || (last != kUnknownDim && last != s.in_features())) {
    const bool vector = in.rank_known && in.dims.size() == 1;
    return Invalid(absl::StrCat(
        Field(index, "linear.in_features"), "=", s.in_features(),
        " does not match the previous layer's output ",
        vector ? in.ToString().substr(1, in.ToString().size() - 2)
               : absl::StrCat(in.ToString(),
                              " (linear applies to the last dimension; add a "
                              "flatten layer)")));
  }
  SymbolicShape out = in;
  if (out.rank_known) {
    out.dims.back() = s.out_features();
  } else {
    out.last = s.out_features();
  }
  return out;
}

absl::StatusOr<SymbolicShape> Conv2d(const Conv2dSpec& s, int index,
                                     const SymbolicShape& in) {
  RETURN_IF_ERROR(CheckRank3(in, index, "conv2d"));
  RETURN_IF_ERROR(
      CheckSize(s.in_channels(), kMaxChannels, index, "conv2d.in_channels"));
  RETURN_IF_ERROR(
      CheckSize(s.out_channels(), kMaxChannels, index, "conv2d.out_channels"));
  RETURN_IF_ERROR(
      CheckSize(s.kernel_size(), kMaxKernel, index, "conv2d.kernel_size"));
  const int64_t stride = s.has_stride() ? s.stride() : 1;
  RETURN_IF_ERROR(CheckSize(stride, kMaxKernel, index, "conv2d.stride"));
  if (s.padding() < 0) {
    return Invalid(absl::StrCat(Field(index, "conv2d.padding"), "=",
                                s.padding(), " must not be negative"));
  }
  RETURN_IF_ERROR(
      CheckAtMost(Field(index, "conv2d.padding"), s.padding(), kMaxKernel));
  RETURN_IF_ERROR(CheckWeight(
      index, "conv2d", "[out_channels, in_channels, kernel_size, kernel_size]",
      {s.out_channels(), s.in_channels(), s.kernel_size(), s.kernel_size()}));
  const int64_t channels = Chw(in)[0];
  if (channels != kUnknownDim && channels != s.in_channels()) {
    return Invalid(
        absl::StrCat(Field(index, "conv2d.in_channels"), "=", s.in_channels(),
                     " does not match the previous layer's output channels ",
                     channels, " (shape ", in.ToString(), ")"));
  }
  return Window(in, index, "conv2d.kernel_size", s.out_channels(),
                s.kernel_size(), stride, s.padding());
}

absl::StatusOr<SymbolicShape> MaxPool2d(const MaxPool2dSpec& s, int index,
                                        const SymbolicShape& in) {
  RETURN_IF_ERROR(CheckRank3(in, index, "max_pool2d"));
  RETURN_IF_ERROR(
      CheckSize(s.kernel_size(), kMaxKernel, index, "max_pool2d.kernel_size"));
  const int64_t stride = s.has_stride() ? s.stride() : s.kernel_size();
  RETURN_IF_ERROR(CheckSize(stride, kMaxKernel, index, "max_pool2d.stride"));
  if (s.padding() < 0 || s.padding() > s.kernel_size() / 2) {
    return Invalid(absl::StrCat(Field(index, "max_pool2d.padding"), "=",
                                s.padding(), " must be in [0, kernel_size/2]"));
  }
  return Window(in, index, "max_pool2d.kernel_size", Chw(in)[0],
                s.kernel_size(), stride, s.padding());
}

absl::StatusOr<SymbolicShape> LayerNorm(const LayerNormSpec& s, int index,
                                        const SymbolicShape& in) {
  const int64_t last = in.LastDim();
  if ((in.rank_known && in.dims.empty()) ||
      (last != kUnknownDim && last != s.normalized_shape()) ||
      s.normalized_shape() <= 0 || s.normalized_shape() > kMaxFeatures) {
    return Invalid(absl::StrCat(
        Field(index, "layer_norm.normalized_shape"), "=", s.normalized_shape(),
        " does not match the last dimension of the previous layer's output ",
        in.ToString()));
  }
  const float eps = s.has_eps() ? s.eps() : 1e-5f;
  if (!(eps > 0 && eps <= 1)) {
    return Invalid(absl::StrCat(Field(index, "layer_norm.eps"), "=", eps,
                                " must be positive (at most 1)"));
  }
  SymbolicShape out = in;
  if (!out.rank_known) out.last = s.normalized_shape();
  return out;
}

absl::StatusOr<SymbolicShape> RmsNorm(const v1::RmsNormSpec& s, int index,
                                      const SymbolicShape& in) {
  const int64_t last = in.LastDim();
  if ((in.rank_known && in.dims.empty()) ||
      (last != kUnknownDim && last != s.dim()) || s.dim() <= 0 ||
      s.dim() > kMaxFeatures) {
    return Invalid(absl::StrCat(
        Field(index, "rms_norm.dim"), "=", s.dim(),
        " does not match the last dimension of the previous layer's output ",
        in.ToString()));
  }
  const float eps = s.has_eps() ? s.eps() : 1e-6f;
  if (!(eps > 0 && eps <= 1)) {
    return Invalid(absl::StrCat(Field(index, "rms_norm.eps"), "=", eps,
                                " must be positive (at most 1)"));
  }
  SymbolicShape out = in;
  if (!out.rank_known) out.last = s.dim();
  return out;
}

SymbolicShape Flatten(const SymbolicShape& in) {
  if (!in.rank_known) return SymbolicShape::Known({kUnknownDim});
  for (int64_t d : in.dims) {
    if (d == kUnknownDim) return SymbolicShape::Known({kUnknownDim});
  }
  // Saturates; InferLayerShape refuses an output past kMaxTensorFloats.
  return SymbolicShape::Known({SaturatingProduct(in.dims)});
}

absl::Status CheckDelay(const DelaySpec& s, int index) {
  if (!(s.forward_ms() >= 0 && s.forward_ms() <= 60000 &&
        s.backward_ms() >= 0 && s.backward_ms() <= 60000)) {
    return Invalid(absl::StrCat(
        Field(index, "delay"), ": forward_ms=", s.forward_ms(),
        " and backward_ms=", s.backward_ms(), " must be in [0, 60000]"));
  }
  if (!(s.weight_ms() >= 0 && s.weight_ms() <= s.backward_ms())) {
    return Invalid(
        absl::StrCat(Field(index, "delay"), ".weight_ms=", s.weight_ms(),
                     " must be in [0, backward_ms=", s.backward_ms(), "]"));
  }
  return absl::OkStatus();
}

// Sizes from a spec are bounded before anything is allocated: no tensor of
// a transformer layer (a parameter, or an activation of one sample) holds
// more than 2^32 floats, and the products below cannot overflow.
constexpr int64_t kMaxFloats = kMaxTensorFloats;

// Whether a * b <= kMaxFloats, for positive a and b (no overflow).
bool Fits(int64_t a, int64_t b) { return a <= kMaxFloats / b; }

absl::Status TooLarge(int index, absl::string_view kind,
                      absl::string_view what) {
  return Invalid(
      absl::StrCat(Field(index, kind), ": ", what, " exceeds 2^32 floats"));
}

absl::StatusOr<SymbolicShape> TokenEmbedding(const v1::TokenEmbeddingSpec& s,
                                             int index,
                                             const SymbolicShape& in) {
  // Ids travel as floats, which hold every integer below 2^24 exactly.
  constexpr int64_t kMaxVocab = int64_t{1} << 24;
  if (s.vocab_size() <= 0 || s.vocab_size() > kMaxVocab) {
    return Invalid(absl::StrCat(Field(index, "token_embedding.vocab_size"), "=",
                                s.vocab_size(), " must be in [1, ", kMaxVocab,
                                "] (token ids travel as floats)"));
  }
  RETURN_IF_ERROR(
      CheckSize(s.dim(), kMaxFeatures, index, "token_embedding.dim"));
  if (!Fits(s.vocab_size(), s.dim())) {
    return TooLarge(index, "token_embedding",
                    absl::StrCat("the weight [vocab_size, dim] = [",
                                 s.vocab_size(), ", ", s.dim(), "]"));
  }
  if (in.rank_known && in.dims.size() != 1) {
    return Invalid(absl::StrCat(
        Field(index, "token_embedding"),
        " expects token ids [T] per sample; the previous layer's output is ",
        in.ToString()));
  }
  const int64_t len = in.rank_known ? in.dims[0] : kUnknownDim;
  if (len != kUnknownDim && !Fits(len, s.dim())) {
    return TooLarge(index, "token_embedding",
                    absl::StrCat("the output [", len, ", ", s.dim(), "]"));
  }
  return SymbolicShape::Known({len, s.dim()});
}

// The positions T of an input that must be [T, dim] per sample (kUnknownDim
// when unknown), or the error naming layer `kind`.
absl::StatusOr<int64_t> Positions(const SymbolicShape& in, int index,
                                  absl::string_view kind, int64_t dim) {
  if (in.rank_known && in.dims.size() != 2) {
    return Invalid(absl::StrCat(
        Field(index, kind),
        " expects [T, dim] per sample; the previous layer's output is ",
        in.ToString()));
  }
  const int64_t last = in.LastDim();
  if (last != kUnknownDim && last != dim) {
    return Invalid(absl::StrCat(
        Field(index, kind), ".dim=", dim,
        " does not match the last dimension of the previous layer's output ",
        in.ToString()));
  }
  return in.rank_known ? in.dims[0] : kUnknownDim;
}

absl::StatusOr<SymbolicShape> PositionEmbedding(
    const v1::PositionEmbeddingSpec& s, int index, const SymbolicShape& in) {
  RETURN_IF_ERROR(
      CheckSize(s.context(), kMaxContext, index, "position_embedding.context"));
  RETURN_IF_ERROR(
      CheckSize(s.dim(), kMaxFeatures, index, "position_embedding.dim"));
  if (!Fits(s.context(), s.dim())) {
    return TooLarge(index, "position_embedding",
                    absl::StrCat("the weight [context, dim] = [", s.context(),
                                 ", ", s.dim(), "]"));
  }
  ASSIGN_OR_RETURN(const int64_t len,
                   Positions(in, index, "position_embedding", s.dim()));
  if (len != kUnknownDim && len > s.context()) {
    return Invalid(absl::StrCat(Field(index, "position_embedding.context"), "=",
                                s.context(), " is shorter than the input's ",
                                len, " positions"));
  }
  return SymbolicShape::Known({len, s.dim()});
}

// The checks attention and the block share; `kind` names the layer's field.
// `width` is the widest activation per position (3 * dim for q, k, v, or
// the MLP's hidden width when wider).
absl::StatusOr<SymbolicShape> Attention(absl::string_view kind, int64_t dim,
                                        int64_t heads, float dropout,
                                        int64_t width, int index,
                                        const SymbolicShape& in) {
  const std::string field(kind);
  RETURN_IF_ERROR(CheckSize(dim, kMaxFeatures, index, field + ".dim"));
  RETURN_IF_ERROR(CheckSize(heads, kMaxHeads, index, field + ".heads"));
  if (dim % heads != 0) {
    return Invalid(absl::StrCat(Field(index, kind), ".heads=", heads,
                                " does not divide dim=", dim));
  }
  if (!(dropout >= 0 && dropout < 1)) {
    return Invalid(absl::StrCat(Field(index, kind), ".dropout=", dropout,
                                " must be in [0, 1)"));
  }
  if (dim > kMaxFloats / 3 || !Fits(3 * dim, dim)) {
    return TooLarge(index, kind,
                    absl::StrCat("the attention weight [3 * dim, dim] with "
                                 "dim=",
                                 dim));
  }
  ASSIGN_OR_RETURN(const int64_t len, Positions(in, index, kind, dim));
  if (len != kUnknownDim &&
      (!Fits(len, std::max(3 * dim, width)) || !Fits(heads * len, len))) {
    return TooLarge(index, kind,
                    absl::StrCat("a sample's activations over ", len,
                                 " positions with ", heads,
                                 " heads (the attention weights are [heads, T, "
                                 "T])"));
  }
  return SymbolicShape::Known({len, dim});
}

absl::StatusOr<SymbolicShape> TransformerBlock(
    const v1::TransformerBlockSpec& s, int index, const SymbolicShape& in) {
  int64_t hidden = 0;
  if (s.has_mlp_hidden()) {
    RETURN_IF_ERROR(CheckSize(s.mlp_hidden(), kMaxFeatures, index,
                              "transformer_block.mlp_hidden"));
    hidden = s.mlp_hidden();
  } else if (s.dim() > 0) {
    hidden = s.dim() <= kMaxFloats ? 4 * s.dim() : kMaxFloats + 1;
  }
  if (s.dim() > 0 && hidden > 0 && !Fits(hidden, s.dim())) {
    return TooLarge(index, "transformer_block",
                    absl::StrCat("the MLP weight [mlp_hidden, dim] = [", hidden,
                                 ", ", s.dim(), "]"));
  }
  const float eps = s.has_eps() ? s.eps() : 1e-5f;
  if (!(eps > 0 && eps <= 1)) {
    return Invalid(absl::StrCat(Field(index, "transformer_block.eps"), "=", eps,
                                " must be positive (at most 1)"));
  }
  if (!s.activation().empty() && s.activation() != "gelu" &&
      s.activation() != "gelu_tanh") {
    return Invalid(absl::StrCat(Field(index, "transformer_block.activation"),
                                "=\"", absl::CHexEscape(s.activation()),
                                "\" is not an activation (\"gelu\", the "
                                "default, or \"gelu_tanh\")"));
  }
  return Attention("transformer_block", s.dim(), s.heads(), s.dropout(), hidden,
                   index, in);
}

// The LLaMA block: attention's checks plus the key/value heads, the even
// head width rotary embeddings need, the MLP's width, rope_theta and eps.
absl::StatusOr<SymbolicShape> LlamaBlock(const v1::LlamaBlockSpec& s, int index,
                                         const SymbolicShape& in) {
  const std::string kind = "llama_block";
  RETURN_IF_ERROR(CheckSize(s.hidden(), kMaxFeatures, index, kind + ".hidden"));
  if (s.dim() > 0 && !Fits(s.hidden(), s.dim())) {
    return TooLarge(index, kind,
                    absl::StrCat("the MLP weight [hidden, dim] = [", s.hidden(),
                                 ", ", s.dim(), "]"));
  }
  ASSIGN_OR_RETURN(SymbolicShape out, Attention(kind, s.dim(), s.heads(), 0,
                                                s.hidden(), index, in));
  const int64_t kv = s.has_kv_heads() ? s.kv_heads() : s.heads();
  if (kv <= 0 || s.heads() % kv != 0) {
    return Invalid(
        absl::StrCat(Field(index, kind), ".kv_heads=", kv,
                     " must be positive and divide heads=", s.heads()));
  }
  if ((s.dim() / s.heads()) % 2 != 0) {
    return Invalid(
        absl::StrCat(Field(index, kind),
                     ": the head width dim / heads = ", s.dim() / s.heads(),
                     " must be even (rotary embeddings pair its halves)"));
  }
  const float theta = s.has_rope_theta() ? s.rope_theta() : 10000.0f;
  if (!(theta > 1 && theta <= 1e9)) {
    return Invalid(absl::StrCat(Field(index, kind), ".rope_theta=", theta,
                                " must be in (1, 1e9]"));
  }
  const float eps = s.has_eps() ? s.eps() : 1e-6f;
  if (!(eps > 0 && eps <= 1)) {
    return Invalid(absl::StrCat(Field(index, kind), ".eps=", eps,
                                " must be positive (at most 1)"));
  }
  return out;
}

absl::Status CheckNotEmpty(const SymbolicShape& in, int index) {
  for (int64_t d : in.dims) {
    if (d != kUnknownDim && d <= 0) {
      return Invalid(absl::StrCat(Field(index, "kind"),
                                  ": the previous layer's output ",
                                  in.ToString(), " is empty"));
    }
  }
  return absl::OkStatus();
}

// The output of a layer of any kind, before its size is checked.
absl::StatusOr<SymbolicShape> LayerOutput(const LayerSpec& spec, int index,
                                          const SymbolicShape& in) {
  switch (spec.kind_case()) {
    case LayerSpec::kLinear:
      return Linear(spec.linear(), index, in);
    case LayerSpec::kRelu:
    case LayerSpec::kGelu:
      return in;
    case LayerSpec::kDropout: {
      const float p = spec.dropout().p();
      if (!(p >= 0 && p < 1)) {
        return Invalid(absl::StrCat(Field(index, "dropout.p"), "=", p,
                                    " must be in [0, 1)"));
      }
      return in;
    }
    case LayerSpec::kFlatten:
      return Flatten(in);
    case LayerSpec::kConv2D:
      return Conv2d(spec.conv2d(), index, in);
    case LayerSpec::kMaxPool2D:
      return MaxPool2d(spec.max_pool2d(), index, in);
    case LayerSpec::kLayerNorm:
      return LayerNorm(spec.layer_norm(), index, in);
    case LayerSpec::kDelay:
      RETURN_IF_ERROR(CheckDelay(spec.delay(), index));
      return in;
    case LayerSpec::kTokenEmbedding:
      return TokenEmbedding(spec.token_embedding(), index, in);
    case LayerSpec::kPositionEmbedding:
      return PositionEmbedding(spec.position_embedding(), index, in);
    case LayerSpec::kCausalSelfAttention: {
      const v1::CausalSelfAttentionSpec& s = spec.causal_self_attention();
      return Attention("causal_self_attention", s.dim(), s.heads(), s.dropout(),
                       0, index, in);
    }
    case LayerSpec::kTransformerBlock:
      return TransformerBlock(spec.transformer_block(), index, in);
    case LayerSpec::kRmsNorm:
      return RmsNorm(spec.rms_norm(), index, in);
    case LayerSpec::kLlamaBlock:
      return LlamaBlock(spec.llama_block(), index, in);
    case LayerSpec::KIND_NOT_SET:
      break;
  }
  return Invalid(absl::StrCat(
      "model.layers[", index,
      "] has no layer kind (set one of linear, relu, gelu, dropout, flatten, "
      "conv2d, max_pool2d, layer_norm, rms_norm, delay, token_embedding, "
      "position_embedding, causal_self_attention, transformer_block, "
      "llama_block)"));
}

}  // namespace

absl::StatusOr<SymbolicShape> InferLayerShape(const LayerSpec& spec, int index,
                                              const SymbolicShape& in) {
  RETURN_IF_ERROR(CheckNotEmpty(in, index));
  ASSIGN_OR_RETURN(SymbolicShape out, LayerOutput(spec, index, in));
  // One sample's output is a tensor like any other (and a flatten of a
  // huge input saturates rather than wrapping round).
  const int64_t floats = out.FullyKnown() ? SaturatingProduct(out.dims) : 0;
  if (floats > kMaxTensorFloats) {
    return Invalid(absl::StrCat(
        "model.layers[", index, "]: one sample's output ", out.ToString(),
        " has ", floats == kSaturated ? "more than 2^63" : absl::StrCat(floats),
        " floats, more than one tensor may hold (", kMaxTensorFloats,
        " floats)"));
  }
  return out;
}

namespace {

// The shape of a layer's "weight" when it may be tied (linear,
// token_embedding; the same [rows, dim] layout), else nullopt.
std::optional<std::vector<int64_t>> TieableWeight(const LayerSpec& spec) {
  switch (spec.kind_case()) {
    case LayerSpec::kLinear:
      return std::vector<int64_t>{spec.linear().out_features(),
                                  spec.linear().in_features()};
    case LayerSpec::kTokenEmbedding:
      return std::vector<int64_t>{spec.token_embedding().vocab_size(),
                                  spec.token_embedding().dim()};
    default:
      return std::nullopt;
  }
}

// "linear", "transformer_block", ...: the kind's field name.
std::string KindName(const LayerSpec& spec) {
  const auto* field =
      LayerSpec::descriptor()->FindFieldByNumber(spec.kind_case());
  return field != nullptr ? field->name() : "no kind";
}

// Checks layer l's tie_weight_to against the layers before it.
absl::Status CheckTie(const ModelSpec& model, int l,
                      const std::vector<std::optional<int>>& tied) {
  const LayerSpec& spec = model.layers(l);
  const int owner = spec.tie_weight_to();
  const std::string field =
      absl::StrCat("model.layers[", l, "].tie_weight_to=", owner);
  if (owner < 0 || owner >= l) {
    return Invalid(absl::StrCat(
        field, " must name an earlier layer ",
        l == 0 ? "(layer 0 has none)" : absl::StrCat("(0 to ", l - 1, ")")));
  }
  for (int which : {l, owner}) {
    if (TieableWeight(model.layers(which)).has_value()) continue;
    return Invalid(absl::StrCat(field, ": layer ", which, " (",
                                KindName(model.layers(which)),
                                ") has no weight to tie (only linear and "
                                "token_embedding layers tie)"));
  }
  const std::vector<int64_t> mine = *TieableWeight(spec);
  const std::vector<int64_t> theirs = *TieableWeight(model.layers(owner));
  if (mine != theirs) {
    return Invalid(absl::StrCat(field, ": layer ", l, "'s weight is ",
                                SymbolicShape::Known(mine).ToString(),
                                " but layer ", owner, "'s is ",
                                SymbolicShape::Known(theirs).ToString()));
  }
  if (tied[owner].has_value()) {
    return Invalid(absl::StrCat(field, ": layer ", owner,
                                " is itself tied to layer ", *tied[owner],
                                " (tie to layer ", *tied[owner], ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::optional<int>>> TiedWeights(
    const ModelSpec& model) {
  std::vector<std::optional<int>> tied(model.layers_size());
  for (int l = 0; l < model.layers_size(); ++l) {
    if (!model.layers(l).has_tie_weight_to()) continue;
    RETURN_IF_ERROR(CheckTie(model, l, tied));
    tied[l] = model.layers(l).tie_weight_to();
  }
  return tied;
}

absl::StatusOr<std::vector<SymbolicShape>> InferModelShapes(
    const ModelSpec& model, const SymbolicShape& input) {
  if (model.layers().empty()) return Invalid("model.layers is empty");
  if (model.layers_size() > kMaxLayers) {
    return Invalid(absl::StrCat("model.layers has ", model.layers_size(),
                                " layers, more than ", kMaxLayers));
  }
  std::vector<SymbolicShape> out;
  SymbolicShape shape = input;
  for (int i = 0; i < model.layers_size(); ++i) {
    ASSIGN_OR_RETURN(shape, InferLayerShape(model.layers(i), i, shape));
    out.push_back(shape);
  }
  RETURN_IF_ERROR(TiedWeights(model).status());
  return out;
}

}  // namespace aqueduct
