// Optimizers and the loss against values computed by hand (and, for the
// optimizers, against torch.optim's update rules written out in doubles).
#include "worker/nn/optimizer.h"

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/device/cpu_device.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "pipeline/spec.h"
#include "worker/nn/loss.h"

namespace aqueduct {
namespace {

ParameterSet OneParam(Device& device, std::vector<float> values) {
  ParameterSet set;
  set.end = 1;
  set.names = {"layers.0.weight"};
  Tensor t = *device.Allocate(Shape({static_cast<int64_t>(values.size())}),
                              DType::kF32);
  EXPECT_TRUE(device.CopyFromHost(values.data(), t).ok());
  set.tensors = {t};
  set.offsets = {0, 1};
  return set;
}

void SetValues(Device& device, const ParameterSet& set,
               std::vector<float> values) {
  ASSERT_TRUE(device.CopyFromHost(values.data(), set.tensors[0]).ok());
}

TEST(SgdTest, MomentumAndWeightDecayByHand) {
  CpuDevice device;
  ParameterSet w = OneParam(device, {1.0f, -2.0f});
  ParameterSet g = OneParam(device, {0.5f, 0.25f});
  OptimizerSpec spec;
  spec.mutable_sgd()->set_lr(0.1f);
  spec.mutable_sgd()->set_momentum(0.9f);
  spec.mutable_sgd()->set_weight_decay(0.01f);
  auto opt = CreateOptimizer(spec, w, &device, 100);
  ASSERT_TRUE(opt.ok()) << opt.status();
  // Step 1: d = g + 0.01 w = [0.51, 0.23]; buf = d; w -= 0.1 d.
  ASSERT_TRUE((*opt)->Step(w, g).ok());
  EXPECT_NEAR(w.tensors[0].f32()[0], 1.0 - 0.051, 1e-6);
  EXPECT_NEAR(w.tensors[0].f32()[1], -2.0 - 0.023, 1e-6);
  // Step 2 with g = [1, 1]: d = 1 + 0.01 w; buf = 0.9 buf + d.
  SetValues(device, g, {1.0f, 1.0f});
  ASSERT_TRUE((*opt)->Step(w, g).ok());
  const double w0 = 0.949, w1 = -2.023;
  const double b0 = 0.9 * 0.51 + (1 + 0.01 * w0);
  const double b1 = 0.9 * 0.23 + (1 + 0.01 * w1);
  EXPECT_NEAR(w.tensors[0].f32()[0], w0 - 0.1 * b0, 1e-6);
  EXPECT_NEAR(w.tensors[0].f32()[1], w1 - 0.1 * b1, 1e-6);
  EXPECT_EQ((*opt)->steps(), 2);
  ASSERT_EQ((*opt)->State().size(), 1u);
  EXPECT_NEAR((*opt)->State()[0].second.f32()[0], b0, 1e-6);
}

TEST(SgdTest, NesterovAndDampening) {
  CpuDevice device;
  ParameterSet w = OneParam(device, {1.0f});
  ParameterSet g = OneParam(device, {2.0f});
  OptimizerSpec spec;
  spec.mutable_sgd()->set_lr(0.5f);
  spec.mutable_sgd()->set_momentum(0.5f);
  spec.mutable_sgd()->set_nesterov(true);
  auto opt = CreateOptimizer(spec, w, &device, 100);
  ASSERT_TRUE(opt.ok());
  // buf = 2; update = g + 0.5 buf = 3; w = 1 - 1.5.
  ASSERT_TRUE((*opt)->Step(w, g).ok());
  EXPECT_NEAR(w.tensors[0].f32()[0], -0.5, 1e-6);
  // buf = 0.5*2 + 2 = 3; update = 2 + 1.5 = 3.5; w = -0.5 - 1.75.
  ASSERT_TRUE((*opt)->Step(w, g).ok());
  EXPECT_NEAR(w.tensors[0].f32()[0], -2.25, 1e-6);

  OptimizerSpec damp;
  damp.mutable_sgd()->set_lr(1.0f);
  damp.mutable_sgd()->set_momentum(0.5f);
  damp.mutable_sgd()->set_dampening(0.5f);
  ParameterSet w2 = OneParam(device, {0.0f});
  auto opt2 = CreateOptimizer(damp, w2, &device, 100);
  ASSERT_TRUE(opt2.ok());
  ASSERT_TRUE((*opt2)->Step(w2, g).ok());  // buf = 2 (no damping at first).
  ASSERT_TRUE((*opt2)->Step(w2, g).ok());  // buf = 1 + 0.5*2 = 2.
  EXPECT_NEAR(w2.tensors[0].f32()[0], -4.0, 1e-6);
}

TEST(SgdTest, PlainSgd) {
  CpuDevice device;
  ParameterSet w = OneParam(device, {3.0f});
  ParameterSet g = OneParam(device, {1.0f});
  OptimizerSpec spec;
  spec.mutable_sgd()->set_lr(0.25f);
  auto opt = CreateOptimizer(spec, w, &device, 100);
  ASSERT_TRUE(opt.ok());
  ASSERT_TRUE((*opt)->Step(w, g).ok());
  ASSERT_TRUE((*opt)->Step(w, g).ok());
  EXPECT_FLOAT_EQ(w.tensors[0].f32()[0], 2.5f);
  EXPECT_TRUE((*opt)->State().empty());
}

TEST(AdamTest, TwoStepsByHand) {
  CpuDevice device;
  ParameterSet w = OneParam(device, {1.0f, 0.0f});
  ParameterSet g = OneParam(device, {0.1f, -3.0f});
  OptimizerSpec spec;
  spec.mutable_adam()->set_lr(0.01f);
  spec.mutable_adam()->set_weight_decay(0.1f);
  auto opt = CreateOptimizer(spec, w, &device, 100);
  ASSERT_TRUE(opt.ok()) << opt.status();
  double wv[2] = {1.0, 0.0}, m[2] = {0, 0}, v[2] = {0, 0};
  const double gv[2][2] = {{0.1, -3.0}, {0.5, 0.5}};
  for (int t = 1; t <= 2; ++t) {
    if (t == 2) SetValues(device, g, {0.5f, 0.5f});
    ASSERT_TRUE((*opt)->Step(w, g).ok());
    for (int i = 0; i < 2; ++i) {
      const double grad = gv[t - 1][i] + 0.1 * wv[i];
      m[i] = 0.9 * m[i] + 0.1 * grad;
      v[i] = 0.999 * v[i] + 0.001 * grad * grad;
      const double mhat = m[i] / (1 - std::pow(0.9, t));
      const double vhat = v[i] / (1 - std::pow(0.999, t));
      wv[i] -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
      EXPECT_NEAR(w.tensors[0].f32()[i], wv[i], 1e-6) << "step " << t;
    }
  }
  // First Adam step moves every weight by about lr, whatever the gradient.
  EXPECT_EQ((*opt)->State().size(), 2u);
}

std::vector<float> Ramp(int64_t n, float scale, float offset) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[static_cast<size_t>(i)] = offset + scale * static_cast<float>(i % 97);
  }
  return v;
}

// torch.optim.AdamW: w *= 1 - lr * wd, then Adam's update from the
// gradient alone, three steps against doubles. The third weight has no
// gradient: it only decays (Adam's L2 decay would move it by about lr).
TEST(AdamWTest, ThreeStepsByHand) {
  CpuDevice device;
  ParameterSet w = OneParam(device, {1.0f, -0.5f, 2.0f});
  ParameterSet g = OneParam(device, {0.0f, 0.0f, 0.0f});
  OptimizerSpec spec;
  spec.mutable_adamw()->set_lr(0.01f);
  spec.mutable_adamw()->set_weight_decay(0.1f);
  spec.mutable_adamw()->set_beta1(0.8f);
  auto opt = CreateOptimizer(spec, w, &device, 100);
  ASSERT_TRUE(opt.ok()) << opt.status();
  double wv[3] = {1.0, -0.5, 2.0}, m[3] = {}, v[3] = {};
  const float gv[3][3] = {{0.1f, -3.0f, 0}, {0.5f, 0.5f, 0}, {-2, 1, 0}};
  for (int t = 1; t <= 3; ++t) {
    SetValues(device, g, {gv[t - 1][0], gv[t - 1][1], gv[t - 1][2]});
    ASSERT_TRUE((*opt)->Step(w, g).ok());
    for (int i = 0; i < 3; ++i) {
      wv[i] *= 1 - 0.01 * 0.1;
      m[i] = 0.8 * m[i] + 0.2 * gv[t - 1][i];
      v[i] = 0.999 * v[i] + 0.001 * gv[t - 1][i] * gv[t - 1][i];
      const double mhat = m[i] / (1 - std::pow(0.8, t));
      const double vhat = v[i] / (1 - std::pow(0.999, t));
      wv[i] -= 0.01 * mhat / (std::sqrt(vhat) + 1e-8);
      EXPECT_NEAR(w.tensors[0].f32()[i], wv[i], 1e-6) << "step " << t;
    }
  }
  EXPECT_NEAR(w.tensors[0].f32()[2], 2.0 * std::pow(0.999, 3), 1e-6);
}

// The decay's two forms in AdamStepScales; Adam's keeps the weights' factor
// exactly 1 (its update is what it was before AdamW).
TEST(AdamWTest, StepScalesOfBothForms) {
  AdamParams p;
  p.lr = 0.01f;
  p.weight_decay = 0.1f;
  const AdamScales adam = AdamStepScales(p);
  EXPECT_EQ(adam.grad_decay, 0.1f);
  EXPECT_EQ(adam.keep, 1.0f);
  p.decoupled = true;
  const AdamScales adamw = AdamStepScales(p);
  EXPECT_EQ(adamw.grad_decay, 0.0f);
  EXPECT_EQ(adamw.keep, static_cast<float>(1.0 - double{0.01f} * 0.1f));
  EXPECT_EQ(adamw.step_size, adam.step_size);
  EXPECT_EQ(adamw.inv_sqrt_bc2, adam.inv_sqrt_bc2);
}

// Without weight decay, AdamW and Adam are the same update, bit for bit;
// with it they differ.
TEST(AdamWTest, EqualsAdamWithoutDecay) {
  CpuDevice device;
  for (float decay : {0.0f, 0.05f}) {
    OptimizerSpec adam, adamw;
    adam.mutable_adam()->set_lr(0.02f);
    adam.mutable_adam()->set_weight_decay(decay);
    *adamw.mutable_adamw() = adam.adam();
    ParameterSet a = OneParam(device, Ramp(1037, 0.03f, -1.0f));
    ParameterSet b = OneParam(device, Ramp(1037, 0.03f, -1.0f));
    ParameterSet g = OneParam(device, Ramp(1037, -0.01f, 0.5f));
    auto oa = CreateOptimizer(adam, a, &device, 10);
    auto ob = CreateOptimizer(adamw, b, &device, 10);
    ASSERT_TRUE(oa.ok() && ob.ok());
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE((*oa)->Step(a, g).ok());
      ASSERT_TRUE((*ob)->Step(b, g).ok());
    }
    const bool same = std::memcmp(a.tensors[0].f32(), b.tensors[0].f32(),
                                  1037 * sizeof(float)) == 0;
    EXPECT_EQ(same, decay == 0) << "weight_decay " << decay;
  }
}

// StepFrom writes the update of `from` into `to` and leaves `from` as it
// was, with exactly the values an in-place step gives (SGD with and
// without momentum, Nesterov, Adam and AdamW, two steps each). 1,037 weights
// cover the CPU's streaming stores (chunks of 16) and its scalar tail.
TEST(OptimizerTest, StepFromEqualsInPlaceAndKeepsTheSource) {
  CpuDevice device;
  std::vector<OptimizerSpec> specs(5);
  specs[0].mutable_sgd()->set_lr(0.1f);
  specs[0].mutable_sgd()->set_momentum(0.9f);
  specs[0].mutable_sgd()->set_weight_decay(0.01f);
  specs[1].mutable_adam()->set_lr(0.01f);
  specs[1].mutable_adam()->set_weight_decay(0.1f);
  specs[2].mutable_sgd()->set_lr(0.05f);
  specs[2].mutable_sgd()->set_weight_decay(0.01f);
  specs[3].mutable_sgd()->set_lr(0.1f);
  specs[3].mutable_sgd()->set_momentum(0.8f);
  specs[3].mutable_sgd()->set_nesterov(true);
  specs[4].mutable_adamw()->set_lr(0.01f);
  specs[4].mutable_adamw()->set_weight_decay(0.1f);
  for (const int64_t n : {int64_t{3}, int64_t{1037}}) {
    for (const OptimizerSpec& spec : specs) {
      ParameterSet in_place = OneParam(device, Ramp(n, 0.03f, -1.0f));
      ParameterSet from = OneParam(device, Ramp(n, 0.03f, -1.0f));
      ParameterSet to = OneParam(device, std::vector<float>(n, 0.0f));
      ParameterSet g = OneParam(device, Ramp(n, -0.01f, 0.5f));
      auto a = CreateOptimizer(spec, in_place, &device, 10);
      auto b = CreateOptimizer(spec, from, &device, 10);
      ASSERT_TRUE(a.ok() && b.ok());
      for (int step = 0; step < 2; ++step) {
        const std::vector<float> before(from.tensors[0].f32(),
                                        from.tensors[0].f32() + n);
        ASSERT_TRUE((*a)->Step(in_place, g).ok());
        ASSERT_TRUE((*b)->StepFrom(from, to, g).ok());
        for (int64_t i = 0; i < n; ++i) {
          ASSERT_EQ(to.tensors[0].f32()[i], in_place.tensors[0].f32()[i])
              << spec.DebugString() << " n " << n << " step " << step << " i "
              << i;
        }
        // The source is untouched; the next step starts from the new
        // weights.
        EXPECT_EQ(std::vector<float>(from.tensors[0].f32(),
                                     from.tensors[0].f32() + n),
                  before);
        std::swap(from, to);
        SetValues(device, to, std::vector<float>(n, 0.0f));
      }
    }
  }
}

// The device kernels out of place at every alignment of the destination
// (the streaming stores start after a scalar head up to a 64-byte line).
TEST(OptimizerTest, OutOfPlaceKernelsAtEveryAlignment) {
  CpuDevice device;
  const int64_t n = 301;
  const std::vector<float> w0 = Ramp(n, 0.02f, -0.7f);
  const std::vector<float> g = Ramp(n, -0.015f, 0.3f);
  for (int shift = 0; shift < 16; ++shift) {
    SgdParams sgd{.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f};
    std::vector<float> w_in = w0, buf_in(n, 0.25f);
    device.SgdStep(w_in.data(), g.data(), buf_in.data(), n, sgd);
    std::vector<float> out(n + 16, -9.0f), buf_out(n, 0.25f);
    sgd.source = w0.data();
    device.SgdStep(out.data() + shift, g.data(), buf_out.data(), n, sgd);
    AdamParams adam{.lr = 0.01f, .step = 3};
    std::vector<float> aw_in = w0, m_in(n, 0.1f), v_in(n, 0.2f);
    device.AdamStep(aw_in.data(), g.data(), m_in.data(), v_in.data(), n, adam);
    std::vector<float> aout(n + 16, -9.0f), m_out(n, 0.1f), v_out(n, 0.2f);
    adam.source = w0.data();
    device.AdamStep(aout.data() + shift, g.data(), m_out.data(), v_out.data(),
                    n, adam);
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[shift + i], w_in[i]) << "sgd shift " << shift << " i " << i;
      ASSERT_EQ(buf_out[i], buf_in[i]) << "sgd shift " << shift << " i " << i;
      ASSERT_EQ(aout[shift + i], aw_in[i]) << "adam shift " << shift;
      ASSERT_EQ(m_out[i], m_in[i]) << "adam shift " << shift;
      ASSERT_EQ(v_out[i], v_in[i]) << "adam shift " << shift;
    }
    // Nothing outside [shift, shift + n) was written.
    for (int i = 0; i < shift; ++i) ASSERT_EQ(out[i], -9.0f);
    for (int64_t i = shift + n; i < n + 16; ++i) ASSERT_EQ(out[i], -9.0f);
  }
}

TEST(OptimizerSpecTest, Rejections) {
  OptimizerSpec none;
  EXPECT_EQ(ValidateOptimizerSpec(none).message(),
            "optimizer is not set (set optimizer.sgd, optimizer.adam or "
            "optimizer.adamw)");
  OptimizerSpec neg;
  neg.mutable_sgd()->set_lr(-1);
  EXPECT_EQ(ValidateOptimizerSpec(neg).message(),
            "optimizer.sgd.lr=-1 must be positive and finite");
  OptimizerSpec mom;
  mom.mutable_sgd()->set_lr(0.1f);
  mom.mutable_sgd()->set_momentum(1.5f);
  EXPECT_NE(ValidateOptimizerSpec(mom).message().find("sgd.momentum=1.5"),
            std::string::npos);
  OptimizerSpec beta;
  beta.mutable_adam()->set_lr(0.1f);
  beta.mutable_adam()->set_beta2(1.0f);
  EXPECT_NE(ValidateOptimizerSpec(beta).message().find("adam.beta2=1"),
            std::string::npos);
}

TEST(LossTest, SoftmaxCrossEntropyByHand) {
  CpuDevice device;
  Tensor logits = *device.Allocate(Shape({2, 3}), DType::kF32);
  const float lv[] = {1.0f, 2.0f, 3.0f, 1000.0f, 0.0f, -1000.0f};
  ASSERT_TRUE(device.CopyFromHost(lv, logits).ok());
  Tensor labels = *device.Allocate(Shape({2}), DType::kI32);
  const int32_t yv[] = {2, 1};
  ASSERT_TRUE(device.CopyFromHost(yv, labels).ok());
  auto out = SoftmaxCrossEntropy(device, logits, labels, 0.5f);
  ASSERT_TRUE(out.ok());
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  EXPECT_NEAR(out->losses.f32()[0], std::log(z) - 3.0, 1e-6);
  // Stable for huge logits: log(e^1000 + 1 + e^-1000) - 0 = 1000.
  EXPECT_NEAR(out->losses.f32()[1], 1000.0, 1e-3);
  EXPECT_TRUE(std::isfinite(out->losses.f32()[1]));
  EXPECT_NEAR(out->dlogits.f32()[0], 0.5 * std::exp(1.0) / z, 1e-6);
  EXPECT_NEAR(out->dlogits.f32()[2], 0.5 * (std::exp(3.0) / z - 1), 1e-6);
  EXPECT_NEAR(out->dlogits.f32()[3], 0.5, 1e-6);
  EXPECT_NEAR(out->dlogits.f32()[4], -0.5, 1e-6);

  Tensor wrong = *device.Allocate(Shape({3}), DType::kI32);
  EXPECT_FALSE(SoftmaxCrossEntropy(device, logits, wrong, 1.0f).ok());
}

TEST(LossTest, GradientMatchesFiniteDifferences) {
  CpuDevice device;
  const float lv[] = {0.3f, -1.2f, 2.0f, 0.7f};
  Tensor logits = *device.Allocate(Shape({1, 4}), DType::kF32);
  ASSERT_TRUE(device.CopyFromHost(lv, logits).ok());
  Tensor labels = *device.Allocate(Shape({1}), DType::kI32);
  const int32_t y = 1;
  ASSERT_TRUE(device.CopyFromHost(&y, labels).ok());
  auto out = SoftmaxCrossEntropy(device, logits, labels, 1.0f);
  ASSERT_TRUE(out.ok());
  for (int c = 0; c < 4; ++c) {
    float hi[4], lo[4];
    std::copy(lv, lv + 4, hi);
    std::copy(lv, lv + 4, lo);
    hi[c] += 1e-2f;
    lo[c] -= 1e-2f;
    ASSERT_TRUE(device.CopyFromHost(hi, logits).ok());
    const double lh =
        SoftmaxCrossEntropy(device, logits, labels, 1.0f)->losses.f32()[0];
    ASSERT_TRUE(device.CopyFromHost(lo, logits).ok());
    const double ll =
        SoftmaxCrossEntropy(device, logits, labels, 1.0f)->losses.f32()[0];
    EXPECT_NEAR(out->dlogits.f32()[c], (lh - ll) / 2e-2, 1e-3);
  }
}

}  // namespace
}  // namespace aqueduct

namespace aqueduct {
namespace {

TEST(ScheduleTest, Factors) {
  LrSchedule none;
  EXPECT_EQ(LearningRateFactor(none, 50, 100), 1.0);
  LrSchedule cosine;
  cosine.set_warmup_steps(10);
  cosine.mutable_cosine()->set_final_fraction(0.1f);
  EXPECT_NEAR(LearningRateFactor(cosine, 0, 110), 0.1, 1e-12);
  EXPECT_NEAR(LearningRateFactor(cosine, 9, 110), 1.0, 1e-12);
  EXPECT_NEAR(LearningRateFactor(cosine, 10, 110), 1.0, 1e-12);
  EXPECT_NEAR(LearningRateFactor(cosine, 109, 110), 0.1, 1e-6);
  // Half way through the decay: 0.1 + 0.9 * 0.5.
  EXPECT_NEAR(LearningRateFactor(cosine, 10 + 99 / 2.0, 110), 0.55, 1e-2);
  LrSchedule step;
  step.mutable_step()->set_every_steps(30);
  step.mutable_step()->set_gamma(0.5f);
  EXPECT_EQ(LearningRateFactor(step, 29, 100), 1.0);
  EXPECT_EQ(LearningRateFactor(step, 30, 100), 0.5);
  EXPECT_EQ(LearningRateFactor(step, 95, 100), 0.125);
}

TEST(ScheduleTest, AppliedBySgdAndValidated) {
  CpuDevice device;
  ParameterSet w = OneParam(device, {0.0f});
  ParameterSet g = OneParam(device, {1.0f});
  OptimizerSpec spec;
  spec.mutable_sgd()->set_lr(1.0f);
  spec.mutable_schedule()->set_warmup_steps(4);
  auto opt = CreateOptimizer(spec, w, &device, 10);
  ASSERT_TRUE(opt.ok());
  ASSERT_TRUE((*opt)->Step(w, g).ok());  // lr 0.25
  ASSERT_TRUE((*opt)->Step(w, g).ok());  // lr 0.5
  EXPECT_NEAR(w.tensors[0].f32()[0], -0.75, 1e-6);

  OptimizerSpec bad;
  bad.mutable_sgd()->set_lr(1.0f);
  bad.mutable_schedule()->mutable_step()->set_every_steps(0);
  EXPECT_EQ(ValidateOptimizerSpec(bad).message(),
            "optimizer.schedule.step.every_steps=0 must be positive");
}

// ------------------------------------------------------ Parameter groups

ModelSpec ParseModel(const std::string& text) {
  ModelSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &spec));
  return spec;
}

// A GPT with a tied head, an RMSNorm and a LLaMA block.
constexpr char kMixed[] = R"pb(
  layers { token_embedding { vocab_size: 11 dim: 8 } }
  layers { position_embedding { context: 6 dim: 8 } }
  layers { transformer_block { dim: 8 heads: 2 } }
  layers { rms_norm { dim: 8 } }
  layers { llama_block { dim: 8 heads: 2 hidden: 12 } }
  layers { layer_norm { normalized_shape: 8 } }
  layers {
    linear { in_features: 8 out_features: 11 bias: false }
    tie_weight_to: 0
  }
  layers { linear { in_features: 11 out_features: 3 } }
)pb";

// Every parameter of the built model, by its name, and its kind.
TEST(ParamGroupTest, KindsOfEveryParameter) {
  const ModelSpec spec = ParseModel(kMixed);
  auto model = Model::Build(spec, Shape({6}), 1);
  ASSERT_TRUE(model.ok()) << model.status();
  CpuDevice device;
  auto params = InitParameters(**model, 0, (*model)->num_layers(), &device);
  ASSERT_TRUE(params.ok());
  const std::map<std::string, std::string> want = {
      {"layers.0.weight", "embedding"},
      {"layers.1.weight", "embedding"},
      {"layers.2.ln_1.weight", "norm"},
      {"layers.2.ln_1.bias", "norm"},
      {"layers.2.attn.c_attn.weight", "weight"},
      {"layers.2.attn.c_attn.bias", "bias"},
      {"layers.2.attn.c_proj.weight", "weight"},
      {"layers.2.attn.c_proj.bias", "bias"},
      {"layers.2.ln_2.weight", "norm"},
      {"layers.2.ln_2.bias", "norm"},
      {"layers.2.mlp.c_fc.weight", "weight"},
      {"layers.2.mlp.c_fc.bias", "bias"},
      {"layers.2.mlp.c_proj.weight", "weight"},
      {"layers.2.mlp.c_proj.bias", "bias"},
      {"layers.3.weight", "norm"},
      {"layers.4.input_layernorm.weight", "norm"},
      {"layers.4.self_attn.q_proj.weight", "weight"},
      {"layers.4.self_attn.k_proj.weight", "weight"},
      {"layers.4.self_attn.v_proj.weight", "weight"},
      {"layers.4.self_attn.o_proj.weight", "weight"},
      {"layers.4.post_attention_layernorm.weight", "norm"},
      {"layers.4.mlp.gate_proj.weight", "weight"},
      {"layers.4.mlp.up_proj.weight", "weight"},
      {"layers.4.mlp.down_proj.weight", "weight"},
      {"layers.5.weight", "norm"},
      {"layers.5.bias", "norm"},
      {"layers.6.weight", "embedding"},  // tied to the token embedding
      {"layers.7.weight", "weight"},
      {"layers.7.bias", "bias"}};
  std::map<std::string, std::string> got;
  for (const std::string& name : params->names) {
    got[name] = ParamKindOf(spec, name);
  }
  EXPECT_EQ(got, want);
}

// A model's parameters with random values, and zero gradients.
struct Trainable {
  ModelSpec spec;
  std::unique_ptr<Model> model;
  ParameterSet params, grads;
};

Trainable SmallModel(Device& device) {
  Trainable t;
  t.spec = ParseModel(
      "layers { token_embedding { vocab_size: 5 dim: 4 } } "
      "layers { layer_norm { normalized_shape: 4 } } "
      "layers { linear { in_features: 4 out_features: 3 } }");
  t.model = std::move(*Model::Build(t.spec, Shape({2}), 1));
  t.params = *InitParameters(*t.model, 0, 3, &device);
  t.grads = *ZerosLike(t.params, &device);
  for (size_t i = 0; i < t.params.size(); ++i) {
    const Tensor& p = t.params.tensors[i];
    const std::vector<float> v = Ramp(p.numel(), 0.1f, 0.5f + i);
    EXPECT_TRUE(device.CopyFromHost(v.data(), p).ok());
  }
  return t;
}

std::vector<float> Values(const Tensor& t) {
  return std::vector<float>(t.f32(), t.f32() + t.numel());
}

// With zero gradients an AdamW step only decays: by 1 - lr * wd for the
// weights, and not at all for the group of weight_decay 0 (nanoGPT's
// grouping), while without groups every tensor decays.
TEST(ParamGroupTest, ZeroDecayGroupIsNotDecayed) {
  CpuDevice device;
  for (bool grouped : {true, false}) {
    Trainable t = SmallModel(device);
    OptimizerSpec spec;
    spec.mutable_adamw()->set_lr(0.1f);
    spec.mutable_adamw()->set_weight_decay(0.5f);
    if (grouped) {
      ParamGroup* g = spec.add_param_groups();
      for (const char* kind : {"bias", "norm", "embedding"}) g->add_kinds(kind);
      g->set_weight_decay(0);
    }
    auto opt = CreateOptimizer(spec, t.params, &device, 10, &t.spec);
    ASSERT_TRUE(opt.ok()) << opt.status();
    std::vector<std::vector<float>> before;
    for (const Tensor& p : t.params.tensors) before.push_back(Values(p));
    ASSERT_TRUE((*opt)->Step(t.params, t.grads).ok());
    const float keep = static_cast<float>(1.0 - double{0.1f} * 0.5f);
    for (size_t i = 0; i < before.size(); ++i) {
      const bool decays =
          !grouped || ParamKindOf(t.spec, t.params.names[i]) == "weight";
      for (size_t k = 0; k < before[i].size(); ++k) {
        ASSERT_EQ(t.params.tensors[i].f32()[k],
                  decays ? before[i][k] * keep : before[i][k])
            << t.params.names[i] << "[" << k << "]";
      }
    }
  }
}

// lr_scale multiplies a group's learning rate; a parameter takes the first
// group naming its kind. SGD, gradient 1: w -= lr * scale * (1 + wd w).
TEST(ParamGroupTest, LrScaleAndTheFirstMatchingGroup) {
  CpuDevice device;
  Trainable t = SmallModel(device);
  for (const Tensor& g : t.grads.tensors) device.Fill(g.f32(), g.numel(), 1);
  OptimizerSpec spec;
  spec.mutable_sgd()->set_lr(0.5f);
  ParamGroup* first = spec.add_param_groups();
  first->add_kinds("bias");
  first->set_lr_scale(0.25f);
  ParamGroup* second = spec.add_param_groups();
  second->add_kinds("bias");
  second->add_kinds("weight");
  second->set_lr_scale(2.0f);
  second->set_weight_decay(0.1f);
  auto opt = CreateOptimizer(spec, t.params, &device, 10, &t.spec);
  ASSERT_TRUE(opt.ok()) << opt.status();
  std::vector<std::vector<float>> before;
  for (const Tensor& p : t.params.tensors) before.push_back(Values(p));
  ASSERT_TRUE((*opt)->Step(t.params, t.grads).ok());
  for (size_t i = 0; i < before.size(); ++i) {
    const std::string kind = ParamKindOf(t.spec, t.params.names[i]);
    const double scale = kind == "bias" ? 0.25 : kind == "weight" ? 2 : 1;
    const double wd = kind == "weight" ? 0.1 : 0;
    for (size_t k = 0; k < before[i].size(); ++k) {
      const double w = before[i][k];
      EXPECT_NEAR(t.params.tensors[i].f32()[k], w - 0.5 * scale * (1 + wd * w),
                  1e-6)
          << t.params.names[i];
    }
  }
}

// AdamW's decay follows the group's learning rate: keep = 1 - lr * scale *
// wd (torch's param_groups, each with its own lr).
TEST(ParamGroupTest, LrScaleScalesTheDecoupledDecay) {
  CpuDevice device;
  Trainable t = SmallModel(device);
  OptimizerSpec spec;
  spec.mutable_adamw()->set_lr(0.1f);
  spec.mutable_adamw()->set_weight_decay(0.5f);
  ParamGroup* g = spec.add_param_groups();
  g->add_kinds("weight");
  g->set_lr_scale(0.5f);
  auto opt = CreateOptimizer(spec, t.params, &device, 10, &t.spec);
  ASSERT_TRUE(opt.ok()) << opt.status();
  const std::vector<float> before = Values(t.params.tensors[3]);  // 2.weight
  ASSERT_EQ(t.params.names[3], "layers.2.weight");
  ASSERT_TRUE((*opt)->Step(t.params, t.grads).ok());
  const float keep = static_cast<float>(1.0 - double{0.1f} * 0.5 * 0.5f);
  for (size_t k = 0; k < before.size(); ++k) {
    EXPECT_EQ(t.params.tensors[3].f32()[k], before[k] * keep) << k;
  }
}

TEST(ParamGroupTest, GroupsNeedTheModel) {
  CpuDevice device;
  ParameterSet w = OneParam(device, {1.0f});
  OptimizerSpec spec;
  spec.mutable_adamw()->set_lr(0.1f);
  spec.add_param_groups()->add_kinds("bias");
  auto opt = CreateOptimizer(spec, w, &device, 10);
  ASSERT_FALSE(opt.ok());
  EXPECT_EQ(opt.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(opt.status().message().find("optimizer.param_groups"),
            std::string::npos);
}

}  // namespace
}  // namespace aqueduct
