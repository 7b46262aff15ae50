// Shape rules and field errors of the GPT layers, and weight tying, through
// InferModelShapes (the checks every daemon and `aq` run on a spec).
#include "pipeline/shapes.h"

#include <string>

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "pipeline/limits.h"

namespace aqueduct {
namespace {

ModelSpec Model(const std::string& text) {
  ModelSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &spec))
      << text;
  return spec;
}

// The first error InferModelShapes reports for `layers` over token ids
// [input_len] per sample.
std::string Error(const std::string& layers, int64_t input_len = 128,
                  const SymbolicShape* input = nullptr) {
  auto shapes = InferModelShapes(
      Model(layers),
      input != nullptr ? *input : SymbolicShape::Known({input_len}));
  EXPECT_FALSE(shapes.ok()) << layers;
  if (shapes.ok()) return "";
  EXPECT_EQ(shapes.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(shapes.status().message());
}

constexpr char kEmbed[] =
    "layers { token_embedding { vocab_size: 256 dim: 128 } } ";
constexpr char kGpt[] =
    "layers { token_embedding { vocab_size: 256 dim: 128 } } "
    "layers { position_embedding { context: 128 dim: 128 } } "
    "layers { transformer_block { dim: 128 heads: 4 dropout: 0.1 } } "
    "layers { causal_self_attention { dim: 128 heads: 8 bias: false } } "
    "layers { layer_norm { normalized_shape: 128 } } "
    "layers { linear { in_features: 128 out_features: 256 bias: false } "
    "tie_weight_to: 0 }";

TEST(ShapesTest, GptShapes) {
  auto shapes = InferModelShapes(Model(kGpt), SymbolicShape::Known({64}));
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  ASSERT_EQ(shapes->size(), 6u);
  EXPECT_EQ((*shapes)[0].ToString(), "[64, 128]");
  EXPECT_EQ((*shapes)[1].ToString(), "[64, 128]");
  EXPECT_EQ((*shapes)[2].ToString(), "[64, 128]");
  EXPECT_EQ((*shapes)[3].ToString(), "[64, 128]");
  EXPECT_EQ((*shapes)[5].ToString(), "[64, 256]");
  // Data whose shape the coordinator does not know.
  auto unknown = InferModelShapes(Model(kGpt), SymbolicShape::Unknown());
  ASSERT_TRUE(unknown.ok()) << unknown.status();
  EXPECT_EQ((*unknown)[5].ToString(), "[?, 256]");
}

TEST(ShapesTest, TokenEmbeddingErrors) {
  EXPECT_EQ(Error("layers { token_embedding { vocab_size: 0 dim: 8 } }"),
            "model.layers[0].token_embedding.vocab_size=0 must be in [1, "
            "16777216] (token ids travel as floats)");
  EXPECT_EQ(
      Error("layers { token_embedding { vocab_size: 16777217 dim: 8 } }"),
      "model.layers[0].token_embedding.vocab_size=16777217 must be in [1, "
      "16777216] (token ids travel as floats)");
  EXPECT_EQ(Error("layers { token_embedding { vocab_size: 10 } }"),
            "model.layers[0].token_embedding.dim=0 must be positive");
  EXPECT_EQ(Error("layers { token_embedding { vocab_size: 16777216 dim: "
                  "1000 } }"),
            "model.layers[0].token_embedding: the weight [vocab_size, dim] = "
            "[16777216, 1000] exceeds 2^32 floats");
  EXPECT_EQ(Error(std::string(kEmbed) + kEmbed),
            "model.layers[1].token_embedding expects token ids [T] per "
            "sample; the previous layer's output is [128, 128]");
}

TEST(ShapesTest, PositionEmbeddingErrors) {
  EXPECT_EQ(Error(std::string(kEmbed) +
                  "layers { position_embedding { context: 64 dim: 128 } }"),
            "model.layers[1].position_embedding.context=64 is shorter than "
            "the input's 128 positions");
  EXPECT_EQ(Error(std::string(kEmbed) +
                  "layers { position_embedding { context: 128 dim: 64 } }"),
            "model.layers[1].position_embedding.dim=64 does not match the "
            "last dimension of the previous layer's output [128, 128]");
  EXPECT_EQ(Error("layers { position_embedding { context: 128 dim: 64 } }"),
            "model.layers[0].position_embedding expects [T, dim] per sample; "
            "the previous layer's output is [128]");
  EXPECT_EQ(
      Error(std::string(kEmbed) + "layers { position_embedding { dim: 128 } }"),
      "model.layers[1].position_embedding.context=0 must be positive");
}

TEST(ShapesTest, AttentionAndBlockErrors) {
  const std::string embed = kEmbed;
  EXPECT_EQ(
      Error(embed + "layers { relu {} } "
                    "layers { transformer_block { dim: 128 heads: 3 } }"),
      "model.layers[2].transformer_block.heads=3 does not divide dim=128");
  EXPECT_EQ(Error(embed + "layers { causal_self_attention { dim: 128 } }"),
            "model.layers[1].causal_self_attention.heads=0 must be positive");
  EXPECT_EQ(Error(embed + "layers { causal_self_attention { dim: 64 heads: "
                          "4 } }"),
            "model.layers[1].causal_self_attention.dim=64 does not match the "
            "last dimension of the previous layer's output [128, 128]");
  EXPECT_EQ(Error(embed + "layers { transformer_block { dim: 128 heads: 4 "
                          "dropout: 1 } }"),
            "model.layers[1].transformer_block.dropout=1 must be in [0, 1)");
  EXPECT_EQ(Error(embed + "layers { transformer_block { dim: 128 heads: 4 "
                          "dropout: -0.5 } }"),
            "model.layers[1].transformer_block.dropout=-0.5 must be in [0, 1)");
  EXPECT_EQ(Error(embed + "layers { transformer_block { dim: 128 heads: 4 "
                          "mlp_hidden: 0 } }"),
            "model.layers[1].transformer_block.mlp_hidden=0 must be positive");
  EXPECT_EQ(Error(embed + "layers { transformer_block { dim: 128 heads: 4 "
                          "eps: 0 } }"),
            "model.layers[1].transformer_block.eps=0 must be positive (at most "
            "1)");
  EXPECT_EQ(Error(embed + "layers { transformer_block { dim: 128 heads: 4 "
                          "eps: inf } }"),
            "model.layers[1].transformer_block.eps=inf must be positive (at "
            "most 1)");
  EXPECT_EQ(Error("layers { transformer_block { dim: 128 heads: 4 } }"),
            "model.layers[0].transformer_block expects [T, dim] per sample; "
            "the previous layer's output is [128]");
}

TEST(ShapesTest, SizesAreBoundedWithoutOverflow) {
  EXPECT_EQ(
      Error(
          "layers { token_embedding { vocab_size: 2 dim: 40000 } } "
          "layers { transformer_block { dim: 40000 heads: 1 mlp_hidden: 1 } }"),
      "model.layers[1].transformer_block: the attention weight [3 * "
      "dim, dim] with dim=40000 exceeds 2^32 floats");
  EXPECT_EQ(Error("layers { token_embedding { vocab_size: 2 dim: 4096 } } "
                  "layers { transformer_block { dim: 4096 heads: 1 "
                  "mlp_hidden: 16777216 } }"),
            "model.layers[1].transformer_block: the MLP weight [mlp_hidden, "
            "dim] = [16777216, 4096] exceeds 2^32 floats");
  EXPECT_EQ(Error("layers { token_embedding { vocab_size: 2 dim: 4 } } "
                  "layers { transformer_block { dim: 4 heads: 1 "
                  "mlp_hidden: 9223372036854775807 } }"),
            "model.layers[1].transformer_block.mlp_hidden="
            "9223372036854775807 must be at most 16777216");
  EXPECT_EQ(Error("layers { token_embedding { vocab_size: 2 dim: 8 } } "
                  "layers { causal_self_attention { dim: 8 heads: 2 } }",
                  70000),
            "model.layers[1].causal_self_attention: a sample's activations "
            "over 70000 positions with 2 heads (the attention weights are "
            "[heads, T, T]) exceeds 2^32 floats");
  EXPECT_EQ(Error("layers { token_embedding { vocab_size: 16777216 dim: "
                  "16777216 } }"),
            "model.layers[0].token_embedding: the weight [vocab_size, dim] = "
            "[16777216, 16777216] exceeds 2^32 floats");
  EXPECT_EQ(Error("layers { token_embedding { vocab_size: 2 dim: "
                  "9223372036854775807 } }"),
            "model.layers[0].token_embedding.dim=9223372036854775807 must be "
            "at most 16777216");
}

// Every layer's widths are bounded, products saturate instead of wrapping,
// and one sample's output is a tensor like any other.
TEST(ShapesTest, EveryLayerIsBounded) {
  const SymbolicShape image = SymbolicShape::Known({1, 8, 8});
  EXPECT_EQ(Error("layers { linear { in_features: 128 out_features: "
                  "16777217 } }"),
            "model.layers[0].linear.out_features=16777217 must be at most "
            "16777216");
  EXPECT_EQ(Error("layers { linear { in_features: 128 out_features: "
                  "-1 } }"),
            "model.layers[0].linear.out_features=-1 must be positive");
  EXPECT_EQ(Error("layers { conv2d { in_channels: 1 out_channels: 2097152 "
                  "kernel_size: 3 } }",
                  0, &image),
            "model.layers[0].conv2d.out_channels=2097152 must be at most "
            "1048576");
  EXPECT_EQ(Error("layers { conv2d { in_channels: 1048576 out_channels: "
                  "1048576 kernel_size: 1 } }",
                  0, &image),
            "model.layers[0].conv2d: the weight [out_channels, in_channels, "
            "kernel_size, kernel_size] = [1048576, 1048576, 1, 1] has "
            "1099511627776 parameters (4.4 TB), more than one tensor may hold "
            "(4294967296 floats, 17.2 GB)");
  EXPECT_EQ(Error("layers { max_pool2d { kernel_size: 9999 } }", 0, &image),
            "model.layers[0].max_pool2d.kernel_size=9999 must be at most 4096");
  EXPECT_EQ(Error("layers { layer_norm { normalized_shape: 128 eps: nan } }"),
            "model.layers[0].layer_norm.eps=nan must be positive (at most 1)");
  EXPECT_EQ(
      Error(std::string(kEmbed) +
            "layers { position_embedding { context: 2097152 dim: 128 } }"),
      "model.layers[1].position_embedding.context=2097152 must be at most "
      "1048576");
  EXPECT_EQ(Error(std::string(kEmbed) +
                  "layers { causal_self_attention { dim: 128 heads: 8192 } }"),
            "model.layers[1].causal_self_attention.heads=8192 must be at most "
            "4096");
  // [65537, 65536] per sample: 65537 ids, each a vector of 65536.
  EXPECT_EQ(
      Error("layers { token_embedding { vocab_size: 4 dim: 65536 } }", 65537),
      "model.layers[0].token_embedding: the output [65537, 65536] "
      "exceeds 2^32 floats");
  // A convolution's output past 2^32 floats per sample: [2^20, 2^7, 2^7].
  const SymbolicShape wide = SymbolicShape::Known({1, 128, 128});
  EXPECT_EQ(Error("layers { conv2d { in_channels: 1 out_channels: 1048576 "
                  "kernel_size: 1 } }",
                  0, &wide),
            "model.layers[0]: one sample's output [1048576, 128, 128] has "
            "17179869184 floats, more than one tensor may hold (4294967296 "
            "floats)");
  ModelSpec many;
  for (int i = 0; i <= kMaxLayers; ++i) many.add_layers()->mutable_relu();
  EXPECT_EQ(
      InferModelShapes(many, SymbolicShape::Known({4})).status().message(),
      "model.layers has 4097 layers, more than 4096");
}

TEST(ShapesTest, TiedWeights) {
  auto tied = TiedWeights(Model(kGpt));
  ASSERT_TRUE(tied.ok()) << tied.status();
  ASSERT_EQ(tied->size(), 6u);
  EXPECT_EQ((*tied)[5], 0);
  EXPECT_FALSE((*tied)[0].has_value());
  EXPECT_FALSE((*tied)[2].has_value());
}

TEST(ShapesTest, TieErrors) {
  const std::string embed = kEmbed;
  const std::string ln = "layers { layer_norm { normalized_shape: 128 } } ";
  EXPECT_EQ(Error(embed + ln +
                  "layers { linear { in_features: 128 out_features: 113 } "
                  "tie_weight_to: 0 }"),
            "model.layers[2].tie_weight_to=0: layer 2's weight is [113, 128] "
            "but layer 0's is [256, 128]");
  EXPECT_EQ(Error(embed + ln +
                  "layers { linear { in_features: 128 out_features: 256 } "
                  "tie_weight_to: 2 }"),
            "model.layers[2].tie_weight_to=2 must name an earlier layer (0 "
            "to 1)");
  EXPECT_EQ(Error("layers { token_embedding { vocab_size: 4 dim: 4 } "
                  "tie_weight_to: 0 }"),
            "model.layers[0].tie_weight_to=0 must name an earlier layer "
            "(layer 0 has none)");
  EXPECT_EQ(Error(embed + ln +
                  "layers { linear { in_features: 128 out_features: 256 } "
                  "tie_weight_to: -1 }"),
            "model.layers[2].tie_weight_to=-1 must name an earlier layer (0 "
            "to 1)");
  EXPECT_EQ(Error(embed + ln +
                  "layers { linear { in_features: 128 out_features: 256 } "
                  "tie_weight_to: 1 }"),
            "model.layers[2].tie_weight_to=1: layer 1 (layer_norm) has no "
            "weight to tie (only linear and token_embedding layers tie)");
  EXPECT_EQ(Error(embed + "layers { transformer_block { dim: 128 heads: 4 } "
                          "tie_weight_to: 0 }"),
            "model.layers[1].tie_weight_to=0: layer 1 (transformer_block) has "
            "no weight to tie (only linear and token_embedding layers tie)");
  EXPECT_EQ(Error(embed + ln +
                  "layers { linear { in_features: 128 out_features: 256 } "
                  "tie_weight_to: 0 } "
                  "layers { relu {} } "
                  "layers { linear { in_features: 256 out_features: 128 } } "
                  "layers { linear { in_features: 128 out_features: 256 } "
                  "tie_weight_to: 2 }"),
            "model.layers[5].tie_weight_to=2: layer 2 is itself tied to layer "
            "0 (tie to layer 0)");
}

// ---------------------------------------------------------------- LLaMA

std::string Block(const std::string& fields) {
  return std::string(kEmbed) + "layers { llama_block { " + fields + " } }";
}

TEST(ShapesTest, LlamaShapes) {
  auto shapes = InferModelShapes(
      Model(Block("dim: 128 heads: 4 kv_heads: 2 hidden: 344") +
            "layers { rms_norm { dim: 128 } } "
            "layers { linear { in_features: 128 out_features: 256 } }"),
      SymbolicShape::Known({64}));
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  ASSERT_EQ(shapes->size(), 4u);
  EXPECT_EQ((*shapes)[1].ToString(), "[64, 128]");
  EXPECT_EQ((*shapes)[2].ToString(), "[64, 128]");
  EXPECT_EQ((*shapes)[3].ToString(), "[64, 256]");
}

TEST(ShapesTest, LlamaBlockHeadErrors) {
  const std::string field = "model.layers[1].llama_block";
  EXPECT_EQ(Error(Block("dim: 128 heads: 4 kv_heads: 3 hidden: 8")),
            field + ".kv_heads=3 must be positive and divide heads=4");
  EXPECT_EQ(Error(Block("dim: 128 heads: 4 kv_heads: 8 hidden: 8")),
            field + ".kv_heads=8 must be positive and divide heads=4");
  EXPECT_EQ(Error(Block("dim: 128 heads: 4 kv_heads: 0 hidden: 8")),
            field + ".kv_heads=0 must be positive and divide heads=4");
  EXPECT_EQ(Error(Block("dim: 128 heads: 3 hidden: 8")),
            field + ".heads=3 does not divide dim=128");
  EXPECT_EQ(Error(Block("dim: 128 hidden: 8")),
            field + ".heads=0 must be positive");
  // Rotary embeddings pair the halves of a head: 128 / 128 = 1 is odd.
  EXPECT_EQ(Error(Block("dim: 128 heads: 128 hidden: 8")),
            field +
                ": the head width dim / heads = 1 must be even (rotary "
                "embeddings pair its halves)");
}

TEST(ShapesTest, LlamaBlockFieldErrors) {
  const std::string field = "model.layers[1].llama_block";
  EXPECT_EQ(Error(Block("dim: 128 heads: 4")),
            field + ".hidden=0 must be positive");
  EXPECT_EQ(Error(Block("dim: 128 heads: 4 hidden: 16777217")),
            field + ".hidden=16777217 must be at most 16777216");
  EXPECT_EQ(Error(Block("dim: 64 heads: 4 hidden: 8")),
            field +
                ".dim=64 does not match the last dimension of the previous "
                "layer's output [128, 128]");
  for (const char* theta : {"1", "0", "-5", "nan", "2e+09"}) {
    EXPECT_EQ(
        Error(Block(std::string("dim: 128 heads: 4 hidden: 8 rope_theta: ") +
                    theta)),
        field + ".rope_theta=" + theta + " must be in (1, 1e9]");
  }
  EXPECT_EQ(Error(Block("dim: 128 heads: 4 hidden: 8 eps: 0")),
            field + ".eps=0 must be positive (at most 1)");
  EXPECT_EQ(Error(Block("dim: 128 heads: 4 hidden: 8 eps: 2")),
            field + ".eps=2 must be positive (at most 1)");
  EXPECT_EQ(Error("layers { llama_block { dim: 128 heads: 4 hidden: 8 } }"),
            "model.layers[0].llama_block expects [T, dim] per sample; the "
            "previous layer's output is [128]");
}

TEST(ShapesTest, RmsNormErrors) {
  const std::string embed = kEmbed;
  EXPECT_EQ(Error(embed + "layers { rms_norm { dim: 64 } }"),
            "model.layers[1].rms_norm.dim=64 does not match the last "
            "dimension of the previous layer's output [128, 128]");
  EXPECT_NE(Error(embed + "layers { rms_norm { } }")
                .find("model.layers[1].rms_norm.dim=0"),
            std::string::npos);
  EXPECT_EQ(Error(embed + "layers { rms_norm { dim: 128 eps: -1 } }"),
            "model.layers[1].rms_norm.eps=-1 must be positive (at most 1)");
  EXPECT_EQ(Error(embed + "layers { rms_norm { dim: 128 eps: nan } }"),
            "model.layers[1].rms_norm.eps=nan must be positive (at most 1)");
  // Over any rank: the last dimension.
  const SymbolicShape image = SymbolicShape::Known({3, 5, 7});
  auto shapes =
      InferModelShapes(Model("layers { rms_norm { dim: 7 } }"), image);
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  EXPECT_EQ((*shapes)[0].ToString(), "[3, 5, 7]");
}

TEST(ShapesTest, LlamaSizesAreBounded) {
  EXPECT_EQ(Error("layers { token_embedding { vocab_size: 2 dim: 4096 } } "
                  "layers { llama_block { dim: 4096 heads: 32 "
                  "hidden: 16777216 } }"),
            "model.layers[1].llama_block: the MLP weight [hidden, dim] = "
            "[16777216, 4096] exceeds 2^32 floats");
  EXPECT_EQ(Error(Block("dim: 128 heads: 8192 hidden: 8")),
            "model.layers[1].llama_block.heads=8192 must be at most 4096");
}

TEST(ShapesTest, NoKindListsEveryKind) {
  EXPECT_EQ(Error("layers { }"),
            "model.layers[0] has no layer kind (set one of linear, relu, "
            "gelu, dropout, flatten, conv2d, max_pool2d, layer_norm, "
            "rms_norm, delay, token_embedding, position_embedding, "
            "causal_self_attention, transformer_block, llama_block)");
}

}  // namespace
}  // namespace aqueduct
