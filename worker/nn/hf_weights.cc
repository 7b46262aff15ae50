#include "worker/nn/hf_weights.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/device/bf16.h"
#include "common/status.h"
#include "worker/nn/model.h"
#include "worker/nn/weights.h"

namespace aqueduct {

namespace {

using Kind = LayerSpec::KindCase;

// The layers a Hugging Face model maps to: `first`, then `block` once or
// more, then `last`.
struct Layout {
  HfArch arch;
  const char* title;  // in messages
  std::vector<Kind> first;
  Kind block;
  std::vector<Kind> last;
  // The Hugging Face prefix of each layer's parameters, by its place.
  std::vector<std::string> first_prefixes;
  std::string block_prefix;  // followed by the block's number and "."
  std::vector<std::string> last_prefixes;
};

const Layout& LayoutOf(HfArch arch) {
  static const Layout* const gpt2 =
      new Layout{HfArch::kGpt2,
                 "GPT-2",
                 {LayerSpec::kTokenEmbedding, LayerSpec::kPositionEmbedding},
                 LayerSpec::kTransformerBlock,
                 {LayerSpec::kLayerNorm, LayerSpec::kLinear},
                 {"transformer.wte.", "transformer.wpe."},
                 "transformer.h.",
                 {"transformer.ln_f.", "lm_head."}};
  static const Layout* const llama =
      new Layout{HfArch::kLlama,
                 "LLaMA",
                 {LayerSpec::kTokenEmbedding},
                 LayerSpec::kLlamaBlock,
                 {LayerSpec::kRmsNorm, LayerSpec::kLinear},
                 {"model.embed_tokens."},
                 "model.layers.",
                 {"model.norm.", "lm_head."}};
  return arch == HfArch::kGpt2 ? *gpt2 : *llama;
}

std::string KindName(Kind kind) {
  const auto* field = LayerSpec::descriptor()->FindFieldByNumber(kind);
  return field != nullptr ? std::string(field->name()) : "layer without a kind";
}

// "token_embedding, position_embedding, transformer_block x N, ...".
std::string Describe(const Layout& l) {
  std::vector<std::string> kinds;
  for (Kind k : l.first) kinds.push_back(KindName(k));
  kinds.push_back(KindName(l.block) + " x N");
  for (Kind k : l.last) kinds.push_back(KindName(k));
  return absl::StrCat("a ", l.title, " (", absl::StrJoin(kinds, ", "), ")");
}

int BlockCount(const Layout& l, const ModelSpec& m) {
  return m.layers_size() - static_cast<int>(l.first.size() + l.last.size());
}

// The kind layer `i` must have.
Kind KindAt(const Layout& l, int i, int n) {
  const int first = static_cast<int>(l.first.size());
  const int last_begin = n - static_cast<int>(l.last.size());
  if (i < first) return l.first[i];
  if (i < last_begin) return l.block;
  return l.last[i - last_begin];
}

absl::Status CheckLayout(const Layout& l, const ModelSpec& m) {
  const int n = m.layers_size();
  if (BlockCount(l, m) < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the spec's model has ", n, " layers; ", Describe(l),
                     " has at least ", l.first.size() + l.last.size() + 1));
  }
  for (int i = 0; i < n; ++i) {
    const LayerSpec& layer = m.layers(i);
    const Kind want = KindAt(l, i, n);
    if (layer.kind_case() != want) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.layers[", i, "] is a ", KindName(layer.kind_case()), " where ",
          Describe(l), " has a ", KindName(want)));
    }
    const bool head = i == n - 1;
    if (layer.has_tie_weight_to() && (!head || layer.tie_weight_to() != 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.layers[", i, "].tie_weight_to=", layer.tie_weight_to(),
          ": in ", Describe(l),
          " only the head (the last layer) may be tied, "
          "to the token embedding (layer 0)"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckGpt2Blocks(const ModelSpec& m) {
  for (int i = 2; i < m.layers_size() - 2; ++i) {
    const v1::TransformerBlockSpec& b = m.layers(i).transformer_block();
    if (b.has_bias() && !b.bias()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.layers[", i,
          "].transformer_block.bias=false: GPT-2's linear layers have biases"));
    }
    if (b.activation() != "gelu_tanh") {
      return absl::InvalidArgumentError(absl::StrCat(
          "model.layers[", i, "].transformer_block.activation=\"",
          b.activation().empty() ? "gelu" : b.activation(),
          "\": GPT-2's MLP uses GELU's tanh approximation; set activation: "
          "\"gelu_tanh\""));
    }
  }
  return absl::OkStatus();
}

// The head maps the width back to the vocabulary, without a bias.
absl::Status CheckHead(const ModelSpec& m) {
  const int i = m.layers_size() - 1;
  const v1::LinearSpec& head = m.layers(i).linear();
  const v1::TokenEmbeddingSpec& emb = m.layers(0).token_embedding();
  if (!head.has_bias() || head.bias()) {
    return absl::InvalidArgumentError(
        absl::StrCat("model.layers[", i,
                     "].linear.bias must be false: lm_head has no bias"));
  }
  if (head.out_features() != emb.vocab_size() ||
      head.in_features() != emb.dim()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.layers[", i, "].linear is [", head.out_features(), ", ",
        head.in_features(), "] where lm_head is [vocab_size, dim] = [",
        emb.vocab_size(), ", ", emb.dim(), "] (model.layers[0])"));
  }
  return absl::OkStatus();
}

// The Hugging Face prefix of layer `i`'s parameters.
std::string PrefixOf(const Layout& l, int i, int n) {
  const int first = static_cast<int>(l.first.size());
  const int last_begin = n - static_cast<int>(l.last.size());
  if (i < first) return l.first_prefixes[i];
  if (i < last_begin) return absl::StrCat(l.block_prefix, i - first, ".");
  return l.last_prefixes[i - last_begin];
}

// Conv1D weights: a GPT-2 block's matrices.
bool Transposed(const Layout& l, int i, int n, const ParamSpec& p) {
  return l.arch == HfArch::kGpt2 && KindAt(l, i, n) == l.block &&
         p.shape.rank() == 2;
}

// Rows x cols of 4-byte values, transposed.
std::vector<float> Transpose(const std::vector<float>& v, int64_t rows,
                             int64_t cols) {
  std::vector<float> out(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = v[r * cols + c];
  }
  return out;
}

Shape Reversed(const Shape& s) {
  return s.rank() == 2 ? Shape({s[1], s[0]}) : s;
}

// x rounded to the nearest half (ties to even), overflowing to infinity.
uint16_t ToF16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520: infinity
  if (a < 0x38800000u) {                        // below 2^-14: subnormal
    float v;
    std::memcpy(&v, &a, sizeof(v));
    // v * 2^24 is exact; nearbyint rounds ties to even.
    return sign | static_cast<uint16_t>(std::nearbyint(v * 16777216.0f));
  }
  const uint32_t r = a + 0xfffu + ((a >> 13) & 1u) - (112u << 23);
  return sign | static_cast<uint16_t>(r >> 13);
}

HostTensor Encode(const std::vector<float>& v, const Shape& shape,
                  DType dtype) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.data.resize(v.size() * DTypeSize(dtype));
  if (dtype == DType::kF32) {
    std::memcpy(t.data.data(), v.data(), t.data.size());
    return t;
  }
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = dtype == DType::kBF16 ? ToBf16(v[i]) : ToF16(v[i]);
    std::memcpy(t.data.data() + 2 * i, &h, 2);
  }
  return t;
}

// `src` (named `name`) checked against `want` and converted to F32,
// transposed from [a, b] to [b, a] when `transpose`.
absl::StatusOr<HostTensor> Convert(const HostTensor& src,
                                   const std::string& name, const Shape& want,
                                   bool transpose, DType dtype,
                                   const std::string& needed_by) {
  if (src.shape != want) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", name, "' has shape ", src.shape.ToString(),
                     " but ", needed_by, " needs ", want.ToString()));
  }
  ASSIGN_OR_RETURN(std::vector<float> v, HostTensorValues(src, name));
  if (transpose) v = Transpose(v, want[0], want[1]);
  return Encode(v, transpose ? Reversed(want) : want, dtype);
}

// A tensor of a Hugging Face file and its name there.
struct FileTensor {
  std::string name;
  const HostTensor* tensor;
};

// The file's tensors by their LlamaForCausalLM / GPT2LMHeadModel names:
// names without the base model's prefix (saved from GPT2Model or
// LlamaModel) get it, buffers that are not parameters are left out.
absl::StatusOr<std::map<std::string, FileTensor>> HfTensors(
    const Layout& l, const SafetensorsFile& file) {
  const std::string base = l.arch == HfArch::kGpt2 ? "transformer." : "model.";
  std::map<std::string, FileTensor> out;
  for (const auto& [name, t] : file.tensors) {
    if (l.arch == HfArch::kGpt2 &&
        (absl::EndsWith(name, ".attn.bias") ||
         absl::EndsWith(name, ".attn.masked_bias"))) {
      continue;  // the causal mask, a buffer
    }
    if (l.arch == HfArch::kLlama &&
        absl::EndsWith(name, ".self_attn.rotary_emb.inv_freq")) {
      continue;
    }
    const bool full =
        absl::StartsWith(name, base) || absl::StartsWith(name, "lm_head.");
    const std::string key = full ? name : base + name;
    if (!out.emplace(key, FileTensor{name, &t}).second) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", key, "' appears twice (with and without '", base, "')"));
    }
  }
  return out;
}

absl::Status CheckModel(const Layout& l, const ModelSpec& m) {
  RETURN_IF_ERROR(CheckLayout(l, m));
  if (l.arch == HfArch::kGpt2) RETURN_IF_ERROR(CheckGpt2Blocks(m));
  return CheckHead(m);
}

absl::Status UnknownTensor(const Layout& l, const ModelSpec& m,
                           const std::string& name) {
  // "layers.<i>.<param>"; for LLaMA, not a LlamaModel's "layers.<n>.mlp...".
  const bool aqueduct = absl::StartsWith(name, "layers.") &&
                        (l.arch == HfArch::kGpt2 ||
                         std::count(name.begin(), name.end(), '.') == 2);
  return absl::InvalidArgumentError(absl::StrCat(
      "tensor '", name, "' is not a parameter of the spec's ", l.title, " (",
      KindName(l.block), " x ", BlockCount(l, m), ")",
      aqueduct ? "; the name is Aqueduct's: is the file an Aqueduct weights "
                 "file already? (import reads Hugging Face's names)"
               : ""));
}

bool HeadTied(const ModelSpec& m) {
  return m.layers(m.layers_size() - 1).has_tie_weight_to();
}

}  // namespace

absl::StatusOr<HfArch> HfArchFromName(absl::string_view name) {
  if (name == "gpt2") return HfArch::kGpt2;
  if (name == "llama") return HfArch::kLlama;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown architecture '", name, "' (known: gpt2, llama)"));
}

absl::string_view HfArchName(HfArch arch) {
  return arch == HfArch::kGpt2 ? "gpt2" : "llama";
}

absl::StatusOr<std::vector<HfTensorName>> HfTensorNames(
    HfArch arch, const ModelSpec& model) {
  const Layout& l = LayoutOf(arch);
  RETURN_IF_ERROR(CheckModel(l, model));
  // One token per sample: the parameters do not depend on the context.
  ASSIGN_OR_RETURN(std::unique_ptr<Model> built,
                   Model::Build(model, Shape({1}), 0));
  std::vector<HfTensorName> names;
  const int n = built->num_layers();
  for (int i = 0; i < n; ++i) {
    for (const ParamSpec& p : built->layer(i).Params()) {
      names.push_back({PrefixOf(l, i, n) + p.name,
                       absl::StrCat("layers.", i, ".", p.name), p.shape,
                       Transposed(l, i, n, p)});
    }
  }
  return names;
}

absl::StatusOr<SafetensorsFile> ImportHfWeights(HfArch arch,
                                                const ModelSpec& model,
                                                const SafetensorsFile& hf) {
  const Layout& l = LayoutOf(arch);
  ASSIGN_OR_RETURN(const std::vector<HfTensorName> names,
                   HfTensorNames(arch, model));
  ASSIGN_OR_RETURN(const auto tensors, HfTensors(l, hf));
  std::set<std::string> known;
  for (const HfTensorName& e : names) known.insert(e.hf);
  for (const auto& [name, t] : tensors) {
    if (known.count(name) == 0) return UnknownTensor(l, model, t.name);
  }
  const std::string& embedding = names.front().hf;
  SafetensorsFile out;
  for (const HfTensorName& e : names) {
    std::string source = e.hf;
    if (&e == &names.back() && (HeadTied(model) || !tensors.count(e.hf))) {
      source = embedding;  // the tied head, or a file that leaves it out
    }
    auto it = tensors.find(source);
    if (it == tensors.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", source, "' (", e.aq, ", ",
                       (e.transposed ? Reversed(e.shape) : e.shape).ToString(),
                       ") is missing"));
    }
    ASSIGN_OR_RETURN(
        out.tensors[e.aq],
        Convert(*it->second.tensor, it->second.name,
                e.transposed ? Reversed(e.shape) : e.shape, e.transposed,
                DType::kF32, absl::StrCat("the spec (", e.aq, ")")));
  }
  out.metadata = {{"format", "pt"}, {"producer", "aqueduct"}};
  return out;
}

absl::StatusOr<SafetensorsFile> ExportHfWeights(HfArch arch,
                                                const ModelSpec& model,
                                                const SafetensorsFile& aq,
                                                DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16 && dtype != DType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot export as ", DTypeName(dtype), " (F32, BF16 or F16)"));
  }
  ASSIGN_OR_RETURN(const std::vector<HfTensorName> names,
                   HfTensorNames(arch, model));
  std::set<std::string> known;
  for (const HfTensorName& e : names) known.insert(e.aq);
  for (const auto& [name, t] : aq.tensors) {
    if (known.count(name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", name,
          "' is not a parameter of the spec's model (a "
          "checkpoint's optimizer state, or another model's weights?)"));
    }
  }
  SafetensorsFile out;
  for (const HfTensorName& e : names) {
    auto it = aq.tensors.find(e.aq);
    if (it == aq.tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", e.aq, "' (", e.shape.ToString(), ") is missing"));
    }
    ASSIGN_OR_RETURN(
        out.tensors[e.hf],
        Convert(it->second, e.aq, e.shape, e.transposed, dtype, "the spec"));
  }
  out.metadata = {{"format", "pt"}};
  return out;
}

}  // namespace aqueduct
