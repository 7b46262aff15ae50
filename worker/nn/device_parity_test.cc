// Every layer (forward and backward), the loss and the optimizers on a second
// device against the CPU device, within fp32 tolerance. The second device is
// cuda:0 (AQ_PARITY_DEVICE overrides). The tests skip, saying why, only
// where no GPU exists (CUDA finds no device or no driver; in a CPU-only
// build, the kernel shows no NVIDIA GPU); any other failure to create the
// device (a bad AQ_PARITY_DEVICE, a GPU this build cannot use, a CUDA
// error) fails them. With AQ_PARITY_DEVICE=cpu the suite runs CPU against
// CPU, which checks the harness itself.

#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/device/factory.h"
#include "common/device/no_gpu.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "worker/nn/layer.h"
#include "worker/nn/loss.h"
#include "worker/nn/model.h"
#include "worker/nn/optimizer.h"

namespace aqueduct {
namespace {

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

class DeviceParity {
 public:
  // Creates both devices. Where no GPU exists, `skip_reason` says so; on any
  // other failure, `error` says what failed.
  DeviceParity() {
    const char* env = std::getenv("AQ_PARITY_DEVICE");
    const std::string text = env != nullptr ? env : "cuda:0";
    auto spec = ParseDeviceSpec(text);
    if (!spec.ok()) {
      error = "AQ_PARITY_DEVICE: " + std::string(spec.status().message());
      return;
    }
    auto other = CreateDevice(*spec, 1);
    if (!other.ok()) {
      const std::string none = NoGpuHere(other.status());
      if (none.empty()) {
        error = text + " could not be created: " +
                std::string(other.status().message());
      } else {
        skip_reason = "no GPU (" + none + "); device parity not checked";
      }
      return;
    }
    other_ = std::move(*other);
    cpu_ = *CreateDevice(DeviceSpec{}, 1);
  }
  std::string error;
  std::string skip_reason;
  Device& cpu() { return *cpu_; }
  Device& other() { return *other_; }

  static Tensor Upload(Device& d, const std::vector<float>& v,
                       const Shape& shape) {
    Tensor t = *d.Allocate(shape, DType::kF32);
    EXPECT_TRUE(d.CopyFromHost(v.data(), t).ok());
    return t;
  }
  static std::vector<float> Download(Device& d, const Tensor& t) {
    std::vector<float> v(t.numel());
    EXPECT_TRUE(d.Synchronize().ok());
    EXPECT_TRUE(d.CopyToHost(t, v.data()).ok());
    return v;
  }
  void ExpectSame(const Tensor& on_cpu, const Tensor& on_other,
                  const std::string& what, float tol = 1e-4f) {
    ASSERT_EQ(on_cpu.shape(), on_other.shape()) << what;
    const std::vector<float> a = Download(cpu(), on_cpu);
    const std::vector<float> b = Download(other(), on_other);
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_NEAR(b[i], a[i], tol * (1.0f + std::fabs(a[i])))
          << what << ", element " << i;
    }
  }

 private:
  std::unique_ptr<Device> cpu_, other_;
};

struct LayerCase {
  const char* name;
  const char* spec;
  std::vector<int64_t> sample;
};

class LayerParityTest : public ::testing::TestWithParam<LayerCase> {};

TEST_P(LayerParityTest, ForwardAndBackwardMatchCpu) {
  DeviceParity p;
  if (!p.error.empty()) FAIL() << p.error;
  if (!p.skip_reason.empty()) GTEST_SKIP() << p.skip_reason;
  const LayerCase& c = GetParam();
  LayerSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(c.spec, &spec));
  const Shape sample(c.sample);
  auto layer = CreateLayer(spec, 0, sample, 42);
  ASSERT_TRUE(layer.ok()) << layer.status();
  const int64_t batch = 8;
  const Shape in_shape = sample.WithLeading(batch);
  const Shape out_shape = (*layer)->output_shape().WithLeading(batch);
  const std::vector<float> x = Random(in_shape.numel(), 1);
  const std::vector<float> dy = Random(out_shape.numel(), 2);

  struct Side {
    std::vector<Tensor> params, grads;
    Tensor y, dx;
  };
  auto run = [&](Device& d, Side* s) {
    uint32_t seed = 10;
    for (const ParamSpec& ps : (*layer)->Params()) {
      s->params.push_back(
          DeviceParity::Upload(d, Random(ps.shape.numel(), seed++), ps.shape));
      s->grads.push_back(*d.Zeros(ps.shape, DType::kF32));
    }
    PassContext ctx;
    ctx.minibatch = 5;
    LayerCache cache;
    Tensor xt = DeviceParity::Upload(d, x, in_shape);
    ASSERT_TRUE((*layer)->Forward(d, s->params, xt, ctx, &s->y, &cache).ok());
    Tensor dyt = DeviceParity::Upload(d, dy, out_shape);
    ASSERT_TRUE(
        (*layer)
            ->Backward(d, s->params, cache, dyt, ctx, &s->dx, s->grads, false)
            .ok());
  };
  Side on_cpu, on_other;
  run(p.cpu(), &on_cpu);
  run(p.other(), &on_other);
  p.ExpectSame(on_cpu.y, on_other.y, std::string(c.name) + " forward");
  p.ExpectSame(on_cpu.dx, on_other.dx, std::string(c.name) + " input grad");
  for (size_t i = 0; i < on_cpu.grads.size(); ++i) {
    p.ExpectSame(on_cpu.grads[i], on_other.grads[i],
                 std::string(c.name) + " param grad " + std::to_string(i));
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllLayers, LayerParityTest,
    ::testing::Values(
        LayerCase{"linear", "linear { in_features: 12 out_features: 7 }", {12}},
        LayerCase{"relu", "relu {}", {20}}, LayerCase{"gelu", "gelu {}", {20}},
        LayerCase{"dropout", "dropout { p: 0.3 }", {40}},
        LayerCase{"flatten", "flatten {}", {2, 3, 4}},
        LayerCase{"conv2d",
                  "conv2d { in_channels: 2 out_channels: 3 kernel_size: 3 "
                  "stride: 1 padding: 1 }",
                  {2, 7, 6}},
        LayerCase{
            "maxpool2d", "max_pool2d { kernel_size: 2 stride: 2 }", {3, 8, 6}},
        LayerCase{"layernorm", "layer_norm { normalized_shape: 16 }", {16}},
        LayerCase{"position_embedding",
                  "position_embedding { context: 16 dim: 16 }",
                  {12, 16}},
        LayerCase{"causal_self_attention",
                  "causal_self_attention { dim: 16 heads: 4 dropout: 0.2 }",
                  {12, 16}},
        LayerCase{"causal_self_attention_long",
                  "causal_self_attention { dim: 32 heads: 2 bias: false }",
                  {70, 32}},
        LayerCase{"transformer_block",
                  "transformer_block { dim: 16 heads: 2 dropout: 0.2 }",
                  {12, 16}},
        LayerCase{"rms_norm", "rms_norm { dim: 16 }", {12, 16}},
        LayerCase{"llama_block_gqa",
                  "llama_block { dim: 16 heads: 4 kv_heads: 2 hidden: 40 }",
                  {12, 16}},
        LayerCase{"llama_block_long",
                  "llama_block { dim: 32 heads: 2 hidden: 64 rope_theta: 500 }",
                  {70, 32}}),
    [](const ::testing::TestParamInfo<LayerCase>& info) {
      return std::string(info.param.name);
    });

// Token ids as input (the other layers take random floats), repeated so
// that rows sum into the same table row (atomically on a GPU).
TEST(TokenEmbeddingParityTest, ForwardAndBackwardMatchCpu) {
  DeviceParity p;
  if (!p.error.empty()) FAIL() << p.error;
  if (!p.skip_reason.empty()) GTEST_SKIP() << p.skip_reason;
  LayerSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "token_embedding { vocab_size: 50 dim: 24 }", &spec));
  auto layer = CreateLayer(spec, 0, Shape({10}), 42);
  ASSERT_TRUE(layer.ok()) << layer.status();
  const int64_t batch = 8;
  std::vector<float> ids(batch * 10);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<float>((i * 7) % 50);
  }
  const std::vector<float> dy = Random(batch * 10 * 24, 2);
  auto run = [&](Device& d, Tensor* y, Tensor* grad) {
    const Tensor table =
        DeviceParity::Upload(d, Random(50 * 24, 10), Shape({50, 24}));
    *grad = *d.Zeros(Shape({50, 24}), DType::kF32);
    PassContext ctx;
    LayerCache cache;
    Tensor x = DeviceParity::Upload(d, ids, Shape({batch, 10}));
    ASSERT_TRUE((*layer)->Forward(d, {table}, x, ctx, y, &cache).ok());
    Tensor dyt = DeviceParity::Upload(d, dy, Shape({batch, 10, 24}));
    ASSERT_TRUE(
        (*layer)
            ->Backward(d, {table}, cache, dyt, ctx, nullptr, {*grad}, true)
            .ok());
  };
  Tensor y_cpu, g_cpu, y_other, g_other;
  run(p.cpu(), &y_cpu, &g_cpu);
  run(p.other(), &y_other, &g_other);
  p.ExpectSame(y_cpu, y_other, "token_embedding forward");
  p.ExpectSame(g_cpu, g_other, "token_embedding weight grad");
}

TEST(LossParityTest, SoftmaxCrossEntropyMatchesCpu) {
  DeviceParity p;
  if (!p.error.empty()) FAIL() << p.error;
  if (!p.skip_reason.empty()) GTEST_SKIP() << p.skip_reason;
  const int64_t rows = 32, classes = 10;
  const std::vector<float> logits = Random(rows * classes, 3);
  std::vector<int32_t> labels(rows);
  for (int64_t r = 0; r < rows; ++r) labels[r] = static_cast<int32_t>(r % 10);
  auto run = [&](Device& d) {
    Tensor l = DeviceParity::Upload(d, logits, Shape({rows, classes}));
    Tensor y = *d.Allocate(Shape({rows}), DType::kI32);
    EXPECT_TRUE(d.CopyFromHost(labels.data(), y).ok());
    return SoftmaxCrossEntropy(d, l, y, 1.0f / rows);
  };
  auto a = run(p.cpu());
  auto b = run(p.other());
  ASSERT_TRUE(a.ok() && b.ok());
  p.ExpectSame(a->losses, b->losses, "losses");
  p.ExpectSame(a->dlogits, b->dlogits, "dlogits");
}

class OptimizerParityTest : public ::testing::TestWithParam<const char*> {};

TEST_P(OptimizerParityTest, ThreeStepsMatchCpu) {
  DeviceParity p;
  if (!p.error.empty()) FAIL() << p.error;
  if (!p.skip_reason.empty()) GTEST_SKIP() << p.skip_reason;
  OptimizerSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(GetParam(), &spec));
  const int64_t n = 1000;
  auto run = [&](Device& d) {
    ParameterSet w, g;
    w.end = g.end = 1;
    w.names = g.names = {"layers.0.weight"};
    w.offsets = g.offsets = {0, 1};
    w.tensors = {DeviceParity::Upload(d, Random(n, 4), Shape({n}))};
    g.tensors = {DeviceParity::Upload(d, Random(n, 5), Shape({n}))};
    auto opt = CreateOptimizer(spec, w, &d, 10);
    EXPECT_TRUE(opt.ok()) << opt.status();
    for (int step = 0; step < 3; ++step) {
      EXPECT_TRUE((*opt)->Step(w, g).ok());
    }
    return w.tensors[0];
  };
  Tensor a = run(p.cpu());
  Tensor b = run(p.other());
  p.ExpectSame(a, b, GetParam());
}

INSTANTIATE_TEST_SUITE_P(
    SgdAndAdam, OptimizerParityTest,
    ::testing::Values("sgd { lr: 0.1 momentum: 0.9 weight_decay: 0.0001 "
                      "nesterov: true }",
                      "adam { lr: 0.001 weight_decay: 0.01 }",
                      "adamw { lr: 0.001 weight_decay: 0.1 }"));

}  // namespace
}  // namespace aqueduct
