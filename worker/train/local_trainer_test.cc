// train-local end to end on seeded synthetic data, plus spec parsing and
// validation and the safetensors import/export of model parameters.
#include "worker/train/local_trainer.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "common/device/cpu_device.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "pipeline/failure.h"
#include "worker/nn/spec.h"
#include "worker/nn/weights.h"

namespace aqueduct {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

constexpr char kMlp[] = R"pb(
  name: "synthetic-mlp"
  model {
    layers { flatten {} }
    layers { linear { in_features: 16 out_features: 32 } }
    layers { relu {} }
    layers { dropout { p: 0.1 } }
    layers { linear { in_features: 32 out_features: 32 } }
    layers { gelu {} }
    layers { layer_norm { normalized_shape: 32 } }
    layers { linear { in_features: 32 out_features: 4 } }
  }
  data {
    synthetic {
      sample_shape: [ 1, 4, 4 ]
      num_classes: 4
      train_samples: 1024
      test_samples: 256
      seed: 11
    }
  }
  optimizer { sgd { lr: 0.1 momentum: 0.9 } }
  batch_size: 32
  epochs: 4
  seed: 5
)pb";

JobSpec Parse(const std::string& text) {
  auto spec = ParseJobSpec(text, "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

// A loss that is not finite fails training with that cause, typed (the
// coordinator's reaction reads the cause, not the text).
TEST(LocalTrainerTest, ANonFiniteLossFailsWithItsCause) {
  CpuDevice device(CpuDeviceOptions{1});
  JobSpec spec = Parse(kMlp);
  spec.mutable_model()->mutable_layers()->DeleteSubrange(3, 4);  // No norm.
  spec.mutable_optimizer()->mutable_sgd()->set_lr(1000);
  auto result = TrainLocal(spec, &device, LocalTrainOptions());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(FailureOf(result.status()).cause(), v1::FAILURE_NONFINITE_LOSS)
      << result.status();
}

TEST(LocalTrainerTest, LearnsSyntheticTaskDeterministically) {
  CpuDevice device(CpuDeviceOptions{1});
  const JobSpec spec = Parse(kMlp);
  int calls = 0;
  LocalTrainOptions options;
  options.on_step = [&](const StepReport& r) {
    ++calls;
    EXPECT_EQ(r.total_steps, 128);
  };
  auto a = TrainLocal(spec, &device, options);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->steps, 128);
  EXPECT_EQ(calls, 128);
  EXPECT_EQ(a->epochs, 4);
  ASSERT_EQ(a->losses.size(), 128u);
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) {
    first += a->losses[i];
    last += a->losses[118 + i];
  }
  EXPECT_LT(last, 0.6 * first) << "the loss must fall";
  ASSERT_TRUE(a->test.has_value());
  EXPECT_GT(a->test->accuracy, 0.6) << "chance is 0.25";
  EXPECT_EQ(a->test->samples, 256);
  EXPECT_GT(a->samples_per_second, 0);

  auto b = TrainLocal(spec, &device, LocalTrainOptions());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(a->losses, b->losses) << "same spec, same seed, same losses";

  JobSpec other = spec;
  other.set_seed(6);
  auto c = TrainLocal(other, &device, LocalTrainOptions());
  ASSERT_TRUE(c.ok());
  EXPECT_NE(a->losses, c->losses);
}

// Mixed precision: bf16 GEMMs train as fp32 does, within bf16's rounding
// (about 1e-2 relative per product), and differ from it (the GEMMs did
// change); a bad precision is named.
TEST(LocalTrainerTest, Bf16GemmsTrainCloseToFp32) {
  CpuDevice fp32(CpuDeviceOptions{1}), bf16(CpuDeviceOptions{1});
  bf16.SetBf16Gemm(true);
  JobSpec spec = Parse(kMlp);
  spec.set_max_steps(40);
  auto a = TrainLocal(spec, &fp32, LocalTrainOptions());
  auto b = TrainLocal(spec, &bf16, LocalTrainOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->losses.size(), b->losses.size());
  EXPECT_NE(a->losses, b->losses);
  // The first steps within 1%; later the runs drift apart as any two
  // trainings do, and the last ten steps' mean stays within 10%.
  double last_a = 0, last_b = 0;
  for (size_t i = 0; i < a->losses.size(); ++i) {
    if (i < 10) {
      EXPECT_NEAR(a->losses[i], b->losses[i], 0.01 * a->losses[i]);
    }
    if (i + 10 >= a->losses.size()) {
      last_a += a->losses[i];
      last_b += b->losses[i];
    }
  }
  EXPECT_NEAR(last_a, last_b, 0.1 * last_a);
  spec.mutable_precision()->set_compute("fp16");
  auto bad = TrainLocal(spec, &fp32, LocalTrainOptions());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("precision.compute=\"fp16\""),
            std::string::npos)
      << bad.status();
}

// kMlp without its dropout layer, for `steps` steps.
JobSpec WithoutDropout(int64_t steps) {
  JobSpec spec = Parse(kMlp);
  spec.mutable_model()->mutable_layers()->DeleteSubrange(3, 1);
  spec.set_max_steps(steps);
  return spec;
}

void ExpectNearlyTheSameLosses(const std::vector<double>& a,
                               const std::vector<double>& b, double rel) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_NEAR(a[i], b[i], rel * std::abs(a[i])) << "step " << i + 1;
  }
}

// A step as 2 or 4 passes whose gradients add up gives the losses of one
// pass over the whole batch, up to the order of the float sums; with
// dropout too (each pass draws its rows' part of the minibatch's mask).
TEST(LocalTrainerTest, GradAccumulationMatchesOnePass) {
  CpuDevice device(CpuDeviceOptions{1});
  for (const bool dropout : {false, true}) {
    JobSpec spec = dropout ? Parse(kMlp) : WithoutDropout(20);
    spec.set_max_steps(20);
    auto one = TrainLocal(spec, &device, LocalTrainOptions());
    ASSERT_TRUE(one.ok()) << one.status();
    for (int64_t passes : {2, 4}) {
      SCOPED_TRACE(testing::Message()
                   << passes << " passes, dropout " << dropout);
      spec.set_grad_accumulation(passes);
      auto split = TrainLocal(spec, &device, LocalTrainOptions());
      ASSERT_TRUE(split.ok()) << split.status();
      ExpectNearlyTheSameLosses(one->losses, split->losses, 1e-6);
      EXPECT_NEAR(split->test->accuracy, one->test->accuracy, 1e-9);
    }
  }
}

// Clipping: a threshold no gradient reaches changes nothing (factor 1); a
// tiny one keeps every step tiny, so that each minibatch's loss stays that
// of the initial model (a run with a negligible learning rate), which
// training without clipping leaves behind.
TEST(LocalTrainerTest, ClipGradNorm) {
  CpuDevice device(CpuDeviceOptions{1});
  JobSpec spec = WithoutDropout(10);
  auto run = [&](float clip, float lr) {
    spec.mutable_optimizer()->set_clip_grad_norm(clip);
    spec.mutable_optimizer()->mutable_sgd()->set_lr(lr);
    auto r = TrainLocal(spec, &device, LocalTrainOptions());
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->losses : std::vector<double>();
  };
  const std::vector<double> plain = run(0, 0.1f);
  const std::vector<double> loose = run(1e6f, 0.1f);
  const std::vector<double> tight = run(1e-4f, 0.1f);
  const std::vector<double> frozen = run(0, 1e-9f);
  EXPECT_EQ(plain, loose);
  ASSERT_EQ(tight.size(), 10u);
  EXPECT_EQ(tight[0], plain[0]);
  for (size_t i = 1; i < tight.size(); ++i) {
    EXPECT_NE(tight[i], plain[i]) << "step " << i + 1;
    EXPECT_NEAR(tight[i], frozen[i], 1e-3) << "step " << i + 1;
  }
  EXPECT_GT(std::abs(plain[9] - frozen[9]), 1e-2);
}

// A LLaMA block over samples [4, 8] learns the synthetic task with AdamW
// and nanoGPT's parameter groups.
TEST(LocalTrainerTest, LlamaBlockLearnsWithAdamW) {
  CpuDevice device(CpuDeviceOptions{1});
  JobSpec spec = Parse(kMlp);
  spec.mutable_data()->mutable_synthetic()->clear_sample_shape();
  for (int d : {4, 8})
    spec.mutable_data()->mutable_synthetic()->add_sample_shape(d);
  ModelSpec* model = spec.mutable_model();
  model->clear_layers();
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "layers { llama_block { dim: 8 heads: 2 kv_heads: 1 hidden: 16 } } "
      "layers { rms_norm { dim: 8 } } layers { flatten {} } "
      "layers { linear { in_features: 32 out_features: 4 } }",
      model));
  spec.mutable_optimizer()->Clear();
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "adamw { lr: 0.01 weight_decay: 0.1 } clip_grad_norm: 1 "
      "param_groups { kinds: [\"norm\", \"bias\"] weight_decay: 0 }",
      spec.mutable_optimizer()));
  spec.set_grad_accumulation(2);
  auto r = TrainLocal(spec, &device, LocalTrainOptions());
  ASSERT_TRUE(r.ok()) << r.status();
  double first = 0, last = 0;
  for (int i = 0; i < 10; ++i) {
    first += r->losses[i];
    last += r->losses[r->losses.size() - 10 + i];
  }
  EXPECT_LT(last, 0.7 * first) << "the loss must fall";
  EXPECT_GT(r->test->accuracy, 0.5) << "chance is 0.25";
}

TEST(LocalTrainerTest, OverridesAndWeightsRoundTrip) {
  CpuDevice device(CpuDeviceOptions{1});
  JobSpec spec = Parse(kMlp);
  spec.mutable_optimizer()->Clear();
  spec.mutable_optimizer()->mutable_adam()->set_lr(0.01f);
  LocalTrainOptions options;
  options.max_steps = 7;
  options.save_weights = TempPath("w.safetensors");
  auto a = TrainLocal(spec, &device, options);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->steps, 7);

  // Evaluating the saved weights reproduces the reported test accuracy.
  auto job = ValidateJobSpec(spec);
  ASSERT_TRUE(job.ok());
  auto params =
      InitParameters(*job->model, 0, job->model->num_layers(), &device);
  ASSERT_TRUE(params.ok());
  ASSERT_TRUE(LoadParametersFile(options.save_weights, device, *params).ok());
  auto data = LoadData(spec.data(), FileAccess::Anywhere());
  ASSERT_TRUE(data.ok());
  auto eval = Evaluate(*job->model, &device, *params, *data->test, 32);
  ASSERT_TRUE(eval.ok());
  EXPECT_DOUBLE_EQ(eval->accuracy, a->test->accuracy);
  EXPECT_NEAR(eval->loss, a->test->loss, 1e-9);

  // Starting from the saved weights continues from them: the first loss
  // equals neither a fresh start's first loss.
  LocalTrainOptions resume;
  resume.max_steps = 1;
  resume.init_weights = options.save_weights;
  auto r = TrainLocal(spec, &device, resume);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_NE(r->losses[0], a->losses[0]);
  EXPECT_LT(r->losses[0], a->losses[0]);
}

TEST(LocalTrainerTest, BadWeightsFilesAreRejectedWithTheTensorName) {
  CpuDevice device(CpuDeviceOptions{1});
  const JobSpec spec = Parse(kMlp);
  auto job = ValidateJobSpec(spec);
  ASSERT_TRUE(job.ok());
  auto params =
      InitParameters(*job->model, 0, job->model->num_layers(), &device);
  ASSERT_TRUE(params.ok());
  auto file = ExportParameters(device, *params);
  ASSERT_TRUE(file.ok());
  EXPECT_TRUE(ImportParameters(*file, device, *params).ok());

  SafetensorsFile wrong_shape = *file;
  wrong_shape.tensors["layers.1.weight"].shape = Shape({16, 32});
  EXPECT_EQ(ImportParameters(wrong_shape, device, *params).message(),
            "tensor 'layers.1.weight' has shape [16, 32] but the model needs "
            "[32, 16]");
  SafetensorsFile missing = *file;
  missing.tensors.erase("layers.7.bias");
  EXPECT_EQ(ImportParameters(missing, device, *params).message(),
            "tensor 'layers.7.bias' of shape [4] is missing");
  SafetensorsFile extra = *file;
  extra.tensors["fc.weight"] = extra.tensors["layers.7.bias"];
  EXPECT_NE(ImportParameters(extra, device, *params)
                .message()
                .find("tensor 'fc.weight' is not a parameter"),
            std::string::npos);

  // BF16 weights are widened to F32.
  SafetensorsFile bf16 = *file;
  HostTensor& b = bf16.tensors["layers.7.bias"];
  b.dtype = DType::kBF16;
  b.data = {0x80, 0x3f, 0x00, 0xc0, 0x00, 0x00, 0x40, 0x40};  // 1, -2, 0, 3.
  ASSERT_TRUE(ImportParameters(bf16, device, *params).ok());
  const float* bias = params->tensors.back().f32();
  EXPECT_EQ(bias[0], 1.0f);
  EXPECT_EQ(bias[1], -2.0f);
  EXPECT_EQ(bias[3], 3.0f);

  LocalTrainOptions options;
  options.init_weights = TempPath("does-not-exist.safetensors");
  auto r = TrainLocal(spec, &device, options);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("init_weights"), std::string::npos);
}

TEST(SpecTest, ParseErrorsCarryLineAndColumn) {
  auto bad = ParseJobSpec("name: \"x\"\nbatch_size: lots\n", "job.textproto");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("job.textproto"), std::string::npos);
  EXPECT_NE(bad.status().message().find("2:"), std::string::npos)
      << bad.status();
  auto unknown = ParseJobSpec("colour: 3", "j");
  EXPECT_NE(unknown.status().message().find("colour"), std::string::npos);
  auto json = ParseJobSpec(R"({"name": "j", "batchSize": 4})", "j.json");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(json->batch_size(), 4);
  EXPECT_FALSE(ParseJobSpec(R"({"batchSize": "many"})", "j.json").ok());
}

TEST(SpecTest, ValidationNamesTheField) {
  JobSpec spec = Parse(kMlp);
  spec.mutable_model()->mutable_layers(4)->mutable_linear()->set_in_features(
      512);
  auto v = ValidateJobSpec(spec);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().message(),
            "model.layers[4].linear.in_features=512 does not match the "
            "previous layer's output 32");

  spec = Parse(kMlp);
  spec.set_batch_size(0);
  EXPECT_EQ(ValidateJobSpec(spec).status().message(),
            "batch_size=0 must be positive");
  spec = Parse(kMlp);
  spec.set_epochs(0);
  EXPECT_NE(ValidateJobSpec(spec).status().message().find("never stop"),
            std::string::npos);
  spec = Parse(kMlp);
  spec.mutable_model()->clear_layers();
  spec.mutable_model()->add_layers()->mutable_relu();
  EXPECT_EQ(ValidateJobSpec(spec).status().message(),
            "model.layers[0] outputs [1, 4, 4] per sample; the loss needs "
            "logits [classes] (add a flatten and a linear layer)");
  spec = Parse(kMlp);
  spec.mutable_model()->mutable_layers(7)->mutable_linear()->set_out_features(
      3);
  EXPECT_EQ(ValidateJobSpec(spec).status().message(),
            "model.layers[7] outputs 3 logits but the data has 4 classes");
  spec = Parse(kMlp);
  spec.mutable_model()->mutable_layers(0)->Clear();
  spec.mutable_model()->mutable_layers(0)->mutable_linear()->set_in_features(4);
  spec.mutable_model()->mutable_layers(0)->mutable_linear()->set_out_features(
      4);
  EXPECT_NE(
      ValidateJobSpec(spec).status().message().find("add a flatten layer"),
      std::string::npos);
}

TEST(SpecTest, ExamplesParseAndValidate) {
  for (const char* name : {"fmnist_mlp", "fmnist_cnn", "delay_4stage"}) {
    const std::string path = std::string("examples/") + name + ".textproto";
    auto spec = LoadJobSpecFile(path);
    ASSERT_TRUE(spec.ok()) << spec.status();
    if (spec->data().has_fashion_mnist_dir() &&
        std::fopen(
            (spec->data().fashion_mnist_dir() + "/train-labels-idx1-ubyte.gz")
                .c_str(),
            "r") == nullptr) {
      GTEST_FAIL() << "Fashion-MNIST is not installed (apt-get install "
                      "dataset-fashion-mnist): cannot validate "
                   << path;
    }
    auto v = ValidateJobSpec(*spec);
    EXPECT_TRUE(v.ok()) << path << ": " << v.status();
  }
}

}  // namespace
}  // namespace aqueduct
