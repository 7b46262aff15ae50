// A small GPT end to end in one process: train-local on a text file with a
// tied head and periodic validation, then generation from the trained
// weights (worker/nn/generate.h).
#include <cmath>
#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/device/cpu_device.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/text.h"
#include "worker/nn/generate.h"
#include "worker/nn/spec.h"
#include "worker/nn/weights.h"
#include "worker/train/local_trainer.h"

namespace aqueduct {
namespace {

// A text that repeats one sentence: learnable in a few hundred steps.
std::string WriteText() {
  const std::string path = absl::StrCat(testing::TempDir(), "/gpt_text.txt");
  std::string text;
  for (int i = 0; i < 300; ++i) text += "a cat sat on the mat. ";
  std::FILE* f = std::fopen(path.c_str(), "w");
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  return path;
}

JobSpec GptSpec(int64_t steps) {
  constexpr char kFormat[] = R"pb(
    model {
      layers { token_embedding { vocab_size: 16 dim: 32 } }
      layers { position_embedding { context: 16 dim: 32 } }
      layers { transformer_block { dim: 32 heads: 4 } }
      layers { layer_norm { normalized_shape: 32 } }
      layers {
        linear { in_features: 32 out_features: 16 bias: false }
        tie_weight_to: 0
      }
    }
    data { text { files: "%s" context: 16 val_windows: 16 } }
    optimizer { adam { lr: 0.01 } }
    batch_size: 8
    max_steps: %d
    eval_every: 50
    seed: 3
  )pb";
  auto spec = ParseJobSpec(absl::StrFormat(kFormat, WriteText(), steps), "gpt");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

TEST(GptTest, TrainsTiedWithPeriodicValidation) {
  CpuDevice device(CpuDeviceOptions{1});
  const JobSpec spec = GptSpec(200);
  const std::string weights =
      absl::StrCat(testing::TempDir(), "/gpt.safetensors");
  LocalTrainOptions options;
  options.save_weights = weights;
  options.export_model = true;
  auto r = TrainLocal(spec, &device, options);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->losses.size(), 200u);
  // Chance is ln(11 characters) = 2.4; the sentence is nearly
  // deterministic.
  EXPECT_GT(r->losses.front(), 1.8);
  EXPECT_LT(r->losses.back(), 0.5);
  ASSERT_TRUE(r->test.has_value());
  EXPECT_LT(r->test->loss, 0.5);
  EXPECT_GT(r->test->accuracy, 0.8);
  // Validation at steps 50, 100, 150 and the final one at 200.
  ASSERT_EQ(r->evals.size(), 4u);
  EXPECT_EQ(r->evals[0].step, 50);
  EXPECT_EQ(r->evals[3].step, 200);
  EXPECT_EQ(r->evals[3].result.loss, r->test->loss);
  EXPECT_GT(r->evals[0].result.loss, r->evals[3].result.loss);
  // The tied copies are identical after training.
  const auto& tensors = r->model->tensors;
  ASSERT_EQ(tensors.count("layers.0.weight"), 1u);
  ASSERT_EQ(tensors.count("layers.4.weight"), 1u);
  EXPECT_EQ(tensors.at("layers.0.weight").data,
            tensors.at("layers.4.weight").data);
}

TEST(GptTest, GeneratesTheLearnedSentenceDeterministically) {
  CpuDevice device(CpuDeviceOptions{1});
  const JobSpec spec = GptSpec(200);
  LocalTrainOptions options;
  const std::string weights =
      absl::StrCat(testing::TempDir(), "/gpt_gen.safetensors");
  options.save_weights = weights;
  ASSERT_TRUE(TrainLocal(spec, &device, options).ok());
  auto job = ValidateJobSpec(spec);
  ASSERT_TRUE(job.ok());
  auto params =
      InitParameters(*job->model, 0, job->model->num_layers(), &device);
  ASSERT_TRUE(LoadParametersFile(weights, device, *params).ok());
  auto tokenizer =
      Tokenizer::ForSpec(spec.data().text(), FileAccess::Anywhere());
  ASSERT_TRUE(tokenizer.ok());
  auto prompt = tokenizer->Encode("a cat sat ");
  ASSERT_TRUE(prompt.ok());
  GenerateOptions greedy;
  greedy.tokens = 40;  // Longer than the context: the window slides.
  greedy.temperature = 0;
  auto out = Generate(*job->model, device, *params, *prompt, greedy);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_THAT(*tokenizer->Decode(*out), testing::StartsWith("on the mat."));
  GenerateOptions top1 = greedy;
  top1.temperature = 1.0;
  top1.top_k = 1;
  EXPECT_EQ(*Generate(*job->model, device, *params, *prompt, top1), *out);
  GenerateOptions sampled;
  sampled.tokens = 30;
  sampled.temperature = 1.5;
  sampled.seed = 7;
  auto a = Generate(*job->model, device, *params, *prompt, sampled);
  auto b = Generate(*job->model, device, *params, *prompt, sampled);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(*a, *b) << "the same seed gives the same text";
}

TEST(GptTest, AVocabularySmallerThanTheTokenizersIsRefused) {
  JobSpec spec = GptSpec(1);
  spec.mutable_model()
      ->mutable_layers(0)
      ->mutable_token_embedding()
      ->set_vocab_size(8);  // The text has 11 distinct characters.
  spec.mutable_model()->mutable_layers(4)->mutable_linear()->set_out_features(
      8);
  auto job = ValidateJobSpec(spec);
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(std::string(job.status().message()),
              testing::HasSubstr("model.layers[0].token_embedding.vocab_size=8 "
                                 "is smaller than the tokenizer's vocabulary "
                                 "of 11 tokens"));
}

TEST(GptTest, GenerateRefusesBadInput) {
  CpuDevice device(CpuDeviceOptions{1});
  const JobSpec spec = GptSpec(1);
  auto job = ValidateJobSpec(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  auto params =
      InitParameters(*job->model, 0, job->model->num_layers(), &device);
  GenerateOptions o;
  auto empty = Generate(*job->model, device, *params, {}, o);
  EXPECT_THAT(std::string(empty.status().message()),
              testing::HasSubstr("prompt is empty"));
  auto outside = Generate(*job->model, device, *params, {3, 99}, o);
  EXPECT_THAT(std::string(outside.status().message()),
              testing::HasSubstr("prompt token 1 is 99"));
  o.temperature = -1;
  auto cold = Generate(*job->model, device, *params, {1}, o);
  EXPECT_THAT(std::string(cold.status().message()),
              testing::HasSubstr("temperature=-1"));
}

}  // namespace
}  // namespace aqueduct
