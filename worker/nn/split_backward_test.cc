// The split backward (Layer::BackwardInput, then RunDeferredGrads) gives
// the fused backward's bits, for every layer kind, writing and
// accumulating gradients, with dropout on; and it really defers the
// linear maps' weight gradients (the W of the zero-bubble schedules).
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/device/cpu_device.h"
#include "gtest/gtest.h"
#include "worker/nn/layer.h"
#include "worker/nn/test_util.h"

namespace aqueduct {
namespace {

struct Case {
  std::string layer;
  Shape sample;
  int64_t batch;
  // Token ids in [0, ids) as the input (embeddings); 0: uniform floats.
  int ids = 0;
  // Whether the layer has linear maps whose weight gradients it defers.
  bool defers = false;
};

class SplitBackwardTest : public ::testing::TestWithParam<Case> {
 protected:
  Tensor Upload(const std::vector<float>& v, const Shape& shape) {
    Tensor t = *device_.Allocate(shape, DType::kF32);
    EXPECT_TRUE(device_.CopyFromHost(v.data(), t).ok());
    return t;
  }
  std::vector<Tensor> Grads(const Layer& layer, std::mt19937* rng) {
    std::vector<Tensor> out;
    for (const ParamSpec& p : layer.Params()) {
      out.push_back(Upload(Random(p.shape.numel(), rng), p.shape));
    }
    return out;
  }
  static bool SameBits(const Tensor& a, const Tensor& b) {
    return a.numel() == b.numel() &&
           std::memcmp(a.f32(), b.f32(), a.numel() * sizeof(float)) == 0;
  }
  CpuDevice device_;
};

TEST_P(SplitBackwardTest, GivesTheFusedBackwardsBits) {
  const Case& c = GetParam();
  auto layer = CreateLayer(ParseLayer(c.layer), 0, c.sample, /*seed=*/5);
  ASSERT_TRUE(layer.ok()) << layer.status();
  std::mt19937 rng(3);
  const Shape in = c.sample.WithLeading(c.batch);
  const Shape out = (*layer)->output_shape().WithLeading(c.batch);
  std::vector<float> xs = Random(in.numel(), &rng);
  if (c.ids > 0) {
    for (float& v : xs) v = static_cast<float>(rng() % c.ids);
  }
  const std::vector<Tensor> params = Grads(**layer, &rng);
  PassContext ctx;
  ctx.minibatch = 9;
  Tensor y;
  LayerCache cache;
  ASSERT_TRUE(
      (*layer)->Forward(device_, params, Upload(xs, in), ctx, &y, &cache).ok());
  const std::vector<float> dys = Random(out.numel(), &rng);
  for (bool accumulate : {false, true}) {
    SCOPED_TRACE(accumulate ? "accumulating" : "writing");
    std::mt19937 grad_rng(17);
    const std::vector<Tensor> fused = Grads(**layer, &grad_rng);
    grad_rng.seed(17);
    const std::vector<Tensor> split = Grads(**layer, &grad_rng);
    grad_rng.seed(17);
    const std::vector<Tensor> before = Grads(**layer, &grad_rng);
    Tensor dx_fused, dx_split;
    Tensor* want_dx = c.ids > 0 ? nullptr : &dx_fused;
    Tensor* got_dx = c.ids > 0 ? nullptr : &dx_split;
    ASSERT_TRUE((*layer)
                    ->Backward(device_, params, cache, Upload(dys, out), ctx,
                               want_dx, fused, accumulate)
                    .ok());
    DeferredGrads deferred;
    ASSERT_TRUE((*layer)
                    ->BackwardInput(device_, params, cache, Upload(dys, out),
                                    ctx, got_dx, split, accumulate, &deferred)
                    .ok());
    if (got_dx != nullptr) {
      EXPECT_TRUE(SameBits(dx_fused, dx_split));
    }
    EXPECT_EQ(!deferred.linears.empty(), c.defers);
    for (const DeferredLinearGrad& g : deferred.linears) {
      // Not run yet: the weight gradient still holds what it held.
      for (size_t p = 0; p < split.size(); ++p) {
        if (g.dw.f32() == split[p].f32()) {
          EXPECT_TRUE(SameBits(split[p], before[p])) << "param " << p;
        }
      }
    }
    RunDeferredGrads(device_, deferred);
    for (size_t p = 0; p < fused.size(); ++p) {
      EXPECT_TRUE(SameBits(fused[p], split[p])) << (*layer)->Params()[p].name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Layers, SplitBackwardTest,
    ::testing::Values(
        Case{"linear { in_features: 6 out_features: 5 }", Shape({6}), 4, 0,
             true},
        Case{"linear { in_features: 6 out_features: 3 bias: false }",
             Shape({2, 6}), 3, 0, true},
        Case{"relu {}", Shape({7}), 3}, Case{"gelu {}", Shape({7}), 3},
        Case{"dropout { p: 0.3 }", Shape({9}), 2},
        Case{"layer_norm { normalized_shape: 6 }", Shape({3, 6}), 2},
        Case{"conv2d { in_channels: 2 out_channels: 3 kernel_size: 3 "
             "padding: 1 }",
             Shape({2, 5, 5}), 2},
        Case{"token_embedding { vocab_size: 6 dim: 4 }", Shape({5}), 2, 6},
        Case{"position_embedding { context: 7 dim: 8 }", Shape({5, 8}), 2},
        Case{"causal_self_attention { dim: 8 heads: 2 }", Shape({5, 8}), 2, 0,
             true},
        Case{"causal_self_attention { dim: 8 heads: 4 bias: false "
             "dropout: 0.2 }",
             Shape({6, 8}), 3, 0, true},
        Case{"transformer_block { dim: 8 heads: 2 }", Shape({5, 8}), 2, 0,
             true},
        Case{"transformer_block { dim: 8 heads: 2 bias: false mlp_hidden: 12 "
             "dropout: 0.1 }",
             Shape({4, 8}), 3, 0, true}));

}  // namespace
}  // namespace aqueduct
