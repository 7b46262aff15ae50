// Gradient-norm clipping (clipping.h): the sum of squares with a tied
// copy's weight counted once and a tensor group's whole tensors left to
// member 0, torch.nn.utils.clip_grad_norm_'s factor, and the scaling.
#include "worker/nn/clipping.h"

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/device/cpu_device.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace aqueduct {
namespace {

struct Built {
  std::unique_ptr<Model> model;
  ParameterSet grads;
};

// `text`'s model over token ids [3] (this member's part when `shard` has
// degree > 1), its gradients tensor i filled with i + 1.
Built Build(CpuDevice& device, const std::string& text,
            const TensorShard& shard = {}) {
  ModelSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &spec));
  Built b;
  auto model = Model::Build(spec, Shape({3}), 1, shard);
  EXPECT_TRUE(model.ok()) << model.status();
  b.model = std::move(*model);
  auto params = InitParameters(*b.model, 0, b.model->num_layers(), &device);
  EXPECT_TRUE(params.ok()) << params.status();
  b.grads = *ZerosLike(*params, &device);
  for (size_t i = 0; i < b.grads.size(); ++i) {
    const Tensor& g = b.grads.tensors[i];
    device.Fill(g.f32(), g.numel(), static_cast<float>(i + 1));
  }
  return b;
}

constexpr char kTied[] =
    "layers { token_embedding { vocab_size: 5 dim: 4 } } "
    "layers { layer_norm { normalized_shape: 4 } } "
    "layers { linear { in_features: 4 out_features: 5 bias: false } "
    "tie_weight_to: 0 }";

// Tensors: the embedding [5, 4] (1s), the norm's weight and bias [4] (2s,
// 3s) and the tied head's copy [5, 4] (4s), which is left out.
TEST(ClippingTest, GradSquaresCountsATiedWeightOnce) {
  CpuDevice device;
  Built b = Build(device, kTied);
  ASSERT_EQ(b.grads.size(), 4u);
  auto squares = GradSquares(*b.model, device, b.grads, true);
  ASSERT_TRUE(squares.ok()) << squares.status();
  EXPECT_EQ(*squares, 20 * 1 + 4 * 4 + 4 * 9);
  // At degree 1 every tensor is whole: only member 0's call counts them.
  EXPECT_EQ(*GradSquares(*b.model, device, b.grads, false), 0.0);
}

// A member of a tensor group of 2: with whole_too false only the split
// tensors (c_attn, c_proj's weight, c_fc, mlp c_proj's weight) count.
TEST(ClippingTest, GradSquaresLeavesWholeTensorsToMemberZero) {
  CpuDevice device;
  TensorShard shard;
  shard.degree = 2;
  Built b = Build(device,
                  "layers { token_embedding { vocab_size: 5 dim: 8 } } "
                  "layers { transformer_block { dim: 8 heads: 2 } }",
                  shard);
  double split = 0, all = 0;
  for (int p = 0; p < static_cast<int>(b.model->layer(1).Params().size());
       ++p) {
    const Tensor& g = b.grads.ForLayer(1)[p];
    const double sq = static_cast<double>(g.numel()) * g.f32()[0] * g.f32()[0];
    all += sq;
    if (b.model->layer(1).SplitOf(p).dim >= 0) split += sq;
  }
  EXPECT_GT(split, 0);
  EXPECT_LT(split, all);
  EXPECT_EQ(*GradSquares(*b.model, device, b.grads, false), split);
  EXPECT_EQ(*GradSquares(*b.model, device, b.grads, true), all + 40);
}

// torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to 1, in float.
TEST(ClippingTest, ClipFactorIsTorchs) {
  EXPECT_EQ(ClipFactor(25.0, 1.0f), 1.0f / (5.0f + 1e-6f));
  EXPECT_EQ(ClipFactor(2.0, 0.5f),
            0.5f / (static_cast<float>(std::sqrt(2.0)) + 1e-6f));
  EXPECT_EQ(ClipFactor(0.25, 1.0f), 1.0f);
  EXPECT_EQ(ClipFactor(0.0, 1.0f), 1.0f);
  // At the threshold torch still scales, by a hair.
  EXPECT_LT(ClipFactor(4.0, 2.0f), 1.0f);
  EXPECT_EQ(ClipFactor(4.0, 2.0f), 2.0f / (2.0f + 1e-6f));
}

TEST(ClippingTest, ScaleGradientsScalesEveryTensor) {
  CpuDevice device;
  Built b = Build(device, kTied);
  ScaleGradients(device, b.grads, 0.25f);
  for (size_t i = 0; i < b.grads.size(); ++i) {
    const Tensor& g = b.grads.tensors[i];
    for (int64_t k = 0; k < g.numel(); ++k) {
      ASSERT_EQ(g.f32()[k], 0.25f * static_cast<float>(i + 1)) << i;
    }
  }
  // Clipped to a norm of 1: the sum of squares becomes 1.
  const double squares = *GradSquares(*b.model, device, b.grads, true);
  ScaleGradients(device, b.grads, ClipFactor(squares, 1.0f));
  EXPECT_NEAR(*GradSquares(*b.model, device, b.grads, true), 1.0, 1e-5);
  ScaleGradients(device, b.grads, 1.0f);
  EXPECT_NEAR(*GradSquares(*b.model, device, b.grads, true), 1.0, 1e-5);
}

}  // namespace
}  // namespace aqueduct
