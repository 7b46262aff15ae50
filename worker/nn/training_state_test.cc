// Training state through a safetensors round trip: restoring parameters,
// optimizer state and step count into a fresh stage gives bit-identical
// training from there on (SGD with momentum, Adam), and the import's
// rejections.
#include "worker/nn/training_state.h"

#include <cstring>
#include <random>

#include "common/device/cpu_device.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "worker/nn/loss.h"
#include "worker/nn/weights.h"

namespace aqueduct {
namespace {

constexpr int64_t kBatch = 4;

std::unique_ptr<Model> TinyModel() {
  ModelSpec spec;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "layers { linear { in_features: 4 out_features: 3 } } "
      "layers { relu {} } "
      "layers { linear { in_features: 3 out_features: 2 } }",
      &spec));
  auto model = Model::Build(spec, Shape({4}), /*seed=*/7);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

// Gradients of the loss of a seeded random batch, into `grads`.
void ComputeGrads(const Model& model, Device& device,
                  const ParameterSet& params, uint32_t seed,
                  const ParameterSet& grads) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> xv(kBatch * 4);
  for (float& v : xv) v = dist(rng);
  std::vector<int32_t> yv(kBatch);
  for (int32_t& y : yv) y = static_cast<int32_t>(rng() % 2);
  Tensor x = *device.Allocate(Shape({kBatch, 4}), DType::kF32);
  Tensor labels = *device.Allocate(Shape({kBatch}), DType::kI32);
  ASSERT_TRUE(device.CopyFromHost(xv.data(), x).ok());
  ASSERT_TRUE(device.CopyFromHost(yv.data(), labels).ok());
  PassContext ctx;
  RangeCache cache;
  Tensor logits;
  ASSERT_TRUE(
      ForwardRange(model, device, params, x, ctx, &logits, &cache).ok());
  auto loss = SoftmaxCrossEntropy(device, logits, labels, 1.0f / kBatch);
  ASSERT_TRUE(loss.ok()) << loss.status();
  ASSERT_TRUE(BackwardRange(model, device, params, cache, loss->dlogits, ctx,
                            nullptr, grads, false)
                  .ok());
}

void ExpectBitIdentical(const Tensor& a, const Tensor& b,
                        const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << what;
}

OptimizerSpec SgdWithMomentum() {
  OptimizerSpec spec;
  spec.mutable_sgd()->set_lr(0.1f);
  spec.mutable_sgd()->set_momentum(0.9f);
  spec.mutable_sgd()->set_weight_decay(0.01f);
  // The learning rate depends on the step count.
  spec.mutable_schedule()->set_warmup_steps(5);
  return spec;
}

OptimizerSpec Adam() {
  OptimizerSpec spec;
  spec.mutable_adam()->set_lr(0.01f);
  spec.mutable_adam()->set_weight_decay(0.1f);
  spec.mutable_schedule()->set_warmup_steps(5);
  return spec;
}

// Trains two steps, exports, imports into fresh parameters and optimizer,
// and takes a third step with the same gradients in both.
void CheckRoundTrip(const OptimizerSpec& spec) {
  CpuDevice device;
  std::unique_ptr<Model> model = TinyModel();
  ParameterSet params = *InitParameters(*model, 0, 3, &device);
  ParameterSet grads = *ZerosLike(params, &device);
  auto optimizer = CreateOptimizer(spec, params, &device, 100);
  ASSERT_TRUE(optimizer.ok()) << optimizer.status();
  for (uint32_t step = 0; step < 2; ++step) {
    ComputeGrads(*model, device, params, step, grads);
    ASSERT_TRUE((*optimizer)->Step(params, grads).ok());
  }

  auto exported =
      ExportTrainingState(device, params, **optimizer, {{"job_id", "job-1"}});
  ASSERT_TRUE(exported.ok()) << exported.status();
  EXPECT_EQ(exported->metadata["optimizer_steps"], "2");
  EXPECT_EQ(exported->metadata["job_id"], "job-1");
  // Through bytes, as through a checkpoint file.
  auto file = ParseSafetensors(*SerializeSafetensors(*exported));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->tensors.size(), params.size() + (*optimizer)->State().size());

  ParameterSet restored = *ZerosLike(params, &device);
  auto fresh = CreateOptimizer(spec, restored, &device, 100);
  ASSERT_TRUE(fresh.ok());
  absl::Status s = ImportTrainingState(*file, device, restored, fresh->get());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ((*fresh)->steps(), 2);

  ComputeGrads(*model, device, params, 2, grads);
  ASSERT_TRUE((*optimizer)->Step(params, grads).ok());
  ASSERT_TRUE((*fresh)->Step(restored, grads).ok());
  EXPECT_EQ((*fresh)->steps(), 3);
  for (size_t i = 0; i < params.size(); ++i) {
    ExpectBitIdentical(params.tensors[i], restored.tensors[i], params.names[i]);
  }
  const auto state = (*optimizer)->State();
  const auto fresh_state = (*fresh)->State();
  ASSERT_EQ(state.size(), fresh_state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    EXPECT_EQ(state[i].first, fresh_state[i].first);
    ExpectBitIdentical(state[i].second, fresh_state[i].second, state[i].first);
  }
}

TEST(TrainingStateTest, SgdWithMomentumResumesBitIdentically) {
  CheckRoundTrip(SgdWithMomentum());
}

TEST(TrainingStateTest, AdamResumesBitIdentically) { CheckRoundTrip(Adam()); }

TEST(TrainingStateTest, StateNamesArePyTorchs) {
  CpuDevice device;
  std::unique_ptr<Model> model = TinyModel();
  ParameterSet params = *InitParameters(*model, 0, 3, &device);
  auto adam = CreateOptimizer(Adam(), params, &device, 100);
  auto sgd = CreateOptimizer(SgdWithMomentum(), params, &device, 100);
  ASSERT_TRUE(adam.ok() && sgd.ok());
  auto a = ExportTrainingState(device, params, **adam, {});
  auto m = ExportTrainingState(device, params, **sgd, {});
  ASSERT_TRUE(a.ok() && m.ok());
  EXPECT_EQ(a->tensors.count("layers.0.weight"), 1u);
  EXPECT_EQ(a->tensors.count("layers.0.weight.exp_avg"), 1u);
  EXPECT_EQ(a->tensors.count("layers.2.bias.exp_avg_sq"), 1u);
  EXPECT_EQ(m->tensors.count("layers.2.bias.momentum_buffer"), 1u);
  EXPECT_EQ(a->metadata["optimizer_steps"], "0");
}

// A stage of layers [2, 3) restores from the whole model's state.
TEST(TrainingStateTest, TensorsOfOtherLayersAreIgnored) {
  CpuDevice device;
  std::unique_ptr<Model> model = TinyModel();
  ParameterSet whole = *InitParameters(*model, 0, 3, &device);
  auto optimizer = CreateOptimizer(Adam(), whole, &device, 100);
  ASSERT_TRUE(optimizer.ok());
  (*optimizer)->SetSteps(5);
  auto file = ExportTrainingState(device, whole, **optimizer, {});
  ASSERT_TRUE(file.ok());

  ParameterSet stage = *InitParameters(*model, 2, 3, &device);
  auto stage_optimizer = CreateOptimizer(Adam(), stage, &device, 100);
  ASSERT_TRUE(stage_optimizer.ok());
  absl::Status s =
      ImportTrainingState(*file, device, stage, stage_optimizer->get());
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ((*stage_optimizer)->steps(), 5);
}

TEST(TrainingStateTest, Rejections) {
  CpuDevice device;
  std::unique_ptr<Model> model = TinyModel();
  ParameterSet params = *InitParameters(*model, 0, 3, &device);
  auto adam = CreateOptimizer(Adam(), params, &device, 100);
  auto sgd = CreateOptimizer(SgdWithMomentum(), params, &device, 100);
  ASSERT_TRUE(adam.ok() && sgd.ok());
  const SafetensorsFile good = *ExportTrainingState(device, params, **adam, {});
  auto expect_error = [&](const SafetensorsFile& file, Optimizer* optimizer,
                          const std::string& needle) {
    absl::Status s = ImportTrainingState(file, device, params, optimizer);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(needle), std::string::npos) << s;
  };

  // A weights file: parameters only.
  SafetensorsFile weights = *ExportParameters(device, params);
  weights.metadata["optimizer_steps"] = "3";
  expect_error(weights, adam->get(), "no state for this optimizer");
  // Without optimizer state is fine for an optimizer without state.
  OptimizerSpec plain;
  plain.mutable_sgd()->set_lr(0.1f);
  auto stateless = CreateOptimizer(plain, params, &device, 100);
  ASSERT_TRUE(stateless.ok());
  ASSERT_TRUE(
      ImportTrainingState(weights, device, params, stateless->get()).ok());
  EXPECT_EQ((*stateless)->steps(), 3);

  SafetensorsFile f = good;
  f.metadata.erase("optimizer_steps");
  expect_error(f, adam->get(), "'optimizer_steps' is missing");
  f.metadata["optimizer_steps"] = "-1";
  expect_error(f, adam->get(), "'optimizer_steps' is '-1'");

  f = good;
  f.tensors["layers.0.bias.exp_avg"].shape = Shape({1, 3});
  expect_error(f, adam->get(), "'layers.0.bias.exp_avg' has shape [1, 3]");
  f = good;
  f.tensors.erase("layers.0.weight");
  expect_error(f, adam->get(), "'layers.0.weight'");
  // Adam's state beside SGD's for an SGD optimizer.
  f = good;
  for (size_t i = 0; i < params.size(); ++i) {
    f.tensors[params.names[i] + ".momentum_buffer"] =
        f.tensors[params.names[i]];
  }
  expect_error(f, sgd->get(), "does not have");
  // Still rejected: a tensor the model does not have.
  f = good;
  f.tensors["embedding.weight"] = f.tensors["layers.0.bias"];
  expect_error(f, adam->get(), "'embedding.weight'");
}

// An init file whose tied copies differ (not written by Aqueduct): the
// stage holding only the head loads the embedding's values, so both
// stages of a pipeline start from the owner's copy, as one process does.
TEST(TrainingStateTest, TiedCopiesOfAFileTakeTheOwnersValues) {
  ModelSpec spec;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "layers { token_embedding { vocab_size: 5 dim: 3 } } "
      "layers { linear { in_features: 3 out_features: 5 bias: false } "
      "tie_weight_to: 0 }",
      &spec));
  auto model = Model::Build(spec, Shape({2}), /*seed=*/7);
  ASSERT_TRUE(model.ok()) << model.status();
  CpuDevice device;
  auto whole = InitParameters(**model, 0, 2, &device);
  ASSERT_TRUE(whole.ok());
  auto file = ExportParameters(device, *whole);
  ASSERT_TRUE(file.ok());
  HostTensor& copy = file->tensors["layers.1.weight"];
  for (size_t b = 0; b < copy.data.size(); b += 4) copy.data[b] ^= 0x5a;
  ASSERT_NE(copy.data, file->tensors["layers.0.weight"].data);
  TieFileCopies(**model, &*file);
  EXPECT_EQ(file->tensors["layers.1.weight"].data,
            file->tensors["layers.0.weight"].data);
  // The head's stage alone.
  auto head = InitParameters(**model, 1, 2, &device);
  ASSERT_TRUE(head.ok());
  ASSERT_TRUE(ImportParameters(*file, device, *head).ok());
  std::vector<float> got(15), want(15);
  ASSERT_TRUE(device.CopyToHost(head->tensors[0], got.data()).ok());
  std::memcpy(want.data(), file->tensors["layers.0.weight"].data.data(), 60);
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace aqueduct
