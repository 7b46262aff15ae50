// Every layer's backward against central finite differences of
// L = sum(r * forward(x)) for a fixed random r, in fp32 (eps chosen per
// layer), compared as a relative error of whole gradient vectors.
#include "worker/nn/layer.h"

#include <cmath>
#include <random>
#include <vector>

#include "common/device/cpu_device.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "worker/nn/model.h"
#include "worker/nn/test_util.h"

namespace aqueduct {
namespace {

class GradCheck {
 public:
  GradCheck(const std::string& layer_text, Shape sample, int64_t batch,
            float eps = 1e-2f)
      : spec_(ParseLayer(layer_text)),
        sample_(std::move(sample)),
        batch_(batch),
        eps_(eps) {
    auto layer = CreateLayer(spec_, 0, sample_, /*seed=*/42);
    EXPECT_TRUE(layer.ok()) << layer.status();
    layer_ = std::move(*layer);
  }

  // Inputs; by default uniform in [-1, 1].
  void SetInput(std::vector<float> x) { x_ = std::move(x); }

  void Run(double tolerance = 1e-3) {
    std::mt19937 rng(7);
    const Shape in_shape = sample_.WithLeading(batch_);
    const Shape out_shape = layer_->output_shape().WithLeading(batch_);
    if (x_.empty()) x_ = Random(in_shape.numel(), &rng);
    const std::vector<float> r = Random(out_shape.numel(), &rng);
    std::vector<std::vector<float>> params;
    for (const ParamSpec& p : layer_->Params()) {
      params.push_back(Random(p.shape.numel(), &rng));
    }

    // Analytic.
    std::vector<Tensor> param_tensors = Upload(params);
    std::vector<Tensor> grad_tensors;
    for (const ParamSpec& p : layer_->Params()) {
      grad_tensors.push_back(*device_.Zeros(p.shape, DType::kF32));
    }
    Tensor x = UploadOne(x_, in_shape);
    PassContext ctx;
    ctx.minibatch = 3;
    Tensor y;
    LayerCache cache;
    ASSERT_TRUE(
        layer_->Forward(device_, param_tensors, x, ctx, &y, &cache).ok());
    ASSERT_EQ(y.shape(), out_shape);
    Tensor dy = UploadOne(r, out_shape);
    Tensor dx;
    ASSERT_TRUE(layer_
                    ->Backward(device_, param_tensors, cache, dy, ctx, &dx,
                               grad_tensors, false)
                    .ok());
    ASSERT_EQ(dx.shape(), in_shape);
    std::vector<double> analytic_dx = Download(dx);

    // Numeric, for x.
    std::vector<double> numeric_dx(x_.size());
    for (size_t i = 0; i < x_.size(); ++i) {
      numeric_dx[i] = Numeric(&x_, i, params, r);
    }
    EXPECT_LT(RelativeError(analytic_dx, numeric_dx), tolerance)
        << layer_->kind() << " input gradient";

    // Numeric, for each parameter.
    for (size_t p = 0; p < params.size(); ++p) {
      std::vector<double> analytic = Download(grad_tensors[p]);
      std::vector<double> numeric(params[p].size());
      for (size_t i = 0; i < params[p].size(); ++i) {
        numeric[i] = Numeric(&params[p], i, params, r);
      }
      EXPECT_LT(RelativeError(analytic, numeric), tolerance)
          << layer_->kind() << " gradient of " << layer_->Params()[p].name;
      EXPECT_GT(std::abs(analytic[0]) + std::abs(analytic.back()), 0.0)
          << "degenerate test";
    }

    // Accumulation adds to existing gradients.
    if (!params.empty()) {
      std::vector<double> once = Download(grad_tensors[0]);
      Tensor dy2 = UploadOne(r, out_shape);
      LayerCache cache2;
      Tensor x2 = UploadOne(x_, in_shape);
      Tensor y2;
      ASSERT_TRUE(
          layer_->Forward(device_, param_tensors, x2, ctx, &y2, &cache2).ok());
      ASSERT_TRUE(layer_
                      ->Backward(device_, param_tensors, cache2, dy2, ctx,
                                 nullptr, grad_tensors, true)
                      .ok());
      std::vector<double> twice = Download(grad_tensors[0]);
      for (size_t i = 0; i < once.size(); ++i) {
        ASSERT_NEAR(twice[i], 2 * once[i], 1e-4 * (1 + std::abs(once[i])));
      }
    }
  }

 private:
  // Central difference of L with respect to (*v)[i].
  double Numeric(std::vector<float>* v, size_t i,
                 const std::vector<std::vector<float>>& params,
                 const std::vector<float>& r) {
    const float saved = (*v)[i];
    (*v)[i] = saved + eps_;
    const double plus = Loss(params, r);
    (*v)[i] = saved - eps_;
    const double minus = Loss(params, r);
    (*v)[i] = saved;
    return (plus - minus) / (2.0 * eps_);
  }

  double Loss(const std::vector<std::vector<float>>& params,
              const std::vector<float>& r) {
    std::vector<Tensor> p = Upload(params);
    Tensor x = UploadOne(x_, sample_.WithLeading(batch_));
    PassContext ctx;
    ctx.minibatch = 3;
    Tensor y;
    LayerCache cache;
    EXPECT_TRUE(layer_->Forward(device_, p, x, ctx, &y, &cache).ok());
    double l = 0;
    for (int64_t i = 0; i < y.numel(); ++i) l += double{r[i]} * y.f32()[i];
    return l;
  }

  Tensor UploadOne(const std::vector<float>& v, const Shape& shape) {
    Tensor t = *device_.Allocate(shape, DType::kF32);
    EXPECT_TRUE(device_.CopyFromHost(v.data(), t).ok());
    return t;
  }

  std::vector<Tensor> Upload(const std::vector<std::vector<float>>& params) {
    std::vector<Tensor> out;
    const std::vector<ParamSpec> specs = layer_->Params();
    for (size_t i = 0; i < params.size(); ++i) {
      out.push_back(UploadOne(params[i], specs[i].shape));
    }
    return out;
  }

  std::vector<double> Download(const Tensor& t) {
    std::vector<double> out(t.numel());
    for (int64_t i = 0; i < t.numel(); ++i) out[i] = t.f32()[i];
    return out;
  }

  CpuDevice device_;
  LayerSpec spec_;
  Shape sample_;
  int64_t batch_;
  float eps_;
  std::unique_ptr<Layer> layer_;
  std::vector<float> x_;
};

// Inputs whose magnitudes stay away from 0 (ReLU's kink) by more than eps.
std::vector<float> AwayFromZero(size_t n, float margin) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(margin, 1.0f);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = (i % 3 == 0 ? -1 : 1) * dist(rng);
  return v;
}

TEST(LayerGradTest, Linear) {
  GradCheck("linear { in_features: 5 out_features: 4 }", Shape({5}), 3).Run();
}

TEST(LayerGradTest, LinearWithoutBiasOnRank3Input) {
  GradCheck("linear { in_features: 4 out_features: 3 bias: false }",
            Shape({2, 4}), 2)
      .Run();
}

TEST(LayerGradTest, Relu) {
  GradCheck check("relu {}", Shape({7}), 3);
  check.SetInput(AwayFromZero(21, 0.05f));
  check.Run();
}

TEST(LayerGradTest, Gelu) { GradCheck("gelu {}", Shape({6}), 4, 1e-2f).Run(); }

TEST(LayerGradTest, Dropout) {
  GradCheck("dropout { p: 0.3 }", Shape({20}), 4).Run();
}

TEST(LayerGradTest, Flatten) {
  GradCheck("flatten {}", Shape({2, 3, 2}), 2).Run();
}

TEST(LayerGradTest, Conv2d) {
  GradCheck(
      "conv2d { in_channels: 2 out_channels: 3 kernel_size: 3 padding: 1 }",
      Shape({2, 5, 4}), 2)
      .Run();
}

TEST(LayerGradTest, Conv2dStridedUnpadded) {
  GradCheck(
      "conv2d { in_channels: 1 out_channels: 2 kernel_size: 2 stride: 2 }",
      Shape({1, 6, 5}), 3)
      .Run();
}

TEST(LayerGradTest, MaxPool2d) {
  GradCheck check("max_pool2d { kernel_size: 2 }", Shape({2, 4, 6}), 2);
  // Distinct values spaced wider than 2*eps so the argmax never flips.
  std::vector<float> x(2 * 2 * 4 * 6);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = 0.05f * static_cast<float>((i * 37) % x.size()) - 1.0f;
  }
  check.SetInput(x);
  check.Run();
}

TEST(LayerGradTest, MaxPool2dOverlappingPadded) {
  GradCheck check("max_pool2d { kernel_size: 3 stride: 2 padding: 1 }",
                  Shape({1, 5, 5}), 2);
  std::vector<float> x(50);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = 0.05f * static_cast<float>((i * 17) % x.size()) - 1.0f;
  }
  check.SetInput(x);
  check.Run();
}

TEST(LayerGradTest, LayerNorm) {
  GradCheck("layer_norm { normalized_shape: 6 }", Shape({3, 6}), 2, 5e-3f)
      .Run();
}

TEST(LayerGradTest, Delay) {
  GradCheck("delay { forward_ms: 1 backward_ms: 1 }", Shape({4}), 2).Run();
}

TEST(LayerTest, DropoutIsDeterministicAndScales) {
  CpuDevice device;
  auto layer =
      CreateLayer(ParseLayer("dropout { p: 0.5 }"), 2, Shape({1000}), 9);
  ASSERT_TRUE(layer.ok());
  Tensor x = *device.Allocate(Shape({1, 1000}), DType::kF32);
  device.Fill(x.f32(), 1000, 1.0f);
  PassContext ctx;
  ctx.minibatch = 5;
  Tensor y1, y2, y3;
  LayerCache c;
  ASSERT_TRUE((*layer)->Forward(device, {}, x, ctx, &y1, &c).ok());
  ASSERT_TRUE((*layer)->Forward(device, {}, x, ctx, &y2, &c).ok());
  ctx.minibatch = 6;
  ASSERT_TRUE((*layer)->Forward(device, {}, x, ctx, &y3, &c).ok());
  int kept = 0, differ = 0;
  for (int i = 0; i < 1000; ++i) {
    EXPECT_EQ(y1.f32()[i], y2.f32()[i]);
    EXPECT_TRUE(y1.f32()[i] == 0.0f || y1.f32()[i] == 2.0f);
    kept += y1.f32()[i] != 0;
    differ += y1.f32()[i] != y3.f32()[i];
  }
  EXPECT_GT(kept, 430);
  EXPECT_LT(kept, 570);
  EXPECT_GT(differ, 100) << "another minibatch must draw another mask";
  // Evaluation is the identity.
  ctx.training = false;
  Tensor y4;
  ASSERT_TRUE((*layer)->Forward(device, {}, x, ctx, &y4, nullptr).ok());
  EXPECT_EQ(y4.f32()[17], 1.0f);
}

TEST(LayerTest, ConvMatchesDirectConvolution) {
  CpuDevice device;
  auto layer = CreateLayer(
      ParseLayer("conv2d { in_channels: 2 out_channels: 2 kernel_size: 3 "
                 "stride: 2 padding: 1 }"),
      0, Shape({2, 5, 5}), 1);
  ASSERT_TRUE(layer.ok()) << layer.status();
  EXPECT_EQ((*layer)->output_shape(), Shape({2, 3, 3}));
  std::mt19937 rng(3);
  std::vector<float> xv = Random(2 * 2 * 25, &rng);
  std::vector<float> wv = Random(2 * 2 * 9, &rng);
  std::vector<float> bv = Random(2, &rng);
  Tensor x = *device.Allocate(Shape({2, 2, 5, 5}), DType::kF32);
  Tensor w = *device.Allocate(Shape({2, 2, 3, 3}), DType::kF32);
  Tensor b = *device.Allocate(Shape({2}), DType::kF32);
  ASSERT_TRUE(device.CopyFromHost(xv.data(), x).ok());
  ASSERT_TRUE(device.CopyFromHost(wv.data(), w).ok());
  ASSERT_TRUE(device.CopyFromHost(bv.data(), b).ok());
  PassContext ctx;
  Tensor y;
  LayerCache cache;
  ASSERT_TRUE((*layer)->Forward(device, {w, b}, x, ctx, &y, &cache).ok());
  for (int n = 0; n < 2; ++n) {
    for (int o = 0; o < 2; ++o) {
      for (int i = 0; i < 3; ++i) {
        for (int j = 0; j < 3; ++j) {
          double s = bv[o];
          for (int c = 0; c < 2; ++c) {
            for (int ki = 0; ki < 3; ++ki) {
              for (int kj = 0; kj < 3; ++kj) {
                const int yy = i * 2 - 1 + ki, xx = j * 2 - 1 + kj;
                if (yy < 0 || yy >= 5 || xx < 0 || xx >= 5) continue;
                s += double{wv[((o * 2 + c) * 3 + ki) * 3 + kj]} *
                     xv[((n * 2 + c) * 5 + yy) * 5 + xx];
              }
            }
          }
          EXPECT_NEAR(y.f32()[((n * 2 + o) * 3 + i) * 3 + j], s, 1e-5);
        }
      }
    }
  }
}

TEST(LayerSpecTest, ErrorsNameTheField) {
  auto bad =
      CreateLayer(ParseLayer("linear { in_features: 512 out_features: 10 }"), 3,
                  Shape({1024}), 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "model.layers[3].linear.in_features=512 does not match the "
            "previous layer's output 1024");

  auto conv = CreateLayer(
      ParseLayer("conv2d { in_channels: 3 out_channels: 4 kernel_size: 3 }"), 0,
      Shape({1, 28, 28}), 0);
  ASSERT_FALSE(conv.ok());
  EXPECT_NE(conv.status().message().find("conv2d.in_channels=3"),
            std::string::npos)
      << conv.status();

  auto pool = CreateLayer(ParseLayer("max_pool2d { kernel_size: 2 }"), 1,
                          Shape({784}), 0);
  ASSERT_FALSE(pool.ok());
  EXPECT_NE(pool.status().message().find("model.layers[1].max_pool2d"),
            std::string::npos);

  auto drop = CreateLayer(ParseLayer("dropout { p: 1.5 }"), 2, Shape({4}), 0);
  ASSERT_FALSE(drop.ok());
  EXPECT_NE(drop.status().message().find("dropout.p=1.5"), std::string::npos);

  auto none = CreateLayer(LayerSpec(), 4, Shape({4}), 0);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("model.layers[4] has no layer kind"),
            std::string::npos);

  auto big = CreateLayer(ParseLayer("conv2d { in_channels: 1 out_channels: 1 "
                                    "kernel_size: 9 }"),
                         0, Shape({1, 4, 4}), 0);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("larger than the padded input"),
            std::string::npos);
}

TEST(ModelTest, BackwardSkipsUnneededInputGradients) {
  // A first linear layer after flatten needs no input gradient; the range's
  // dx stays undefined unless asked for.
  ModelSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "layers { flatten {} } layers { linear { in_features: 4 out_features: 2 "
      "} }",
      &spec));
  auto model = Model::Build(spec, Shape({2, 2}), 1);
  ASSERT_TRUE(model.ok());
  CpuDevice device;
  auto params = InitParameters(**model, 0, 2, &device);
  ASSERT_TRUE(params.ok());
  EXPECT_EQ(params->names,
            (std::vector<std::string>{"layers.1.weight", "layers.1.bias"}));
  auto grads = ZerosLike(*params, &device);
  Tensor x = *device.Zeros(Shape({3, 2, 2}), DType::kF32);
  PassContext ctx;
  RangeCache cache;
  Tensor y;
  ASSERT_TRUE(ForwardRange(**model, device, *params, x, ctx, &y, &cache).ok());
  EXPECT_EQ(y.shape(), Shape({3, 2}));
  Tensor dy = *device.Zeros(Shape({3, 2}), DType::kF32);
  Tensor dx;
  ASSERT_TRUE(BackwardRange(**model, device, *params, cache, dy, ctx, &dx,
                            *grads, false)
                  .ok());
  EXPECT_EQ(dx.shape(), Shape({3, 2, 2}));
}

}  // namespace
}  // namespace aqueduct
