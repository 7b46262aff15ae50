// Validation that cannot overflow (issue 14): the overflow-safe helpers,
// the memory estimates, and every spec that once crashed a worker, now
// refused by CheckJobSpec with the field and the numbers; and a spec with
// every field at its limit, still accepted.
#include "pipeline/limits.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "pipeline/memory.h"
#include "pipeline/spec.h"

namespace aqueduct {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
constexpr int64_t k2To62 = int64_t{1} << 62;

TEST(LimitsTest, CheckedArithmeticRefusesOverflow) {
  EXPECT_EQ(CheckedMul(3, 4), 12);
  EXPECT_EQ(CheckedMul(-3, 4), -12);
  EXPECT_EQ(CheckedMul(int64_t{1} << 31, int64_t{1} << 31), k2To62);
  EXPECT_FALSE(CheckedMul(int64_t{1} << 32, int64_t{1} << 31).has_value());
  EXPECT_FALSE(CheckedMul(kMax, 2).has_value());
  EXPECT_FALSE(CheckedMul(kMin, -1).has_value());
  EXPECT_EQ(CheckedMul(kMax, 1), kMax);
  EXPECT_EQ(CheckedAdd(kMax - 1, 1), kMax);
  EXPECT_FALSE(CheckedAdd(kMax, 1).has_value());
  EXPECT_FALSE(CheckedAdd(kMin, -1).has_value());
}

TEST(LimitsTest, SaturatingArithmeticSticksAtTheTop) {
  EXPECT_EQ(SaturatingMul(1000000, 1000000), 1000000000000);
  EXPECT_EQ(SaturatingMul(k2To62, 2), kSaturated);
  EXPECT_EQ(SaturatingMul(kSaturated, 1), kSaturated);
  EXPECT_EQ(SaturatingMul(-5, 7), 0);  // A size is never negative.
  EXPECT_EQ(SaturatingAdd(kSaturated, 1), kSaturated);
  EXPECT_EQ(SaturatingAdd(k2To62, k2To62), kSaturated);
  EXPECT_EQ(SaturatingAdd(-1, 5), 5);
  EXPECT_EQ(SaturatingProduct({}), 1);
  EXPECT_EQ(SaturatingProduct({2, 3, 4}), 24);
  // Each factor fits; the product does not (it would wrap to 0).
  EXPECT_EQ(SaturatingProduct({int64_t{1} << 32, int64_t{1} << 32}),
            kSaturated);
}

TEST(LimitsTest, FormatBytes) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(999), "999 B");
  EXPECT_EQ(FormatBytes(1000), "1.0 kB");
  EXPECT_EQ(FormatBytes(17179869184), "17.2 GB");
  EXPECT_EQ(FormatBytes(4000004000000), "4.0 TB");
  EXPECT_EQ(FormatBytes(999999999), "1.0 GB");
  EXPECT_EQ(FormatBytes(kSaturated), "more than 9.2 EB");
}

TEST(LimitsTest, RangeChecksNameTheFieldAndRefuseNan) {
  EXPECT_TRUE(CheckInRange("f", 5, 0, 5).ok());
  EXPECT_EQ(CheckInRange("f", 6, 0, 5).message(), "f=6 must be in [0, 5]");
  EXPECT_EQ(CheckAtMost("g", 7, 6).message(), "g=7 must be at most 6");
  EXPECT_TRUE(CheckFiniteInRange("h", 0.5, 0, 1).ok());
  EXPECT_EQ(CheckFiniteInRange("h", std::nan(""), 0, 1).message(),
            "h=nan must be finite and in [0, 1]");
  EXPECT_FALSE(CheckFiniteInRange("h", INFINITY, 0, INFINITY).ok());
}

TEST(LimitsTest, MemoryLimitDefaultsWhenUnknown) {
  EXPECT_EQ(KnownOrDefault({}).bytes, kDefaultMemoryBytes);
  EXPECT_EQ(Describe({16000000000, "this worker's memory"}),
            "this worker's memory (16.0 GB)");
  EXPECT_GT(HostMemoryBytes(), 0);
}

JobSpec Parse(const std::string& text) {
  auto spec = ParseJobSpec(text, "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

// A small valid job over synthetic data, with `extra` appended.
JobSpec Small(const std::string& extra = "") {
  return Parse(
      "model { layers { linear { in_features: 8 out_features: 4 } } } "
      "data { synthetic { sample_shape: [8] num_classes: 4 "
      "train_samples: 64 test_samples: 16 } } "
      "optimizer { sgd { lr: 0.1 } } batch_size: 16 " +
      extra);
}

std::string Error(const JobSpec& spec, const MemoryLimit& memory = {}) {
  auto summary = CheckJobSpec(spec, memory);
  EXPECT_FALSE(summary.ok());
  if (summary.ok()) return "";
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(summary.status().message());
}

TEST(MemoryTest, EstimatesCountParametersAndSavedActivations) {
  LayerSpec linear;
  linear.mutable_linear()->set_in_features(784);
  linear.mutable_linear()->set_out_features(1024);
  const LayerFootprint f = EstimateLayer(linear, SymbolicShape::Known({784}),
                                         SymbolicShape::Known({1024}));
  EXPECT_EQ(f.parameters, 784 * 1024 + 1024);
  EXPECT_EQ(f.activations_per_sample, 784);  // Its input, kept.
  // A block of nanoGPT's CPU configuration over 64 positions.
  LayerSpec block;
  block.mutable_transformer_block()->set_dim(128);
  block.mutable_transformer_block()->set_heads(4);
  const SymbolicShape x = SymbolicShape::Known({64, 128});
  const LayerFootprint b = EstimateLayer(block, x, x);
  EXPECT_EQ(b.parameters, 198272);  // nanoGPT's count for n_embd=128.
  // x, x2, q/k/v, merged: 6 x [64, 128]; attention [4, 64, 64]; MLP
  // hidden [64, 512].
  EXPECT_EQ(b.activations_per_sample, 6 * 64 * 128 + 4 * 64 * 64 + 64 * 512);
  // Unknown shapes count nothing (a lower bound).
  EXPECT_EQ(
      EstimateLayer(block, SymbolicShape::Unknown(), SymbolicShape::Unknown())
          .activations_per_sample,
      0);
  // Two linear layers of 100 parameters, 10 floats kept per sample each, SGD
  // with momentum (3 copies), microbatches of 2: 1200 + 80 (+ logits).
  std::vector<LayerFootprint> layers = {{100, 10}, {100, 10}};
  const StageFootprint stage = EstimateStage(layers, 0, 2, 3, 2);
  EXPECT_EQ(stage.parameter_bytes, 2400);
  EXPECT_EQ(stage.activation_bytes, 160);
  EXPECT_EQ(stage.total_bytes, 2560);
  EXPECT_EQ(MinimumStages(layers, 3, 2, 2560), 1);
  EXPECT_EQ(MinimumStages(layers, 3, 2, 2559), 2);
}

TEST(MemoryTest, PerStepAndSyntheticBytes) {
  EXPECT_EQ(PerStepBytes(false, 1), 8);
  EXPECT_EQ(PerStepBytes(true, 1), 5 * 24);
  EXPECT_EQ(PerStepBytes(true, 4), 17 * 24);
  SyntheticData s;
  s.add_sample_shape(8);
  s.set_num_classes(4);
  // 80 samples x 8 floats, 80 labels, a 4 x 8 teacher.
  EXPECT_EQ(SyntheticDataBytes(s, 64, 16), 80 * 8 * 4 + 80 * 4 + 4 * 8 * 4);
  EXPECT_EQ(SyntheticDataBytes(s, k2To62, k2To62), kSaturated);
}

// ---- Every input of issue 14 that crashed a worker ----

TEST(RegressionTest, MaxSteps2To62) {
  EXPECT_EQ(Error(Small(absl::StrCat("max_steps: ", k2To62))),
            "max_steps=4611686018427387904 must be at most 1000000000");
}

TEST(RegressionTest, SyntheticTestSamples2To62) {
  JobSpec spec = Small("epochs: 1");
  spec.mutable_data()->mutable_synthetic()->set_test_samples(k2To62);
  EXPECT_EQ(Error(spec),
            "data.synthetic.test_samples=4611686018427387904 must be at "
            "most 1099511627776");
  // Counts in range whose product with the sample is too large.
  spec.mutable_data()->mutable_synthetic()->set_test_samples(kMaxSamples);
  EXPECT_EQ(Error(spec),
            "data.synthetic: (train_samples=64 + test_samples=1099511627776) "
            "x 8 floats per sample = 8796093022720 floats exceeds 2^32 "
            "floats");
}

TEST(RegressionTest, SyntheticTeacherIsBounded) {
  JobSpec spec = Small("max_steps: 3");
  SyntheticData* s = spec.mutable_data()->mutable_synthetic();
  s->clear_sample_shape();
  s->add_sample_shape(int64_t{1} << 30);
  s->set_train_samples(1);
  s->set_num_classes(1000);
  EXPECT_EQ(Error(spec),
            "data.synthetic: the teacher [num_classes, sample] = [1000, "
            "1073741824] holds 1073741824000 floats, more than 2^32 floats");
}

TEST(RegressionTest, TeraParameterLinearNamesTheFieldAndTheBytes) {
  JobSpec spec = Parse(
      "model { layers { linear { in_features: 1000000 out_features: 1000000 "
      "} } } data { synthetic { sample_shape: [1000000] num_classes: 4 "
      "train_samples: 64 } } optimizer { sgd { lr: 0.1 } } batch_size: 16 "
      "max_steps: 2");
  EXPECT_EQ(Error(spec),
            "model.layers[0].linear: the weight [out_features, in_features] = "
            "[1000000, 1000000] has 1000000000000 parameters (4.0 TB), more "
            "than one tensor may hold (4294967296 floats, 17.2 GB)");
}

TEST(RegressionTest, MicrobatchesMinusOne) {
  EXPECT_EQ(Error(Small("max_steps: 3 pipeline { workers: 2 schedule: "
                        "\"1f1b_flush\" microbatches: -1 }")),
            "pipeline.microbatches=-1 must not be negative");
  EXPECT_EQ(Error(Small("max_steps: 3 pipeline { microbatches: 131072 }")),
            "pipeline.microbatches=131072 must be at most 65536");
}

TEST(RegressionTest, NonFiniteFloatsAreRefused) {
  EXPECT_EQ(Error(Small("max_steps: 3 pipeline { bandwidth_bytes_per_s: nan "
                        "}")),
            "pipeline.bandwidth_bytes_per_s=nan must be positive and finite "
            "(0: the default 1e9)");
  EXPECT_EQ(Error(Small("max_steps: 3 pipeline { bandwidth_bytes_per_s: inf "
                        "}")),
            "pipeline.bandwidth_bytes_per_s=inf must be positive and finite "
            "(0: the default 1e9)");
  EXPECT_EQ(Error(Small("max_steps: 3 pipeline { bandwidth_bytes_per_s: "
                        "1e300 }")),
            "pipeline.bandwidth_bytes_per_s=1e+300 must be at most 1e+15 (1 "
            "PB/s)");
  JobSpec spec = Small("max_steps: 3");
  spec.mutable_data()->set_mean(NAN);
  EXPECT_EQ(Error(spec), "data.mean=nan must be finite and in [-1e+06, 1e+06]");
  spec = Small("max_steps: 3");
  spec.mutable_data()->set_std(INFINITY);
  EXPECT_EQ(Error(spec), "data.std=inf must be finite and in [1e-12, 1e+06]");
  spec = Small("max_steps: 3");
  spec.mutable_optimizer()->mutable_sgd()->set_lr(NAN);
  EXPECT_EQ(Error(spec), "optimizer.sgd.lr=nan must be positive and finite");
  spec = Small("max_steps: 3");
  spec.mutable_optimizer()->mutable_sgd()->set_lr(1e6);
  EXPECT_EQ(Error(spec), "optimizer.sgd.lr=1e+06 must be at most 1000");
  spec = Small("max_steps: 3");
  spec.mutable_optimizer()->mutable_sgd()->set_momentum(NAN);
  EXPECT_EQ(Error(spec), "optimizer.sgd.momentum=nan must be in [0, 1)");
  spec = Parse(
      "model { layers { linear { in_features: 8 out_features: 4 } } "
      "} data { synthetic { sample_shape: [8] num_classes: 4 "
      "train_samples: 64 } } optimizer { adam { lr: 0.1 eps: inf } "
      "} batch_size: 16 max_steps: 3");
  EXPECT_EQ(Error(spec), "optimizer.adam.eps=inf must be positive (at most 1)");
  spec = Small("max_steps: 3");
  spec.mutable_model()->add_layers()->mutable_dropout()->set_p(NAN);
  EXPECT_EQ(Error(spec), "model.layers[1].dropout.p=nan must be in [0, 1)");
}

// A GPT over text (files not opened): context 8, `block` the one
// transformer block, `extra` appended to the spec.
JobSpec Gpt(const std::string& block, const std::string& extra = "",
            int64_t vocab = 256, int64_t context = 8) {
  return Parse(absl::StrCat(
      "model { layers { token_embedding { vocab_size: ", vocab,
      " dim: 64 } } layers { position_embedding { context: ", context,
      " dim: 64 } } ", block,
      " layers { linear { in_features: 64 out_features: ", vocab,
      " } } } data { text { files: \"/nonexistent/t.txt\" context: ", context,
      " tokenizer: \"bytes\" } } optimizer { adam { lr: 0.001 } } "
      "batch_size: 8 max_steps: 3 ",
      extra));
}

TEST(RegressionTest, HugeHeadsVocabAndContext) {
  EXPECT_EQ(Error(Gpt("layers { transformer_block { dim: 64 heads: "
                      "9223372036854775807 } }")),
            "model.layers[2].transformer_block.heads=9223372036854775807 "
            "must be at most 4096");
  EXPECT_EQ(Error(Gpt("layers { transformer_block { dim: 64 heads: 4 } }", "",
                      int64_t{1} << 40)),
            "model.layers[0].token_embedding.vocab_size=1099511627776 must be "
            "in [1, 16777216] (token ids travel as floats)");
  EXPECT_EQ(Error(Gpt("layers { transformer_block { dim: 64 heads: 4 } }", "",
                      256, k2To62)),
            "data.text.context=4611686018427387904 must be in [1, 1048576]");
  // Every field in range, but the attention weights of one sample of 2^20
  // positions would hold 2^42 floats.
  EXPECT_EQ(Error(Gpt("layers { transformer_block { dim: 64 heads: 4 } }", "",
                      256, kMaxContext)),
            "model.layers[2].transformer_block: a sample's activations over "
            "1048576 positions with 4 heads (the attention weights are "
            "[heads, T, T]) exceeds 2^32 floats");
}

// ---- Sizes against the memory of the device ----

TEST(MemoryCheckTest, ALayerLargerThanTheWorkerNamesItAndTheNumbers) {
  // [16384, 16384] (1 GiB of weights) with Adam: 4 copies, 4.3 GB.
  JobSpec spec = Parse(
      "model { layers { linear { in_features: 16384 out_features: 16384 } } "
      "} data { synthetic { sample_shape: [16384] num_classes: 4 "
      "train_samples: 64 } } optimizer { adam { lr: 0.001 } } batch_size: 16 "
      "max_steps: 2");
  EXPECT_TRUE(CheckJobSpec(spec).ok());
  EXPECT_EQ(Error(spec, {2000000000, "the largest registered worker's memory"}),
            "model.layers[0].linear needs at least 4.3 GB: 268451840 "
            "parameters with their gradients and optimizer state (4.3 GB) "
            "and the activations of a microbatch of 16 samples (2.1 MB), "
            "more than the largest registered worker's memory (2.0 GB)");
}

TEST(MemoryCheckTest, AModelNeedingMoreWorkersThanItAsksFor) {
  // Four layers of 64 MiB of weights, SGD without momentum (2 copies):
  // 134.5 MB each, 538.2 MB in all; workers of 300 MB hold two each.
  std::string layers;
  for (int i = 0; i < 4; ++i) {
    layers +=
        "layers { linear { in_features: 4096 out_features: 4096 "
        "bias: false } } ";
  }
  JobSpec spec = Parse(
      "model { " + layers +
      "} data { synthetic { sample_shape: [4096] num_classes: 4 "
      "train_samples: 64 } } optimizer { sgd { lr: 0.1 } } batch_size: 16 "
      "max_steps: 2 pipeline { workers: 1 }");
  const MemoryLimit worker{300000000, "the largest registered worker's memory"};
  EXPECT_EQ(Error(spec, worker),
            "the model needs at least 538.2 MB: 67108864 parameters with their "
            "gradients and optimizer state (536.9 MB) and the activations of a "
            "microbatch of 16 samples (1.3 MB); that takes at least 2 workers "
            "of the largest registered worker's memory (300.0 MB), and "
            "pipeline.workers=1");
}

TEST(MemoryCheckTest, SyntheticDataAndStepsAreCounted) {
  JobSpec data = Small("max_steps: 3");
  data.mutable_data()->mutable_synthetic()->set_train_samples(100000000);
  EXPECT_EQ(Error(data, {1000000000, "this worker's memory"}),
            "data.synthetic: 100000000 training and 16 test samples of [8] "
            "floats and a teacher for num_classes=4 need 3.6 GB on each "
            "worker that loads them, more than this worker's memory (1.0 GB)");
  // A pipeline keeps every operation of its schedule: 120 bytes a step.
  JobSpec steps = Small("max_steps: 100000000 pipeline { workers: 2 }");
  EXPECT_EQ(Error(steps, {8000000000,
                          "the largest registered worker's "
                          "memory"}),
            "max_steps=100000000: 100000000 steps at 120 bytes each (the "
            "operations of each stage's schedule) need 12.0 GB, more than "
            "the largest registered worker's memory (8.0 GB)");
  // Steps from epochs over synthetic data.
  JobSpec epochs = Small("epochs: 1000000");
  epochs.mutable_data()->mutable_synthetic()->set_train_samples(1600000);
  EXPECT_NE(Error(epochs, {8000000000, "w"})
                .find("epochs=1000000: 100000000000 steps"),
            std::string::npos);
}

TEST(MemoryCheckTest, EveryFieldAtItsLimitIsAccepted) {
  // Counts at their maxima that hold nothing large by themselves.
  JobSpec spec = Small();
  spec.set_batch_size(kMaxBatchSize);
  spec.set_epochs(kMaxEpochs);
  spec.set_max_steps(kMaxSteps);
  spec.set_eval_every(kMaxSteps);
  SyntheticData* s = spec.mutable_data()->mutable_synthetic();
  s->set_train_samples(kMaxTensorFloats / 8 - 16);
  s->set_num_classes(4);
  spec.mutable_data()->set_train_limit(kMaxSamples);
  spec.mutable_data()->set_test_limit(kMaxSamples);
  spec.mutable_data()->set_mean(1e6);
  spec.mutable_data()->set_std(1e6);
  spec.mutable_optimizer()->mutable_sgd()->set_lr(1000);
  spec.mutable_optimizer()->mutable_schedule()->set_warmup_steps(kMaxSteps);
  v1::CheckpointSpec* c = spec.mutable_checkpoint();
  c->set_dir("/ckpt");
  c->set_every_steps(kMaxSteps);
  c->set_keep_last(kMaxCheckpointsKept);
  c->set_every_seconds(1e7);
  spec.mutable_fault_tolerance()->set_max_restarts(1000);
  v1::PipelineSpec* p = spec.mutable_pipeline();
  p->set_workers(kMaxJobWorkers);
  p->set_wait_for_workers_ms(kMaxWaitForWorkersMs);
  p->set_bandwidth_bytes_per_s(kMaxBandwidthBytesPerS);
  p->set_microbatches(kMaxMicrobatches);  // Divides 2^24; ignored unsplit.
  auto ok = CheckJobSpec(spec);
  EXPECT_TRUE(ok.ok()) << ok.status();
  // Split into the most microbatches, for fewer steps.
  p->set_schedule("1f1b_flush");
  spec.set_max_steps(1000);
  ok = CheckJobSpec(spec);
  EXPECT_TRUE(ok.ok()) << ok.status();
  // Layers at their widths' limits (weights under 2^32 floats each).
  JobSpec wide =
      Gpt("layers { transformer_block { dim: 64 heads: 64 mlp_hidden: "
          "16777216 } }",
          "", 16777216, 64);
  ok = CheckJobSpec(wide);
  EXPECT_TRUE(ok.ok()) << ok.status();
  // The same job on a worker too small for its first layer.
  EXPECT_NE(Error(wide, {8000000000, "w"})
                .find("model.layers[0].token_embedding needs at least 17.2 GB"),
            std::string::npos);
}

// ---- The worker's own check ----

TEST(StageMemoryTest, AStageTooLargeForItsWorkerNamesTheLayer) {
  JobSpec spec = Parse(
      "model { layers { flatten {} } layers { linear { in_features: 8192 "
      "out_features: 8192 } } layers { relu {} } layers { linear { "
      "in_features: 8192 out_features: 4 } } } data { fashion_mnist_dir: "
      "\"/d\" } optimizer { adam { lr: 0.001 } } batch_size: 32 max_steps: 5");
  StageNeeds stage;
  stage.what = "stage 0";
  stage.layer_begin = 0;
  stage.layer_end = 2;
  stage.samples = 32;
  stage.copies = TrainingCopies(spec.optimizer());
  stage.data_bytes = 1000000;
  stage.steps = 5;
  stage.bytes_per_step = PerStepBytes(true, 1);
  const SymbolicShape input = SymbolicShape::Known({2, 64, 64});
  EXPECT_TRUE(CheckStageMemory(spec, input, stage,
                               {8000000000, "this worker's memory"},
                               absl::StatusCode::kFailedPrecondition)
                  .ok());
  const absl::Status small =
      CheckStageMemory(spec, input, stage, {1000000000, "this worker's memory"},
                       absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(small.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(small.message(),
            "stage 0 (model.layers[0, 2)) needs at least 1.1 GB: 67117056 "
            "parameters with their gradients and optimizer state (1.1 GB) "
            "and the activations of a microbatch of 32 samples (1.0 MB), its "
            "data (1.0 MB), its record of 5 steps (600 B); "
            "model.layers[1].linear alone holds 1.1 GB; more than this "
            "worker's memory (1.0 GB)");
  // The data's shape as read may not fit the model: shape inference says.
  EXPECT_EQ(
      CheckStageMemory(spec, SymbolicShape::Known({7}), stage,
                       {8000000000, "w"}, absl::StatusCode::kFailedPrecondition)
          .code(),
      absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace aqueduct
