#include "pipeline/spec.h"

#include <string>

#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "pipeline/memory.h"

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
       {"fmnist_mlp", "fmnist_mlp_pipeline", "fmnist_cnn", "delay_4stage",
        "gpt_fortunes", "gpt_fortunes_stashed"}) {
    auto spec = LoadJobSpecFile(std::string("examples/") + name + ".textproto");
    ASSERT_TRUE(spec.ok()) << spec.status();
    auto summary = CheckJobSpec(*spec);
    EXPECT_TRUE(summary.ok()) << name << ": " << summary.status();
  }
}

// pipeline.stages: every stage a layer or more, the model's layers in all,
// as many stages as the workers hold when the spec fixes them.
TEST(SpecTest, PinnedStagesCoverTheModel) {
  const std::string model =
      "layers { flatten {} } layers { linear { in_features: 64 "
      "out_features: 8 } } layers { relu {} } layers { linear { "
      "in_features: 8 out_features: 4 } }";
  JobSpec spec = With(model, kSynthetic);
  spec.mutable_pipeline()->set_schedule("1f1b_flush");
  for (int n : {2, 2}) spec.mutable_pipeline()->add_stages(n);
  EXPECT_TRUE(CheckJobSpec(spec).ok()) << CheckJobSpec(spec).status();
  spec.mutable_pipeline()->set_stages(1, 0);
  EXPECT_NE(Error(spec).find("pipeline.stages[1]=0 must be at least 1"),
            std::string::npos);
  spec.mutable_pipeline()->set_stages(1, 1);
  EXPECT_NE(Error(spec).find("holds 3 layers in all, but the model has 4"),
            std::string::npos);
  spec.mutable_pipeline()->set_stages(1, 2);
  spec.mutable_pipeline()->set_workers(3);
  spec.mutable_pipeline()->set_tensor_parallel(1);
  EXPECT_NE(Error(spec).find("pins 2 stages, but pipeline.workers=3 hold 3"),
            std::string::npos)
      << Error(spec);
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
            "dropout, flatten, conv2d, max_pool2d, layer_norm, rms_norm, "
            "delay, token_embedding, position_embedding, "
            "causal_self_attention, transformer_block, llama_block)");
  EXPECT_EQ(Error(With("", kFiles)), "model.layers is empty");
  EXPECT_EQ(Error(With("layers { flatten {} }", "")),
            "data has no source (set data.text, data.fashion_mnist_dir, "
            "data.idx or data.synthetic)");
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

DataSpec ParseData(const std::string& text) {
  return Parse("data { " + text + " }").data();
}

std::string DataError(const std::string& text) {
  const absl::Status status = ValidateDataSpec(ParseData(text));
  EXPECT_FALSE(status.ok()) << text;
  return std::string(status.message());
}

// Text data is checked field by field without opening its files.
TEST(SpecTest, TextDataFieldsAreCheckedWithoutTheirFiles) {
  const std::string files = "files: \"/nonexistent/a.txt\" ";
  EXPECT_TRUE(
      ValidateDataSpec(ParseData("text { " + files + "context: 64 }")).ok());
  EXPECT_TRUE(
      ValidateDataSpec(ParseData("text { " + files + files +
                                 "context: 1048576 tokenizer: \"bytes\" "
                                 "val_fraction: 0.5 val_windows: 10 }"))
          .ok());
  EXPECT_TRUE(ValidateDataSpec(ParseData("text { " + files +
                                         "context: 1 tokenizer: \"chars\" "
                                         "val_fraction: 0 } shuffle: true"))
                  .ok());
  EXPECT_EQ(DataError("text { context: 64 }"),
            "data.text.files is empty (name at least one UTF-8 text file)");
  EXPECT_EQ(DataError("text { " + files + "files: \"\" context: 64 }"),
            "data.text.files[1]='' must be an absolute path (workers run in "
            "directories of their own)");
  EXPECT_EQ(DataError("text { files: \"corpus.txt\" context: 64 }"),
            "data.text.files[0]='corpus.txt' must be an absolute path "
            "(workers run in directories of their own)");
  EXPECT_EQ(DataError("text { " + files + "}"),
            "data.text.context=0 must be in [1, 1048576]");
  EXPECT_EQ(DataError("text { " + files + "context: 1048577 }"),
            "data.text.context=1048577 must be in [1, 1048576]");
  EXPECT_EQ(DataError("text { " + files + "context: 8 tokenizer: \"bpe\" }"),
            "data.text.tokenizer='bpe' is not one of: bytes, chars, "
            "sentencepiece");
  EXPECT_EQ(DataError("text { " + files + "context: 8 val_fraction: 0.6 }"),
            "data.text.val_fraction=0.6 must be in [0, 0.5]");
  EXPECT_EQ(DataError("text { " + files + "context: 8 val_fraction: -0.1 }"),
            "data.text.val_fraction=-0.1 must be in [0, 0.5]");
  EXPECT_EQ(DataError("text { " + files + "context: 8 val_fraction: nan }"),
            "data.text.val_fraction=nan must be in [0, 0.5]");
  EXPECT_EQ(DataError("text { " + files + "context: 8 val_windows: -1 }"),
            "data.text.val_windows=-1 must not be negative (0 = all)");
  EXPECT_EQ(DataError("text { " + files +
                      "context: 8 val_fraction: 0 val_windows: 4 }"),
            "data.text.val_windows=4 but data.text.val_fraction=0 holds out "
            "no text");
}

TEST(SpecTest, ImageFieldsAreRefusedForText) {
  const std::string text = "text { files: \"/a.txt\" context: 8 } ";
  EXPECT_EQ(DataError(text + "mean: 0.5"),
            "data.mean applies to image data, not data.text");
  EXPECT_EQ(DataError(text + "std: 1"),
            "data.std applies to image data, not data.text");
  EXPECT_EQ(DataError(text + "std: -1"),
            "data.std applies to image data, not data.text");
  EXPECT_EQ(DataError(text + "shuffle: false"),
            "data.shuffle=false applies to image data, not data.text "
            "(training windows are always drawn at random)");
  EXPECT_EQ(DataError(text + "train_limit: 100"),
            "data.train_limit applies to image data, not data.text (bound "
            "the run with max_steps)");
  EXPECT_EQ(DataError(text + "test_limit: 100"),
            "data.test_limit applies to image data, not data.text (use "
            "data.text.val_windows)");
  EXPECT_TRUE(HasTestSplit(ParseData(text)));
  EXPECT_TRUE(HasTestSplit(
      ParseData("text { files: \"/a.txt\" context: 8 val_fraction: 0.01 }")));
  EXPECT_FALSE(HasTestSplit(
      ParseData("text { files: \"/a.txt\" context: 8 val_fraction: 0 }")));
}

// A GPT over text whose files are not opened: the context is the input's
// length, so the model's shapes are checked by the coordinator.
std::string Gpt(const std::string& head, const std::string& extra) {
  return "model { layers { token_embedding { vocab_size: 256 dim: 8 } } "
         "layers { position_embedding { context: 4 dim: 8 } } "
         "layers { transformer_block { dim: 8 heads: 2 } } " +
         head +
         " } data { text { files: \"/nonexistent/t.txt\" context: 4 "
         "tokenizer: \"bytes\" } } optimizer { adam { lr: 0.1 } } "
         "batch_size: 8 max_steps: 3 " +
         extra;
}

TEST(SpecTest, LanguageModelsAreCheckedWithoutTheirText) {
  const std::string tied =
      "layers { linear { in_features: 8 out_features: 256 bias: false } "
      "tie_weight_to: 0 }";
  EXPECT_TRUE(CheckJobSpec(Parse(Gpt(tied, ""))).ok());
  // Tied across stages needs a flush.
  EXPECT_TRUE(CheckJobSpec(Parse(Gpt(tied,
                                     "pipeline { workers: 2 schedule: "
                                     "\"1f1b_flush\" }")))
                  .ok());
  EXPECT_NE(Error(Parse(Gpt(tied, "pipeline { workers: 2 }")))
                .find("model.layers[3].tie_weight_to=0 needs "
                      "pipeline.schedule 1f1b_flush or gpipe"),
            std::string::npos);
  // Logits per position, a vocabulary as large as the tokenizer's.
  EXPECT_NE(Error(Parse(Gpt("layers { linear { in_features: 8 "
                            "out_features: 100 } }",
                            "")))
                .find("outputs 100 logits but data.text.tokenizer='bytes' "
                      "has 256 tokens"),
            std::string::npos);
  EXPECT_NE(
      Error(Parse(absl::StrReplaceAll(
                Gpt(tied, ""), {{"vocab_size: 256", "vocab_size: 200"},
                                {"out_features: 256", "out_features: 200"}})))
          .find("model.layers[0].token_embedding.vocab_size=200 is smaller "
                "than data.text.tokenizer='bytes''s 256 tokens"),
      std::string::npos);
  EXPECT_NE(Error(Parse(Gpt("layers { flatten {} } layers { linear { "
                            "in_features: 32 out_features: 256 } }",
                            "")))
                .find("a language model needs logits [4, vocabulary]"),
            std::string::npos);
}

// Sequence parallelism splits each sample's positions across the tensor
// degree: a fixed degree that does not divide them is refused, and the
// planner's degrees leave such degrees out. A member then keeps 1/t of a
// block's residual stream.
TEST(SpecTest, SequenceParallelismSplitsThePositions) {
  const std::string head =
      "layers { linear { in_features: 8 out_features: 256 } }";
  const std::string sp = "pipeline { workers: 2 sequence_parallel: true ";
  EXPECT_TRUE(CheckJobSpec(Parse(Gpt(head, sp + "tensor_parallel: 2 }"))).ok());
  const std::string three = absl::StrReplaceAll(
      Gpt(head, sp + "tensor_parallel: 2 }"),
      {{"tokenizer: \"bytes\"", "tokenizer: \"bytes\" context: 3"},
       {"files: \"/nonexistent/t.txt\" context: 4",
        "files: \"/nonexistent/t.txt\""}});
  EXPECT_NE(Error(Parse(three))
                .find("pipeline.sequence_parallel splits each sample's 3 "
                      "positions (data.text.context) across "
                      "pipeline.tensor_parallel=2"),
            std::string::npos)
      << Error(Parse(three));
  const JobSpec planned =
      Parse(absl::StrReplaceAll(three, {{"tensor_parallel: 2", ""}}));
  const PipelinePolicy policy = *ResolvePipeline(planned);
  EXPECT_EQ(TensorDegreesFor(planned.model(), policy), std::vector<int>{1});

  const JobSpec spec = Parse(Gpt(head, ""));
  const SymbolicShape input = SymbolicShape::Known({4});
  const auto outputs = *InferModelShapes(spec.model(), input);
  for (Recompute mode : {Recompute::kNone, Recompute::kFull}) {
    const auto plain = EstimateModel(spec.model(), input, outputs, 2, mode);
    const auto split =
        EstimateModel(spec.model(), input, outputs, 2, mode, true);
    // x and x2 (full: x alone), [4, 8] each, halved.
    const int64_t stream = mode == Recompute::kFull ? 32 : 64;
    EXPECT_EQ(plain[2].activations_per_sample - split[2].activations_per_sample,
              stream / 2)
        << RecomputeName(mode);
    EXPECT_EQ(plain[3].activations_per_sample, split[3].activations_per_sample);
  }
}

// A LLaMA over text whose files are not opened, trained with AdamW (and
// `optimizer`'s fields).
std::string Llama(const std::string& extra, const std::string& optimizer = "") {
  return "model { layers { token_embedding { vocab_size: 256 dim: 8 } } "
         "layers { llama_block { dim: 8 heads: 2 kv_heads: 1 hidden: 16 } } "
         "layers { rms_norm { dim: 8 } } "
         "layers { linear { in_features: 8 out_features: 256 bias: false } } "
         "} data { text { files: \"/nonexistent/t.txt\" context: 4 "
         "tokenizer: \"bytes\" } } optimizer { adamw { lr: 0.1 "
         "weight_decay: 0.1 } " +
         optimizer + " } batch_size: 8 max_steps: 3 " + extra;
}

// The LLaMA block is not tensor-parallel: a fixed degree is refused, and
// the planner tries none (where a GPT block would split).
TEST(SpecTest, LlamaModelsAreCheckedAndNotTensorParallel) {
  EXPECT_TRUE(CheckJobSpec(Parse(Llama(""))).ok())
      << CheckJobSpec(Parse(Llama(""))).status();
  EXPECT_EQ(Error(Parse(Llama("pipeline { workers: 2 tensor_parallel: 2 }"))),
            "pipeline.tensor_parallel=2: model.layers[1] is a llama_block, "
            "which is not tensor-parallel yet (tensor groups split "
            "transformer_block and causal_self_attention layers)");
  const JobSpec llama = Parse(Llama("pipeline { workers: 4 }"));
  EXPECT_EQ(TensorDegreesFor(llama.model(), *ResolvePipeline(llama)),
            std::vector<int>{1});
  const JobSpec gpt = Parse(absl::StrReplaceAll(
      Llama("pipeline { workers: 4 }"),
      {{"llama_block { dim: 8 heads: 2 kv_heads: 1 hidden: 16 }",
        "transformer_block { dim: 8 heads: 2 }"}}));
  EXPECT_EQ(TensorDegreesFor(gpt.model(), *ResolvePipeline(gpt)),
            (std::vector<int>{2, 1}));
}

TEST(SpecTest, ParamGroupsAndClippingAreChecked) {
  auto error = [](const std::string& optimizer) {
    return Error(Parse(Llama("", optimizer)));
  };
  EXPECT_EQ(error("param_groups { kinds: [\"bias\", \"layernorm\"] }"),
            "optimizer.param_groups[0].kinds has \"layernorm\"; the kinds are "
            "weight, bias, norm and embedding");
  EXPECT_EQ(error("param_groups { kinds: \"norm\" } param_groups { "
                  "weight_decay: 0 }"),
            "optimizer.param_groups[1].kinds is empty (name some of weight, "
            "bias, norm, embedding)");
  EXPECT_EQ(error("param_groups { kinds: \"norm\" weight_decay: 1.5 }"),
            "optimizer.param_groups[0].weight_decay=1.5 must be in [0, 1)");
  EXPECT_EQ(error("param_groups { kinds: \"norm\" lr_scale: -1 }"),
            "optimizer.param_groups[0].lr_scale=-1 must be in [0, 1000]");
  EXPECT_EQ(error("clip_grad_norm: -1"),
            "optimizer.clip_grad_norm=-1 must be in [0, 1e+09]");
  EXPECT_EQ(error("clip_grad_norm: nan"),
            "optimizer.clip_grad_norm=nan must be in [0, 1e+09]");
  const JobSpec ok =
      Parse(Llama("",
                  "clip_grad_norm: 1 param_groups { kinds: [\"bias\", "
                  "\"norm\", \"embedding\"] weight_decay: 0 lr_scale: 2 }"));
  EXPECT_TRUE(CheckJobSpec(ok).ok()) << CheckJobSpec(ok).status();
}

TEST(SpecTest, AdamWFieldsAreNamed) {
  JobSpec spec = Parse(Llama(""));
  spec.mutable_optimizer()->mutable_adamw()->set_lr(0);
  EXPECT_EQ(Error(spec), "optimizer.adamw.lr=0 must be positive and finite");
  spec = Parse(Llama(""));
  spec.mutable_optimizer()->mutable_adamw()->set_beta2(1);
  EXPECT_EQ(Error(spec), "optimizer.adamw.beta2=1 must be in [0, 1)");
  spec = Parse(Llama(""));
  spec.mutable_optimizer()->mutable_adamw()->set_weight_decay(1);
  EXPECT_EQ(Error(spec), "optimizer.adamw.weight_decay=1 must be in [0, 1)");
}

TEST(SpecTest, GradAccumulationDividesTheBatch) {
  JobSpec spec = Parse(Llama(""));
  for (int64_t passes : {0, 1, 2, 4, 8}) {
    spec.set_grad_accumulation(passes);
    EXPECT_TRUE(CheckJobSpec(spec).ok()) << passes;
  }
  spec.set_grad_accumulation(3);
  EXPECT_EQ(Error(spec),
            "grad_accumulation=3 must be positive and divide batch_size=8");
  spec.set_grad_accumulation(16);
  EXPECT_EQ(Error(spec),
            "grad_accumulation=16 must be positive and divide batch_size=8");
  spec.set_grad_accumulation(-2);
  EXPECT_EQ(Error(spec),
            "grad_accumulation=-2 must be positive and divide batch_size=8");
}

// In a pipeline, accumulation and clipping need every stage to step the
// same minibatch: 1f1b_stashed (and the default) is refused, a flush or
// one worker is fine.
TEST(SpecTest, AccumulationAndClippingNeedASplittingSchedule) {
  const std::string stashed =
      "pipeline { workers: 2 schedule: \"1f1b_stashed\" } ";
  for (const bool clip : {false, true}) {
    const std::string extra = clip ? "" : "grad_accumulation: 2";
    const std::string optimizer = clip ? "clip_grad_norm: 1" : "";
    auto check = [&](const std::string& pipeline) {
      return CheckJobSpec(Parse(Llama(pipeline + extra, optimizer)));
    };
    SCOPED_TRACE(extra + optimizer);
    const std::string error = Error(Parse(Llama(stashed + extra, optimizer)));
    EXPECT_NE(error.find("needs a schedule"), std::string::npos) << error;
    EXPECT_NE(error.find("not 1f1b_stashed"), std::string::npos) << error;
    EXPECT_FALSE(check("pipeline { workers: 2 } ").ok());
    for (const char* ok :
         {"pipeline { workers: 2 schedule: \"1f1b_flush\" } ",
          "pipeline { workers: 2 schedule: \"gpipe\" } ",
          "pipeline { workers: 1 schedule: \"1f1b_stashed\" } ", ""}) {
      EXPECT_TRUE(check(ok).ok()) << ok << check(ok).status();
    }
  }
  EXPECT_EQ(Error(Parse(Llama(stashed + "grad_accumulation: 2"))),
            "grad_accumulation=2 needs a schedule that splits minibatches "
            "(1f1b_flush, gpipe, interleaved_1f1b, the zb_* ones, 2bw or "
            "auto), not 1f1b_stashed");
}

// JobSpec.data_parallel: each field's range, each mode's own fields, and a
// flushing schedule for ZeRO-1 and the parameter server.
TEST(SpecTest, DataParallelFieldsAreChecked) {
  const std::string flush = "pipeline { workers: 2 schedule: \"1f1b_flush\" } ";
  auto spec_of = [&](const std::string& dp, const std::string& optimizer,
                     const std::string& pipeline) {
    return Parse(Llama(
        (pipeline.empty() ? flush : pipeline) + "data_parallel { " + dp + " }",
        optimizer));
  };
  auto error = [&](const std::string& dp, const std::string& optimizer = "",
                   const std::string& pipeline = "") {
    return Error(spec_of(dp, optimizer, pipeline));
  };
  for (const char* ok :
       {"", "mode: \"allreduce\" bucket_mb: 1 reduce: \"after\"",
        "shard_optimizer: true",
        "mode: \"parameter_server\" consistency: \"bounded\" staleness: 2 "
        "shards: 3",
        "mode: \"parameter_server\" consistency: \"async\""}) {
    const auto checked = CheckJobSpec(spec_of(ok, "", ""));
    EXPECT_TRUE(checked.ok()) << ok << checked.status();
  }
  EXPECT_EQ(error("mode: \"ps\""),
            "data_parallel.mode=\"ps\" must be \"allreduce\" or "
            "\"parameter_server\"");
  EXPECT_EQ(error("bucket_mb: -1"),
            "data_parallel.bucket_mb=-1 must be between 0 and 4096 (0: the "
            "default)");
  EXPECT_EQ(error("reduce: \"later\""),
            "data_parallel.reduce=\"later\" must be \"overlap\" or "
            "\"after\"");
  const std::string ps = "mode: \"parameter_server\" ";
  EXPECT_EQ(error(ps + "consistency: \"eventual\""),
            "data_parallel.consistency=\"eventual\" must be \"sync\", "
            "\"bounded\" or \"async\" (\"\": sync)");
  EXPECT_EQ(error(ps + "consistency: \"sync\" staleness: 2"),
            "data_parallel.staleness=2 applies to consistency \"bounded\" "
            "only");
  EXPECT_EQ(error(ps + "consistency: \"bounded\" staleness: -1"),
            "data_parallel.staleness=-1 must be between 0 and 32");
  EXPECT_EQ(error(ps + "shards: 5000"),
            "data_parallel.shards=5000 must be between 0 and 256");
  EXPECT_NE(error(ps, "clip_grad_norm: 1").find("no replica holds"),
            std::string::npos);
  EXPECT_NE(error(ps + "shard_optimizer: true").find("for mode \"allreduce\""),
            std::string::npos);
  const std::string stashed =
      "pipeline { workers: 2 schedule: \"1f1b_stashed\" } ";
  EXPECT_EQ(error("shard_optimizer: true", "", stashed),
            "data_parallel.shard_optimizer needs a schedule that flushes "
            "(1f1b_flush, gpipe, interleaved_1f1b, the zb_* ones or auto), not "
            "1f1b_stashed");
  EXPECT_TRUE(CheckJobSpec(spec_of("bucket_mb: 8", "", stashed)).ok());
}

// Adam and AdamW both keep two moments per parameter (the memory checks'
// and the planner's optimizer state).
TEST(SpecTest, AdamWKeepsTwoMomentsPerParameter) {
  OptimizerSpec adam, adamw, sgd;
  adam.mutable_adam()->set_lr(0.1f);
  adamw.mutable_adamw()->set_lr(0.1f);
  sgd.mutable_sgd()->set_lr(0.1f);
  EXPECT_EQ(OptimizerStateFactor(adam), 2);
  EXPECT_EQ(OptimizerStateFactor(adamw), 2);
  EXPECT_EQ(OptimizerStateFactor(sgd), 0);
}

// Errors show a named layer's name beside its index.
TEST(SpecTest, ErrorsShowLayerNames) {
  const std::string head =
      "layers { linear { in_features: 8 out_features: 256 } }";
  std::string text = Gpt(head, "pipeline { workers: 3 tensor_parallel: 3 }");
  text = absl::StrReplaceAll(text, {{"layers { transformer_block",
                                     "layers { name: \"h.0\" "
                                     "transformer_block"}});
  EXPECT_NE(Error(Parse(text)).find("model.layers[2] ('h.0')'s 2 heads"),
            std::string::npos)
      << Error(Parse(text));
  EXPECT_EQ(WithLayerNames(Parse(text).model(),
                           absl::InvalidArgumentError(
                               "model.layers[2] and model.layers[9] and "
                               "model.layers[x]"))
                .message(),
            "model.layers[2] ('h.0') and model.layers[9] and model.layers[x]");
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
