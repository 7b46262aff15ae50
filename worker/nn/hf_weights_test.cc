// Hugging Face GPT-2 and LLaMA checkpoints to and from Aqueduct's weights
// files (hf_weights.h): round trips bit for bit, GPT-2's Conv1D transposes
// on a hand example, the head's sources, dtypes, and the errors.
#include "worker/nn/hf_weights.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "worker/nn/weights.h"

namespace aqueduct {
namespace {

constexpr char kGpt2[] = R"(
  layers { token_embedding { vocab_size: 11 dim: 8 } }
  layers { position_embedding { context: 5 dim: 8 } }
  layers { transformer_block { dim: 8 heads: 2 activation: "gelu_tanh" } }
  layers { transformer_block { dim: 8 heads: 2 mlp_hidden: 12
                               activation: "gelu_tanh" } }
  layers { layer_norm { normalized_shape: 8 } }
  layers { linear { in_features: 8 out_features: 11 bias: false }
           tie_weight_to: 0 }
)";

constexpr char kLlama[] = R"(
  layers { token_embedding { vocab_size: 13 dim: 8 } }
  layers { llama_block { dim: 8 heads: 4 kv_heads: 2 hidden: 12 } }
  layers { llama_block { dim: 8 heads: 2 hidden: 10 } }
  layers { rms_norm { dim: 8 } }
  layers { linear { in_features: 8 out_features: 13 bias: false } }
)";

ModelSpec Parse(const std::string& text) {
  ModelSpec m;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &m)) << text;
  return m;
}

HostTensor F32(const Shape& shape, const std::vector<float>& v) {
  HostTensor t;
  t.shape = shape;
  t.data.resize(v.size() * 4);
  std::memcpy(t.data.data(), v.data(), t.data.size());
  return t;
}

std::vector<float> Values(const HostTensor& t) {
  EXPECT_EQ(t.dtype, DType::kF32);
  std::vector<float> v(t.shape.numel());
  std::memcpy(v.data(), t.data.data(), v.size() * 4);
  return v;
}

// An Aqueduct weights file of `spec` with random values (a tied head a
// copy of layer 0's weight, as Aqueduct writes it).
SafetensorsFile RandomAqFile(HfArch arch, const ModelSpec& spec,
                             uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  SafetensorsFile file;
  absl::StatusOr<std::vector<HfTensorName>> names = HfTensorNames(arch, spec);
  EXPECT_TRUE(names.ok()) << names.status();
  for (const HfTensorName& e : *names) {
    std::vector<float> v(e.shape.numel());
    for (float& x : v) x = dist(rng);
    file.tensors[e.aq] = F32(e.shape, v);
  }
  const int head = spec.layers_size() - 1;
  if (spec.layers(head).has_tie_weight_to()) {
    file.tensors[absl::StrCat("layers.", head, ".weight")] =
        file.tensors["layers.0.weight"];
  }
  file.metadata = {{"format", "pt"}, {"producer", "aqueduct"}};
  return file;
}

void ExpectSameTensors(const SafetensorsFile& a, const SafetensorsFile& b) {
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, t] : a.tensors) {
    auto it = b.tensors.find(name);
    ASSERT_NE(it, b.tensors.end()) << name;
    EXPECT_EQ(it->second.dtype, t.dtype) << name;
    EXPECT_EQ(it->second.shape, t.shape) << name;
    EXPECT_EQ(it->second.data, t.data) << name;  // bit for bit
  }
}

void ExpectError(const absl::Status& s, const std::vector<std::string>& parts) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  for (const std::string& p : parts) {
    EXPECT_NE(s.message().find(p), std::string::npos)
        << "'" << p << "' not in: " << s.message();
  }
}

TEST(HfWeightsTest, ArchNames) {
  EXPECT_EQ(*HfArchFromName("gpt2"), HfArch::kGpt2);
  EXPECT_EQ(*HfArchFromName("llama"), HfArch::kLlama);
  EXPECT_EQ(HfArchName(HfArch::kLlama), "llama");
  ExpectError(HfArchFromName("bert").status(), {"'bert'", "gpt2, llama"});
}

TEST(HfWeightsTest, Gpt2NamesAndLayouts) {
  const auto names = HfTensorNames(HfArch::kGpt2, Parse(kGpt2));
  ASSERT_TRUE(names.ok()) << names.status();
  std::map<std::string, HfTensorName> by_hf;
  for (const HfTensorName& e : *names) by_hf[e.hf] = e;
  EXPECT_EQ(by_hf.size(), 2 + 2 * 12 + 2 + 1u);
  const HfTensorName& fc = by_hf["transformer.h.1.mlp.c_fc.weight"];
  EXPECT_EQ(fc.aq, "layers.3.mlp.c_fc.weight");
  EXPECT_EQ(fc.shape, Shape({12, 8}));
  EXPECT_TRUE(fc.transposed);
  EXPECT_FALSE(by_hf["transformer.h.0.mlp.c_fc.bias"].transposed);
  EXPECT_FALSE(by_hf["transformer.h.0.ln_2.weight"].transposed);
  EXPECT_EQ(by_hf["transformer.wpe.weight"].aq, "layers.1.weight");
  EXPECT_EQ(by_hf["transformer.ln_f.bias"].aq, "layers.4.bias");
  EXPECT_EQ(by_hf["lm_head.weight"].aq, "layers.5.weight");
  EXPECT_FALSE(by_hf["lm_head.weight"].transposed);
}

TEST(HfWeightsTest, LlamaNames) {
  const auto names = HfTensorNames(HfArch::kLlama, Parse(kLlama));
  ASSERT_TRUE(names.ok()) << names.status();
  std::map<std::string, HfTensorName> by_hf;
  for (const HfTensorName& e : *names) {
    by_hf[e.hf] = e;
    EXPECT_FALSE(e.transposed) << e.hf;
  }
  EXPECT_EQ(by_hf.size(), 1 + 2 * 9 + 1 + 1u);
  EXPECT_EQ(by_hf["model.embed_tokens.weight"].aq, "layers.0.weight");
  const HfTensorName& k = by_hf["model.layers.0.self_attn.k_proj.weight"];
  EXPECT_EQ(k.aq, "layers.1.self_attn.k_proj.weight");
  EXPECT_EQ(k.shape, Shape({4, 8}));  // 2 kv heads of 2
  EXPECT_EQ(by_hf["model.layers.1.mlp.down_proj.weight"].shape, Shape({8, 10}));
  EXPECT_EQ(by_hf["model.norm.weight"].aq, "layers.3.weight");
  EXPECT_EQ(by_hf["lm_head.weight"].aq, "layers.4.weight");
}

// import(export(x)) == x and export(import(y)) == y, bit for bit.
void RoundTrip(HfArch arch, const char* spec_text) {
  const ModelSpec spec = Parse(spec_text);
  const SafetensorsFile aq = RandomAqFile(arch, spec, 5);
  const auto hf = ExportHfWeights(arch, spec, aq);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->metadata.at("format"), "pt");
  EXPECT_EQ(hf->tensors.count("lm_head.weight"), 1u);
  const auto back = ImportHfWeights(arch, spec, *hf);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameTensors(aq, *back);
  EXPECT_EQ(back->metadata, aq.metadata);
  const auto again = ExportHfWeights(arch, spec, *back);
  ASSERT_TRUE(again.ok()) << again.status();
  ExpectSameTensors(*hf, *again);
}

TEST(HfWeightsTest, Gpt2RoundTripIsBitExact) {
  RoundTrip(HfArch::kGpt2, kGpt2);
}

TEST(HfWeightsTest, LlamaRoundTripIsBitExact) {
  RoundTrip(HfArch::kLlama, kLlama);
}

// Conv1D stores [in, out]: Hugging Face's element [c][r] is Aqueduct's
// (nn.Linear) [r][c].
TEST(HfWeightsTest, Gpt2Conv1dIsTheTranspose) {
  const ModelSpec spec = Parse(R"(
    layers { token_embedding { vocab_size: 3 dim: 2 } }
    layers { position_embedding { context: 2 dim: 2 } }
    layers { transformer_block { dim: 2 heads: 1 mlp_hidden: 3
                                 activation: "gelu_tanh" } }
    layers { layer_norm { normalized_shape: 2 } }
    layers { linear { in_features: 2 out_features: 3 bias: false } }
  )");
  SafetensorsFile aq = RandomAqFile(HfArch::kGpt2, spec, 1);
  // c_attn [3 * 2, 2]: element [r][c] = 2r + c.
  aq.tensors["layers.2.attn.c_attn.weight"] =
      F32(Shape({6, 2}), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  aq.tensors["layers.2.mlp.c_proj.weight"] =
      F32(Shape({2, 3}), {1, 2, 3, 4, 5, 6});
  aq.tensors["layers.2.ln_1.weight"] = F32(Shape({2}), {7, 8});
  const auto hf = ExportHfWeights(HfArch::kGpt2, spec, aq);
  ASSERT_TRUE(hf.ok()) << hf.status();
  const HostTensor& attn = hf->tensors.at("transformer.h.0.attn.c_attn.weight");
  EXPECT_EQ(attn.shape, Shape({2, 6}));
  EXPECT_EQ(Values(attn),
            (std::vector<float>{0, 2, 4, 6, 8, 10, 1, 3, 5, 7, 9, 11}));
  const HostTensor& proj = hf->tensors.at("transformer.h.0.mlp.c_proj.weight");
  EXPECT_EQ(proj.shape, Shape({3, 2}));
  EXPECT_EQ(Values(proj), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(Values(hf->tensors.at("transformer.h.0.ln_1.weight")),
            (std::vector<float>{7, 8}));
  EXPECT_EQ(hf->tensors.at("transformer.h.0.mlp.c_fc.weight").shape,
            Shape({2, 3}));
  EXPECT_EQ(hf->tensors.at("lm_head.weight").shape, Shape({3, 2}));
  // And back.
  const auto back = ImportHfWeights(HfArch::kGpt2, spec, *hf);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(Values(back->tensors.at("layers.2.attn.c_attn.weight")),
            Values(aq.tensors.at("layers.2.attn.c_attn.weight")));
}

// A file as the hub's gpt2 holds it: GPT2Model's names (no "transformer."),
// the mask buffers, no lm_head; the head takes wte's values.
TEST(HfWeightsTest, Gpt2ModelFileWithBuffersAndNoHead) {
  const ModelSpec spec = Parse(kGpt2);
  const SafetensorsFile aq = RandomAqFile(HfArch::kGpt2, spec, 2);
  const SafetensorsFile hf = *ExportHfWeights(HfArch::kGpt2, spec, aq);
  SafetensorsFile bare;
  for (const auto& [name, t] : hf.tensors) {
    if (name == "lm_head.weight") continue;
    bare.tensors[name.substr(std::string("transformer.").size())] = t;
  }
  bare.tensors["h.0.attn.bias"] = F32(Shape({1, 1, 2, 2}), {1, 0, 1, 1});
  bare.tensors["h.1.attn.masked_bias"] = F32(Shape({}), {-1e4f});
  const auto back = ImportHfWeights(HfArch::kGpt2, spec, bare);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSameTensors(aq, *back);
  // Both spellings of one name: refused.
  bare.tensors["transformer.wte.weight"] =
      hf.tensors.at("transformer.wte.weight");
  ExpectError(ImportHfWeights(HfArch::kGpt2, spec, bare).status(),
              {"'transformer.wte.weight' appears twice"});
}

// The head: tied, the embedding's values whatever lm_head holds; untied,
// lm_head's, or the embedding's when the file has none.
TEST(HfWeightsTest, HeadSources) {
  const ModelSpec spec = Parse(kLlama);
  SafetensorsFile hf = *ExportHfWeights(HfArch::kLlama, spec,
                                        RandomAqFile(HfArch::kLlama, spec, 3));
  const HostTensor embed = hf.tensors.at("model.embed_tokens.weight");
  const HostTensor head = hf.tensors.at("lm_head.weight");
  ASSERT_NE(embed.data, head.data);
  auto imported_head = [&](const ModelSpec& s) {
    const auto out = ImportHfWeights(HfArch::kLlama, s, hf);
    EXPECT_TRUE(out.ok()) << out.status();
    return out.ok() ? out->tensors.at("layers.4.weight").data
                    : std::vector<uint8_t>();
  };
  EXPECT_EQ(imported_head(spec), head.data);
  ModelSpec tied = spec;
  tied.mutable_layers(4)->set_tie_weight_to(0);
  EXPECT_EQ(imported_head(tied), embed.data);
  hf.tensors.erase("lm_head.weight");
  EXPECT_EQ(imported_head(spec), embed.data);
  // Older files' rotary buffers are skipped.
  hf.tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] =
      F32(Shape({1}), {1});
  EXPECT_EQ(imported_head(spec), embed.data);
}

TEST(HfWeightsTest, HalfInputsWidenToF32AndExportsNarrow) {
  const ModelSpec spec = Parse(kLlama);
  SafetensorsFile aq = RandomAqFile(HfArch::kLlama, spec, 4);
  aq.tensors["layers.3.weight"] =
      F32(Shape({8}), {1, -2, 0.5f, 65504, 1e6f, 5.9604645e-8f, 1e-9f, 0});
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    const auto hf = ExportHfWeights(HfArch::kLlama, spec, aq, dtype);
    ASSERT_TRUE(hf.ok()) << hf.status();
    const HostTensor& norm = hf->tensors.at("model.norm.weight");
    EXPECT_EQ(norm.dtype, dtype);
    EXPECT_EQ(norm.data.size(), 16u);
    const auto back = ImportHfWeights(HfArch::kLlama, spec, *hf);
    ASSERT_TRUE(back.ok()) << back.status();
    const std::vector<float> v = Values(back->tensors.at("layers.3.weight"));
    EXPECT_EQ(v[0], 1.0f);
    EXPECT_EQ(v[1], -2.0f);
    EXPECT_EQ(v[2], 0.5f);
    if (dtype == DType::kF16) {
      EXPECT_EQ(v[3], 65504.0f);       // the largest half
      EXPECT_TRUE(std::isinf(v[4]));   // beyond it
      EXPECT_EQ(v[5], 5.9604645e-8f);  // the smallest subnormal, 2^-24
      EXPECT_EQ(v[6], 0.0f);           // below half of it
    } else {
      EXPECT_EQ(v[3], 65536.0f);  // bf16 keeps 8 bits of mantissa
      EXPECT_NEAR(v[4], 1e6, 1e6 / 128);
    }
    const std::vector<float> w0 =
        Values(aq.tensors.at("layers.1.mlp.up_proj.weight"));
    const std::vector<float> w1 =
        Values(back->tensors.at("layers.1.mlp.up_proj.weight"));
    for (size_t i = 0; i < w0.size(); ++i) {
      EXPECT_NEAR(w1[i], w0[i], std::abs(w0[i]) / 128) << i;
    }
  }
  EXPECT_FALSE(ExportHfWeights(HfArch::kLlama, spec, aq, DType::kI32).ok());
}

TEST(HfWeightsTest, ImportErrorsNameTheTensor) {
  const ModelSpec spec = Parse(kGpt2);
  const SafetensorsFile hf = *ExportHfWeights(
      HfArch::kGpt2, spec, RandomAqFile(HfArch::kGpt2, spec, 6));
  SafetensorsFile missing = hf;
  missing.tensors.erase("transformer.h.1.mlp.c_fc.bias");
  ExpectError(
      ImportHfWeights(HfArch::kGpt2, spec, missing).status(),
      {"'transformer.h.1.mlp.c_fc.bias'", "layers.3.mlp.c_fc.bias", "missing"});
  SafetensorsFile wrong = hf;
  // As a nn.Linear would store it: [out, in] where Conv1D has [in, out].
  wrong.tensors["transformer.h.0.attn.c_attn.weight"] =
      F32(Shape({24, 8}), std::vector<float>(24 * 8));
  ExpectError(ImportHfWeights(HfArch::kGpt2, spec, wrong).status(),
              {"'transformer.h.0.attn.c_attn.weight'", "[24, 8]", "[8, 24]",
               "layers.2.attn.c_attn.weight"});
  SafetensorsFile extra = hf;
  extra.tensors["transformer.h.2.ln_1.weight"] =
      F32(Shape({8}), std::vector<float>(8));
  ExpectError(ImportHfWeights(HfArch::kGpt2, spec, extra).status(),
              {"'transformer.h.2.ln_1.weight'", "not a parameter",
               "(transformer_block x 2)"});
  // An Aqueduct file given to import.
  ExpectError(
      ImportHfWeights(HfArch::kGpt2, spec, RandomAqFile(HfArch::kGpt2, spec, 8))
          .status(),
      {"'layers.", "is the file an Aqueduct weights file already?"});
  SafetensorsFile ints = hf;
  ints.tensors["transformer.ln_f.bias"].dtype = DType::kI32;
  ExpectError(ImportHfWeights(HfArch::kGpt2, spec, ints).status(),
              {"'transformer.ln_f.bias'", "I32"});
}

TEST(HfWeightsTest, ExportErrorsNameTheTensor) {
  const ModelSpec spec = Parse(kLlama);
  const SafetensorsFile aq = RandomAqFile(HfArch::kLlama, spec, 7);
  SafetensorsFile state = aq;
  state.tensors["layers.3.weight.exp_avg"] = aq.tensors.at("layers.3.weight");
  ExpectError(ExportHfWeights(HfArch::kLlama, spec, state).status(),
              {"'layers.3.weight.exp_avg'", "not a parameter"});
  SafetensorsFile missing = aq;
  missing.tensors.erase("layers.2.self_attn.o_proj.weight");
  ExpectError(ExportHfWeights(HfArch::kLlama, spec, missing).status(),
              {"'layers.2.self_attn.o_proj.weight'", "[8, 8]", "missing"});
  SafetensorsFile wrong = aq;
  wrong.tensors["layers.3.weight"] = F32(Shape({9}), std::vector<float>(9));
  ExpectError(ExportHfWeights(HfArch::kLlama, spec, wrong).status(),
              {"'layers.3.weight'", "[9]", "[8]"});
}

// Specs that are not the architecture's model.
TEST(HfWeightsTest, SpecLayoutErrors) {
  auto gpt2_error = [](const std::string& from, const std::string& to) {
    std::string text = kGpt2;
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    return HfTensorNames(HfArch::kGpt2, Parse(text)).status();
  };
  ExpectError(gpt2_error("layers { layer_norm",
                         "layers { dropout { p: 0 } }\n"
                         "layers { layer_norm"),
              {"model.layers[4] is a dropout",
               "a GPT-2 (token_embedding, "
               "position_embedding, transformer_block x N, layer_norm, "
               "linear)",
               "has a transformer_block"});
  ExpectError(
      gpt2_error("heads: 2 activation: \"gelu_tanh\" }", "heads: 2 }"),
      {"model.layers[2].transformer_block.activation=\"gelu\"", "gelu_tanh"});
  ExpectError(gpt2_error("heads: 2 activation",
                         "heads: 2 bias: false "
                         "activation"),
              {"model.layers[2].transformer_block.bias=false"});
  ExpectError(gpt2_error("bias: false }", "}"),
              {"model.layers[5].linear.bias must be false"});
  ExpectError(gpt2_error("out_features: 11", "out_features: 12"),
              {"model.layers[5].linear is [12, 8]", "[11, 8]"});
  ExpectError(gpt2_error("tie_weight_to: 0", "tie_weight_to: 1"),
              {"model.layers[5].tie_weight_to=1"});
  ExpectError(gpt2_error("dim: 8 heads: 2 mlp_hidden",
                         "dim: 6 heads: 2 "
                         "mlp_hidden"),
              {"model.layers[3]"});
  ExpectError(HfTensorNames(HfArch::kLlama, Parse(kGpt2)).status(),
              {"model.layers[1] is a position_embedding", "a LLaMA"});
  ExpectError(HfTensorNames(HfArch::kGpt2, Parse(R"(
    layers { token_embedding { vocab_size: 3 dim: 2 } }
    layers { linear { in_features: 2 out_features: 3 bias: false } })"))
                  .status(),
              {"the spec's model has 2 layers", "at least 5"});
}

}  // namespace
}  // namespace aqueduct
