#include "pipeline/spec.h"

#include <string>

#include "gtest/gtest.h"

namespace aqueduct {
namespace {

JobSpec Parse(const std::string& text) {
  auto spec = ParseJobSpec(text, "test");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return spec.ok() ? *spec : JobSpec();
}

// A spec with the given model and data sections and a valid rest.
JobSpec With(const std::string& model, const std::string& data) {
  return Parse("model { " + model + " } data { " + data +
               " } optimizer { sgd { lr: 0.1 } } batch_size: 8 max_steps: 3");
}

const char kSynthetic[] =
    "synthetic { sample_shape: [1, 8, 8] num_classes: 4 train_samples: 64 }";
const char kFiles[] = "fashion_mnist_dir: \"/nonexistent/on/this/host\"";

std::string Error(const JobSpec& spec) {
  auto summary = CheckJobSpec(spec);
  EXPECT_FALSE(summary.ok());
  return summary.ok() ? "" : std::string(summary.status().message());
}

TEST(SpecTest, TheExamplesAreValidWithoutTheirData) {
  for (const char* name :
       {"fmnist_mlp", "fmnist_mlp_pipeline", "fmnist_cnn", "delay_4stage"}) {
    auto spec = LoadJobSpecFile(std::string("examples/") + name + ".textproto");
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto summary = CheckJobSpec(*spec);
    EXPECT_TRUE(summary.ok()) << name << ": " << summary.status();
  }
}

TEST(SpecTest, KnownInputGivesEveryShape) {
  auto summary = CheckJobSpec(
      With("layers { conv2d { in_channels: 1 out_channels: 3 kernel_size: 3 "
           "padding: 1 } } layers { max_pool2d { kernel_size: 2 } } "
           "layers { flatten {} } layers { linear { in_features: 48 "
           "out_features: 4 } }",
           kSynthetic));
  ASSERT_TRUE(summary.ok()) << summary.status();
  ASSERT_EQ(summary->layer_outputs.size(), 4u);
  EXPECT_EQ(summary->layer_outputs[0].ToString(), "[3, 8, 8]");
  EXPECT_EQ(summary->layer_outputs[1].ToString(), "[3, 4, 4]");
  EXPECT_EQ(summary->layer_outputs[2].ToString(), "[48]");
  EXPECT_EQ(summary->layer_outputs[3].ToString(), "[4]");
  EXPECT_EQ(summary->train_samples, 64);
}

TEST(SpecTest, DataInFilesIsNotOpenedAndTheChainIsStillChecked) {
  const std::string model =
      "layers { flatten {} } layers { linear { in_features: 784 "
      "out_features: 32 } } layers { relu {} } layers { linear { "
      "in_features: 16 out_features: 10 } }";
  EXPECT_EQ(Error(With(model, kFiles)),
            "model.layers[3].linear.in_features=16 does not match the "
            "previous layer's output 32");
  auto ok = CheckJobSpec(
      With("layers { flatten {} } layers { linear { in_features: 784 "
           "out_features: 10 } }",
           kFiles));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_FALSE(ok->input.rank_known);
  EXPECT_EQ(ok->layer_outputs[0].ToString(), "[?]");
  EXPECT_EQ(ok->train_samples, -1);
}

TEST(SpecTest, FieldErrorsNameTheField) {
  EXPECT_EQ(Error(With("layers { linear { in_features: 10 out_features: 4 } }",
                       kSynthetic)),
            "model.layers[0].linear.in_features=10 does not match the "
            "previous layer's output [1, 8, 8] (linear applies to the last "
            "dimension; add a flatten layer)");
  EXPECT_EQ(Error(With("layers { conv2d { in_channels: 2 out_channels: 3 "
                       "kernel_size: 3 } }",
                       kSynthetic)),
            "model.layers[0].conv2d.in_channels=2 does not match the previous "
            "layer's output channels 1 (shape [1, 8, 8])");
  EXPECT_EQ(Error(With("layers { max_pool2d { kernel_size: 9 padding: 0 } }",
                       kSynthetic)),
            "model.layers[0].max_pool2d.kernel_size=9 is larger than the "
            "padded input [1, 8, 8]");
  EXPECT_EQ(Error(With("layers { flatten {} } layers { dropout { p: 1 } }",
                       kSynthetic)),
            "model.layers[1].dropout.p=1 must be in [0, 1)");
  EXPECT_EQ(Error(With("layers { flatten {} } layers { linear { "
                       "in_features: 64 out_features: 3 } }",
                       kSynthetic)),
            "model.layers[1] outputs 3 logits but the data has 4 classes");
  EXPECT_EQ(Error(With("layers { relu {} }", kSynthetic)),
            "model.layers[0] outputs [1, 8, 8] per sample; the loss needs "
            "logits [classes] (add a flatten and a linear layer)");
  EXPECT_EQ(Error(With("layers { }", kFiles)),
            "model.layers[0] has no layer kind (set one of linear, relu, gelu, "
            "dropout, flatten, conv2d, max_pool2d, layer_norm, delay)");
  EXPECT_EQ(Error(With("", kFiles)), "model.layers is empty");
  EXPECT_EQ(Error(With("layers { flatten {} }", "")),
            "data has no source (set data.fashion_mnist_dir, data.idx or "
            "data.synthetic)");
}

TEST(SpecTest, LoopOptimizerAndPipelineAreChecked) {
  JobSpec spec = With("layers { flatten {} }", kFiles);
  spec.set_batch_size(0);
  EXPECT_EQ(Error(spec), "batch_size=0 must be positive");
  spec = With("layers { flatten {} }", kFiles);
  spec.set_max_steps(0);
  EXPECT_EQ(Error(spec),
            "neither epochs nor max_steps is set: training would never stop");
  spec = With("layers { flatten {} }", kFiles);
  spec.mutable_optimizer()->mutable_sgd()->set_lr(-1);
  EXPECT_EQ(Error(spec), "optimizer.sgd.lr=-1 must be positive and finite");
  spec = With("layers { flatten {} }", kFiles);
  spec.mutable_pipeline()->set_schedule("zigzag");
  EXPECT_NE(Error(spec).find("pipeline.schedule='zigzag'"), std::string::npos);
  spec = With(
      "layers { flatten {} } layers { linear { in_features: 64 "
      "out_features: 4 } }",
      kSynthetic);
  spec.set_batch_size(128);
  spec.set_max_steps(0);
  spec.set_epochs(1);
  EXPECT_EQ(Error(spec),
            "batch_size=128 is larger than the training set (64 samples)");
}

TEST(SpecTest, ParseErrorsSayWhere) {
  auto bad = ParseJobSpec("batch_size: x", "job.textproto");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("job.textproto"), std::string::npos);
  EXPECT_NE(bad.status().message().find("1:13"), std::string::npos);
  auto missing = LoadJobSpecFile("/nonexistent/job.textproto");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace aqueduct
