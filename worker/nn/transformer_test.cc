// The GPT layers (transformer.h) and their device kernels on the CPU: every
// gradient against finite differences of L = sum(r * forward(x)) for a fixed
// random r (a fourth-order central difference in fp32), causality, dropout
// masks that do not depend on how a minibatch is split, and accumulation.
#include "worker/nn/transformer.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/device/cpu_device.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "pipeline/shapes.h"
#include "worker/nn/layer.h"
#include "worker/nn/model.h"
#include "worker/nn/test_util.h"

namespace aqueduct {
namespace {

// A layer on the CPU device with host-side inputs and parameters.
class Harness {
 public:
  Harness(const std::string& layer_text, Shape sample, int index = 0)
      : sample_(std::move(sample)) {
    auto layer = CreateLayer(ParseLayer(layer_text), index, sample_, 42);
    EXPECT_TRUE(layer.ok()) << layer.status();
    if (layer.ok()) layer_ = std::move(*layer);
  }

  const Layer& layer() const { return *layer_; }
  CpuDevice& device() { return device_; }

  // Random parameters in [-scale, scale].
  std::vector<std::vector<float>> RandomParams(std::mt19937* rng,
                                               float scale = 0.5f) const {
    std::vector<std::vector<float>> params;
    for (const ParamSpec& p : layer_->Params()) {
      params.push_back(Random(p.shape.numel(), rng, -scale, scale));
    }
    return params;
  }

  Tensor Upload(const std::vector<float>& v, const Shape& shape) {
    Tensor t = *device_.Allocate(shape, DType::kF32);
    EXPECT_TRUE(device_.CopyFromHost(v.data(), t).ok());
    return t;
  }
  std::vector<Tensor> UploadParams(
      const std::vector<std::vector<float>>& params) {
    std::vector<Tensor> out;
    const std::vector<ParamSpec> specs = layer_->Params();
    for (size_t i = 0; i < params.size(); ++i) {
      out.push_back(Upload(params[i], specs[i].shape));
    }
    return out;
  }
  std::vector<Tensor> ZeroGrads() {
    std::vector<Tensor> out;
    for (const ParamSpec& p : layer_->Params()) {
      out.push_back(*device_.Zeros(p.shape, DType::kF32));
    }
    return out;
  }
  static std::vector<double> Download(const Tensor& t) {
    return std::vector<double>(t.f32(), t.f32() + t.numel());
  }

  // y = layer(x) for a batch of `x.size() / sample numel` samples.
  std::vector<double> Forward(const std::vector<std::vector<float>>& params,
                              const std::vector<float>& x,
                              const PassContext& ctx,
                              LayerCache* cache = nullptr) {
    LayerCache local;
    Tensor y;
    EXPECT_TRUE(layer_
                    ->Forward(device_, UploadParams(params),
                              Upload(x, BatchShape(x)), ctx, &y,
                              cache != nullptr ? cache : &local)
                    .ok());
    return Download(y);
  }

  Shape BatchShape(const std::vector<float>& x) const {
    return sample_.WithLeading(static_cast<int64_t>(x.size()) /
                               sample_.numel());
  }

 private:
  CpuDevice device_;
  Shape sample_;
  std::unique_ptr<Layer> layer_;
};

// Backward against finite differences, for the input (unless the input is
// token ids) and every parameter, then accumulation.
class GradCheck {
 public:
  GradCheck(const std::string& layer_text, Shape sample, int64_t batch)
      : h_(layer_text, sample), batch_(batch), sample_(std::move(sample)) {}

  void SetInput(std::vector<float> x) { x_ = std::move(x); }
  void SkipInputGradient() { check_dx_ = false; }

  void Run(double tolerance = 1e-3) {
    std::mt19937 rng(7);
    const Shape in_shape = sample_.WithLeading(batch_);
    const Shape out_shape = h_.layer().output_shape().WithLeading(batch_);
    if (x_.empty()) x_ = Random(in_shape.numel(), &rng);
    r_ = Random(out_shape.numel(), &rng);
    params_ = h_.RandomParams(&rng);

    std::vector<Tensor> grads = h_.ZeroGrads();
    Tensor dx;
    Backward(grads, &dx, /*accumulate=*/false);
    ASSERT_EQ(dx.shape(), in_shape);
    if (check_dx_) {
      std::vector<double> numeric(x_.size());
      for (size_t i = 0; i < x_.size(); ++i) numeric[i] = Numeric(&x_, i);
      EXPECT_LT(RelativeError(Harness::Download(dx), numeric), tolerance)
          << h_.layer().kind() << " input gradient";
    }
    const std::vector<ParamSpec> specs = h_.layer().Params();
    for (size_t p = 0; p < params_.size(); ++p) {
      const std::vector<double> analytic = Harness::Download(grads[p]);
      std::vector<double> numeric(params_[p].size());
      for (size_t i = 0; i < params_[p].size(); ++i) {
        numeric[i] = Numeric(&params_[p], i);
      }
      EXPECT_LT(RelativeError(analytic, numeric), tolerance)
          << h_.layer().kind() << " gradient of " << specs[p].name;
      double norm = 0;
      for (double g : analytic) norm += std::abs(g);
      EXPECT_GT(norm, 0.0) << specs[p].name << ": degenerate test";
    }
    // Accumulation adds to what is there.
    std::vector<std::vector<double>> once;
    for (const Tensor& g : grads) once.push_back(Harness::Download(g));
    Backward(grads, nullptr, /*accumulate=*/true);
    for (size_t p = 0; p < grads.size(); ++p) {
      const std::vector<double> twice = Harness::Download(grads[p]);
      for (size_t i = 0; i < twice.size(); ++i) {
        ASSERT_NEAR(twice[i], 2 * once[p][i], 1e-5 * (1 + std::abs(once[p][i])))
            << specs[p].name << "[" << i << "]";
      }
    }
  }

 private:
  void Backward(const std::vector<Tensor>& grads, Tensor* dx, bool accumulate) {
    PassContext ctx;
    ctx.minibatch = 3;
    std::vector<Tensor> params = h_.UploadParams(params_);
    Tensor x = h_.Upload(x_, sample_.WithLeading(batch_));
    Tensor y;
    LayerCache cache;
    ASSERT_TRUE(
        h_.layer().Forward(h_.device(), params, x, ctx, &y, &cache).ok());
    Tensor dy = h_.Upload(r_, y.shape());
    ASSERT_TRUE(h_.layer()
                    .Backward(h_.device(), params, cache, dy, ctx, dx, grads,
                              accumulate)
                    .ok());
  }

  double Loss() {
    PassContext ctx;
    ctx.minibatch = 3;
    const std::vector<double> y = h_.Forward(params_, x_, ctx);
    double l = 0;
    for (size_t i = 0; i < y.size(); ++i) l += double{r_[i]} * y[i];
    return l;
  }

  // dL/d(*v)[i], fourth-order central difference.
  double Numeric(std::vector<float>* v, size_t i) {
    const float saved = (*v)[i];
    auto at = [&](float step) {
      (*v)[i] = saved + step;
      return Loss();
    };
    const float e = 1e-2f;
    const double d1 = at(e) - at(-e), d2 = at(2 * e) - at(-2 * e);
    (*v)[i] = saved;
    return (8 * d1 - d2) / (12.0 * e);
  }

  Harness h_;
  int64_t batch_;
  Shape sample_;
  bool check_dx_ = true;
  std::vector<float> x_, r_;
  std::vector<std::vector<float>> params_;
};

constexpr char kBlock[] = "transformer_block { dim: 8 heads: 2 }";
constexpr char kAttention[] = "causal_self_attention { dim: 8 heads: 2 }";

TEST(TransformerGradTest, TokenEmbedding) {
  GradCheck check("token_embedding { vocab_size: 6 dim: 4 }", Shape({5}), 2);
  // Every id in the vocabulary, some repeated (their rows sum).
  check.SetInput({0, 1, 2, 3, 4, 5, 1, 1, 3, 0});
  check.SkipInputGradient();
  check.Run();
}

TEST(TransformerGradTest, PositionEmbeddingShorterThanContext) {
  GradCheck("position_embedding { context: 7 dim: 8 }", Shape({5, 8}), 2).Run();
}

TEST(TransformerGradTest, CausalSelfAttention) {
  GradCheck(kAttention, Shape({5, 8}), 2).Run();
}

TEST(TransformerGradTest, CausalSelfAttentionWithoutBiasFourHeads) {
  GradCheck("causal_self_attention { dim: 8 heads: 4 bias: false }",
            Shape({6, 8}), 3)
      .Run();
}

TEST(TransformerGradTest, TransformerBlock) {
  GradCheck(kBlock, Shape({5, 8}), 2).Run();
}

TEST(TransformerGradTest, TransformerBlockWithoutBiasNarrowMlp) {
  GradCheck(
      "transformer_block { dim: 8 heads: 2 bias: false mlp_hidden: 12 "
      "eps: 1e-6 }",
      Shape({4, 8}), 3)
      .Run();
}

// GPT-2's MLP activation, GELU's tanh approximation.
TEST(TransformerGradTest, TransformerBlockGeluTanh) {
  GradCheck(
      "transformer_block { dim: 8 heads: 2 mlp_hidden: 12 "
      "activation: \"gelu_tanh\" }",
      Shape({5, 8}), 2)
      .Run();
}

// The activation is the block's: the two GELUs give outputs close (the
// approximation is within 1e-3 of the exact curve) but not equal.
TEST(TransformerTest, BlockActivationIsUsed) {
  Harness exact("transformer_block { dim: 8 heads: 2 }", Shape({5, 8}));
  Harness tanh(
      "transformer_block { dim: 8 heads: 2 activation: \"gelu_tanh\" }",
      Shape({5, 8}));
  std::mt19937 rng(3);
  const auto params = exact.RandomParams(&rng, 1.0f);
  const std::vector<float> x = Random(2 * 5 * 8, &rng, -2, 2);
  PassContext ctx;
  const std::vector<double> a = exact.Forward(params, x, ctx);
  const std::vector<double> b = tanh.Forward(params, x, ctx);
  double max = 0;
  for (size_t i = 0; i < a.size(); ++i)
    max = std::max(max, std::abs(a[i] - b[i]));
  EXPECT_GT(max, 1e-6);
  EXPECT_LT(max, 5e-2);
}

TEST(TransformerTest, UnknownActivationIsRefusedNamingTheField) {
  const absl::StatusOr<SymbolicShape> bad = InferLayerShape(
      ParseLayer("transformer_block { dim: 8 heads: 2 activation: \"relu\" }"),
      3, SymbolicShape::Known({5, 8}));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(
                "model.layers[3].transformer_block.activation=\"relu\""),
            std::string::npos)
      << bad.status();
  for (const char* ok : {"", "gelu", "gelu_tanh"}) {
    EXPECT_TRUE(InferLayerShape(ParseLayer(absl::StrCat(
                                    "transformer_block { dim: 8 heads: 2 "
                                    "activation: \"",
                                    ok, "\" }")),
                                0, SymbolicShape::Known({5, 8}))
                    .ok())
        << ok;
  }
}

TEST(TransformerGradTest, SinglePositionSingleHead) {
  GradCheck("transformer_block { dim: 4 heads: 1 }", Shape({1, 4}), 2).Run();
}

// Changing position t of sample 0 changes no output before t, and nothing
// of sample 1.
void ExpectCausal(const std::string& text) {
  const int64_t t = 6, c = 8;
  Harness h(text, Shape({t, c}));
  std::mt19937 rng(5);
  const auto params = h.RandomParams(&rng);
  const std::vector<float> x = Random(2 * t * c, &rng);
  PassContext ctx;
  const std::vector<double> y = h.Forward(params, x, ctx);
  for (int64_t changed = 1; changed < t; ++changed) {
    std::vector<float> x2 = x;
    for (int64_t k = changed * c; k < t * c; ++k) x2[k] += 0.5f;
    const std::vector<double> y2 = h.Forward(params, x2, ctx);
    for (int64_t i = 0; i < 2 * t * c; ++i) {
      const bool may_change = i < t * c && i >= changed * c;
      if (may_change) continue;
      ASSERT_NEAR(y2[i], y[i], 1e-6)
          << text << ": position " << i / c << " saw position " << changed;
    }
    EXPECT_GT(std::abs(y2[changed * c] - y[changed * c]), 1e-4);
  }
}

TEST(TransformerTest, AttentionIsCausal) { ExpectCausal(kAttention); }

TEST(TransformerTest, BlockIsCausal) { ExpectCausal(kBlock); }

// One minibatch of 4 at once, and as microbatches [0, 1) and [1, 4) with
// their sample offsets: the same outputs, input gradients and (accumulated)
// parameter gradients, so a pipeline draws the masks one process does.
void ExpectMicrobatchesMatch(const std::string& text) {
  const int64_t t = 5, c = 8, per = t * c;
  Harness h(text, Shape({t, c}));
  std::mt19937 rng(9);
  const auto params = h.RandomParams(&rng);
  const std::vector<float> x = Random(4 * per, &rng);
  const std::vector<float> dy = Random(4 * per, &rng);
  std::vector<Tensor> p = h.UploadParams(params);

  struct Result {
    std::vector<double> y, dx;
    std::vector<Tensor> grads;
  };
  auto run = [&](std::vector<std::pair<int64_t, int64_t>> parts) {
    Result r;
    r.grads = h.ZeroGrads();
    for (size_t i = 0; i < parts.size(); ++i) {
      const auto [begin, end] = parts[i];
      PassContext ctx;
      ctx.minibatch = 11;
      ctx.sample_offset = static_cast<uint64_t>(begin);
      const std::vector<float> xs(x.begin() + begin * per,
                                  x.begin() + end * per);
      const std::vector<float> dys(dy.begin() + begin * per,
                                   dy.begin() + end * per);
      LayerCache cache;
      Tensor y, dx;
      EXPECT_TRUE(h.layer()
                      .Forward(h.device(), p, h.Upload(xs, h.BatchShape(xs)),
                               ctx, &y, &cache)
                      .ok());
      EXPECT_TRUE(h.layer()
                      .Backward(h.device(), p, cache,
                                h.Upload(dys, h.BatchShape(dys)), ctx, &dx,
                                r.grads, i > 0)
                      .ok());
      for (double v : Harness::Download(y)) r.y.push_back(v);
      for (double v : Harness::Download(dx)) r.dx.push_back(v);
    }
    return r;
  };
  const Result whole = run({{0, 4}});
  const Result split = run({{0, 1}, {1, 4}});
  ASSERT_EQ(whole.y.size(), split.y.size());
  for (size_t i = 0; i < whole.y.size(); ++i) {
    ASSERT_NEAR(split.y[i], whole.y[i], 1e-5) << "output " << i;
    ASSERT_NEAR(split.dx[i], whole.dx[i], 1e-5) << "input gradient " << i;
  }
  for (size_t g = 0; g < whole.grads.size(); ++g) {
    const std::vector<double> a = Harness::Download(whole.grads[g]);
    const std::vector<double> b = Harness::Download(split.grads[g]);
    EXPECT_LT(RelativeError(a, b), 1e-5) << h.layer().Params()[g].name;
  }
  // Dropout is on: the training output differs from evaluation's.
  PassContext eval;
  eval.training = false;
  const std::vector<double> y_eval = h.Forward(params, x, eval);
  int same = 0;
  for (size_t i = 0; i < y_eval.size(); ++i) {
    same += std::abs(y_eval[i] - whole.y[i]) > 1e-6 ? 0 : 1;
  }
  EXPECT_LT(same, static_cast<int>(y_eval.size()) / 2) << "dropout inactive";
}

TEST(TransformerTest, AttentionDropoutIgnoresMicrobatching) {
  ExpectMicrobatchesMatch(
      "causal_self_attention { dim: 8 heads: 2 dropout: 0.3 }");
}

TEST(TransformerTest, BlockDropoutIgnoresMicrobatching) {
  ExpectMicrobatchesMatch("transformer_block { dim: 8 heads: 2 dropout: 0.3 }");
}

TEST(TransformerTest, EvaluationIgnoresDropoutAndKeepsNothing) {
  const int64_t t = 4, c = 8;
  Harness with("transformer_block { dim: 8 heads: 2 dropout: 0.5 }",
               Shape({t, c}));
  Harness without(kBlock, Shape({t, c}));
  std::mt19937 rng(2);
  const auto params = with.RandomParams(&rng);
  const std::vector<float> x = Random(3 * t * c, &rng);
  PassContext eval;
  eval.training = false;
  PassContext train;
  LayerCache cache;
  const std::vector<double> a = with.Forward(params, x, eval, &cache);
  EXPECT_TRUE(cache.tensors.empty());
  const std::vector<double> b = without.Forward(params, x, train);
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
}

TEST(TransformerTest, BlockParametersAndInitialisation) {
  Harness h("transformer_block { dim: 64 heads: 4 }", Shape({8, 64}), 3);
  std::vector<std::string> names;
  for (const ParamSpec& p : h.layer().Params()) names.push_back(p.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{
                "ln_1.weight", "ln_1.bias", "attn.c_attn.weight",
                "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
                "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                "mlp.c_proj.weight", "mlp.c_proj.bias"}));
  EXPECT_EQ(h.layer().Params()[8].shape, Shape({256, 64}));
  EXPECT_EQ(h.layer().Params()[10].shape, Shape({64, 256}));
  Harness no_bias("transformer_block { dim: 64 heads: 4 bias: false }",
                  Shape({8, 64}));
  std::vector<std::string> no_bias_names;
  for (const ParamSpec& p : no_bias.layer().Params()) {
    no_bias_names.push_back(p.name);
  }
  EXPECT_EQ(no_bias_names, (std::vector<std::string>{
                               "ln_1.weight", "ln_1.bias", "attn.c_attn.weight",
                               "attn.c_proj.weight", "ln_2.weight", "ln_2.bias",
                               "mlp.c_fc.weight", "mlp.c_proj.weight"}));

  auto init = [&](uint64_t seed) {
    std::vector<std::vector<float>> v;
    for (const ParamSpec& p : h.layer().Params())
      v.emplace_back(p.shape.numel());
    h.layer().InitParams(seed, &v);
    return v;
  };
  const auto v = init(5);
  EXPECT_EQ(v, init(5));
  EXPECT_NE(v[2], init(6)[2]);
  EXPECT_EQ(v[0], std::vector<float>(64, 1.0f));   // ln_1.weight
  EXPECT_EQ(v[3], std::vector<float>(192, 0.0f));  // attn.c_attn.bias
  for (int p : {2, 4, 8, 10}) {
    double sum = 0, sq = 0;
    for (float w : v[p]) {
      sum += w;
      sq += double{w} * w;
    }
    const double n = static_cast<double>(v[p].size());
    EXPECT_NEAR(sum / n, 0.0, 0.002) << names[p];
    EXPECT_NEAR(std::sqrt(sq / n), 0.02, 0.001) << names[p];
  }
  EXPECT_NE(v[2][0], v[4][0]) << "each parameter draws its own values";
}

TEST(TransformerTest, PositionEmbeddingTakesFewerPositionsNeverMore) {
  CpuDevice device;
  auto layer =
      CreateLayer(ParseLayer("position_embedding { context: 4 dim: 2 }"), 1,
                  Shape({4, 2}), 0);
  ASSERT_TRUE(layer.ok()) << layer.status();
  const std::vector<float> w = {1, 2, 3, 4, 5, 6, 7, 8};
  Tensor wt = *device.Allocate(Shape({4, 2}), DType::kF32);
  ASSERT_TRUE(device.CopyFromHost(w.data(), wt).ok());
  Tensor x = *device.Zeros(Shape({2, 3, 2}), DType::kF32);
  Tensor y;
  PassContext ctx;
  ASSERT_TRUE((*layer)->Forward(device, {wt}, x, ctx, &y, nullptr).ok());
  EXPECT_EQ(std::vector<float>(y.f32(), y.f32() + 12),
            (std::vector<float>{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(x.f32()[0], 0.0f) << "the input is left as it was";
  Tensor longer = *device.Zeros(Shape({1, 5, 2}), DType::kF32);
  const absl::Status status =
      (*layer)->Forward(device, {wt}, longer, ctx, &y, nullptr);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

TEST(TransformerTest, FlopsPerSample) {
  Harness attn("causal_self_attention { dim: 64 heads: 4 }", Shape({16, 64}));
  const double t = 16, c = 64;
  EXPECT_DOUBLE_EQ(attn.layer().ForwardFlopsPerSample(),
                   2 * t * 4 * c * c + 2 * t * t * c);
  Harness block("transformer_block { dim: 64 heads: 4 mlp_hidden: 100 }",
                Shape({16, 64}));
  EXPECT_DOUBLE_EQ(block.layer().ForwardFlopsPerSample(),
                   2 * t * 4 * c * c + 2 * t * t * c + 2 * t * 2 * c * 100);
}

TEST(TransformerTest, SmallGptTrainsThroughTheModel) {
  ModelSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "layers { token_embedding { vocab_size: 11 dim: 8 } } "
      "layers { position_embedding { context: 6 dim: 8 } } "
      "layers { transformer_block { dim: 8 heads: 2 dropout: 0.1 } } "
      "layers { transformer_block { dim: 8 heads: 2 dropout: 0.1 } } "
      "layers { layer_norm { normalized_shape: 8 } } "
      "layers { linear { in_features: 8 out_features: 11 bias: false } }",
      &spec));
  auto model = Model::Build(spec, Shape({6}), 1);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ((*model)->output_shape(), Shape({6, 11}));
  CpuDevice device;
  auto params = InitParameters(**model, 0, 6, &device);
  ASSERT_TRUE(params.ok());
  EXPECT_EQ(params->names[0], "layers.0.weight");
  EXPECT_EQ(params->names[4], "layers.2.attn.c_attn.weight");
  auto grads = ZerosLike(*params, &device);
  ASSERT_TRUE(grads.ok());
  std::vector<float> ids(2 * 6);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<float>(i % 11);
  Tensor x = *device.Allocate(Shape({2, 6}), DType::kF32);
  ASSERT_TRUE(device.CopyFromHost(ids.data(), x).ok());
  PassContext ctx;
  RangeCache cache;
  Tensor y;
  ASSERT_TRUE(ForwardRange(**model, device, *params, x, ctx, &y, &cache).ok());
  EXPECT_EQ(y.shape(), Shape({2, 6, 11}));
  Tensor dy = *device.Allocate(y.shape(), DType::kF32);
  device.Fill(dy.f32(), dy.numel(), 0.01f);
  ASSERT_TRUE(BackwardRange(**model, device, *params, cache, dy, ctx, nullptr,
                            *grads, false)
                  .ok());
  double norm = 0;
  const Tensor& wte_grad = grads->tensors[0];
  for (int64_t i = 0; i < wte_grad.numel(); ++i) {
    norm += std::abs(wte_grad.f32()[i]);
  }
  EXPECT_GT(norm, 0.0) << "the gradient reaches the token embedding";
}

// Steady-state training steps of a block allocate nothing new: every
// buffer (QKV, attention weights, MLP hidden, gradients) comes back from the
// device's caching allocator after the first step.
TEST(TransformerTest, StepsAfterTheFirstAllocateNothingNew) {
  ModelSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "layers { token_embedding { vocab_size: 16 dim: 32 } } "
      "layers { position_embedding { context: 16 dim: 32 } } "
      "layers { transformer_block { dim: 32 heads: 4 dropout: 0.1 } } "
      "layers { layer_norm { normalized_shape: 32 } } "
      "layers { linear { in_features: 32 out_features: 16 bias: false } }",
      &spec));
  auto model = Model::Build(spec, Shape({16}), 1);
  ASSERT_TRUE(model.ok()) << model.status();
  CpuDevice device;
  auto params = InitParameters(**model, 0, 5, &device);
  auto grads = ZerosLike(*params, &device);
  ASSERT_TRUE(params.ok() && grads.ok());
  std::vector<float> ids(4 * 16);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<float>(i % 16);
  auto step = [&](int m) {
    Tensor x = *device.Allocate(Shape({4, 16}), DType::kF32);
    ASSERT_TRUE(device.CopyFromHost(ids.data(), x).ok());
    PassContext ctx;
    ctx.minibatch = static_cast<uint64_t>(m);
    RangeCache cache;
    Tensor y;
    ASSERT_TRUE(
        ForwardRange(**model, device, *params, x, ctx, &y, &cache).ok());
    Tensor dy = *device.Allocate(y.shape(), DType::kF32);
    device.Fill(dy.f32(), dy.numel(), 0.01f);
    ASSERT_TRUE(BackwardRange(**model, device, *params, cache, dy, ctx, nullptr,
                              *grads, false)
                    .ok());
  };
  step(0);
  const int64_t raw = device.allocator_stats().raw_allocs;
  for (int m = 1; m < 5; ++m) step(m);
  EXPECT_EQ(device.allocator_stats().raw_allocs, raw);
  EXPECT_GT(device.allocator_stats().hits, 0);
}

// ---------------------------------------------------------------- Kernels

TEST(TransformerKernelTest, CausalSoftmaxAndBackward) {
  CpuDevice device;
  const int64_t count = 3, t = 5;
  const float scale = 0.7f;
  std::mt19937 rng(4);
  std::vector<float> s = Random(count * t * t, &rng, -3, 3);
  const std::vector<float> dp = Random(count * t * t, &rng);
  Tensor st = *device.Allocate(Shape({count, t, t}), DType::kF32);
  ASSERT_TRUE(device.CopyFromHost(s.data(), st).ok());
  // Garbage above the diagonal is never read.
  for (int64_t m = 0; m < count; ++m) st.f32()[m * t * t + 1] = NAN;
  device.CausalSoftmax(st.f32(), count, t, scale);
  Tensor dt = *device.Allocate(Shape({count, t, t}), DType::kF32);
  ASSERT_TRUE(device.CopyFromHost(dp.data(), dt).ok());
  device.CausalSoftmaxBackward(st.f32(), dt.f32(), count, t, scale);
  for (int64_t m = 0; m < count; ++m) {
    for (int64_t i = 0; i < t; ++i) {
      const int64_t row = (m * t + i) * t;
      double max = -1e30, sum = 0, dot = 0;
      for (int64_t j = 0; j <= i; ++j) max = std::max(max, double{s[row + j]});
      for (int64_t j = 0; j <= i; ++j)
        sum += std::exp(scale * (s[row + j] - max));
      std::vector<double> p(t, 0.0);
      for (int64_t j = 0; j <= i; ++j) {
        p[j] = std::exp(scale * (s[row + j] - max)) / sum;
        dot += p[j] * dp[row + j];
      }
      for (int64_t j = 0; j < t; ++j) {
        EXPECT_NEAR(st.f32()[row + j], p[j], 1e-6) << m << "," << i << "," << j;
        const double ds = j <= i ? scale * p[j] * (dp[row + j] - dot) : 0.0;
        EXPECT_NEAR(dt.f32()[row + j], ds, 1e-6) << m << "," << i << "," << j;
      }
    }
  }
}

// GeluTanh against the formula in double, GeluTanhBackward against its
// derivative by finite differences of the formula; in place too.
TEST(TransformerKernelTest, GeluTanhAndBackward) {
  CpuDevice device;
  std::mt19937 rng(8);
  std::vector<float> x = Random(257, &rng, -6, 6);
  x[0] = 0.0f;
  x[1] = -20.0f;
  x[2] = 20.0f;
  const std::vector<float> dy = Random(x.size(), &rng);
  auto f = [](double v) {
    return 0.5 * v *
           (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
  };
  std::vector<float> y(x.size()), dx(x.size());
  device.GeluTanh(x.data(), y.data(), static_cast<int64_t>(x.size()));
  device.GeluTanhBackward(x.data(), dy.data(), dx.data(),
                          static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i], h = 1e-4;
    EXPECT_NEAR(y[i], f(v), 1e-6 * (1 + std::abs(v))) << v;
    const double slope = (f(v + h) - f(v - h)) / (2 * h);
    EXPECT_NEAR(dx[i], dy[i] * slope, 1e-5) << v;
  }
  std::vector<float> in_place = x, grad_in_place = dy;
  device.GeluTanh(in_place.data(), in_place.data(),
                  static_cast<int64_t>(x.size()));
  device.GeluTanhBackward(x.data(), grad_in_place.data(), grad_in_place.data(),
                          static_cast<int64_t>(x.size()));
  EXPECT_EQ(in_place, y);
  EXPECT_EQ(grad_in_place, dx);
}

TEST(TransformerKernelTest, GemmStridedBatchedOverViews) {
  // Per batch b: C_b[3, 2] = A_b^T B_b with A_b a [4, 3] view (row stride 5)
  // and B_b [4, 2] (row stride 2), C_b with row stride 3.
  CpuDevice device;
  const int64_t batch = 3, m = 3, n = 2, k = 4;
  const int64_t lda = 5, sa = 21, ldb = 2, sb = 8, ldc = 3, sc = 10;
  std::mt19937 rng(6);
  const std::vector<float> a = Random(batch * sa, &rng);
  const std::vector<float> b = Random(batch * sb, &rng);
  std::vector<float> c(batch * sc, 7.0f);
  device.GemmStridedBatched(true, false, m, n, k, 2.0f, a.data(), lda, sa,
                            b.data(), ldb, sb, 0.0f, c.data(), ldc, sc, batch);
  for (int64_t i = 0; i < batch; ++i) {
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t col = 0; col < ldc; ++col) {
        const float got = c[i * sc + r * ldc + col];
        if (col >= n) {
          EXPECT_EQ(got, 7.0f) << "outside the view";
          continue;
        }
        double want = 0;
        for (int64_t q = 0; q < k; ++q) {
          want += 2.0 * a[i * sa + q * lda + r] * b[i * sb + q * ldb + col];
        }
        EXPECT_NEAR(got, want, 1e-5);
      }
    }
  }
}

TEST(TransformerKernelTest, EmbeddingIdsOutOfRangeReadZerosAndAddNothing) {
  CpuDevice device;
  const std::vector<float> table = {1, 2, 3, 4, 5, 6};  // [3, 2]
  const std::vector<float> ids = {2, -1, 3, NAN, 0, 2};
  std::vector<float> y(12, 9.0f);
  device.EmbeddingForward(ids.data(), table.data(), 3, 6, 2, y.data());
  EXPECT_EQ(y, (std::vector<float>{5, 6, 0, 0, 0, 0, 0, 0, 1, 2, 5, 6}));
  std::vector<float> dtable(6, 1.0f);
  const std::vector<float> dy = {1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6};
  device.EmbeddingBackward(ids.data(), dy.data(), 3, 6, 2, dtable.data());
  EXPECT_EQ(dtable, (std::vector<float>{6, 6, 1, 1, 8, 8}));
}

}  // namespace
}  // namespace aqueduct
