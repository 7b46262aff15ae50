// Pipelines in one process (every rank a thread, an in-memory
// communicator): per-step losses and final weights against train-local
// (1F1B-flush, GPipe) and against a sequential simulation of each policy's
// weight-version semantics (1F1B with stashing, vertical sync).

#include <cmath>
#include <functional>
#include <map>
#include <thread>

#include "absl/strings/str_format.h"
#include "common/comm/in_memory.h"
#include "common/comm/in_memory_channels.h"
#include "common/device/cpu_device.h"
#include "common/device/factory.h"
#include "common/device/no_gpu.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/nn/loss.h"
#include "worker/nn/spec.h"
#include "worker/runtime/layout.h"
#include "worker/runtime/pipeline_stage.h"
#include "worker/train/local_trainer.h"

namespace aqueduct {
namespace {

constexpr char kMlp[] = R"pb(
  model {
    layers { flatten {} }
    layers { linear { in_features: 12 out_features: 16 } }
    layers { relu {} }
    layers { dropout { p: 0.2 } }
    layers { linear { in_features: 16 out_features: 16 } }
    layers { gelu {} }
    layers { layer_norm { normalized_shape: 16 } }
    layers { linear { in_features: 16 out_features: 16 } }
    layers { relu {} }
    layers { linear { in_features: 16 out_features: 3 } }
  }
  data {
    synthetic {
      sample_shape: [ 3, 4 ]
      num_classes: 3
      train_samples: 256
      seed: 4
    }
  }
  optimizer { sgd { lr: 0.05 momentum: 0.9 } }
  batch_size: 16
  max_steps: 12
  seed: 9
)pb";

constexpr char kCnn[] = R"pb(
  model {
    layers {
      conv2d { in_channels: 1 out_channels: 4 kernel_size: 3 padding: 1 }
    }
    layers { relu {} }
    layers { max_pool2d { kernel_size: 2 } }
    layers { flatten {} }
    layers { linear { in_features: 36 out_features: 10 } }
    layers { relu {} }
    layers { linear { in_features: 10 out_features: 3 } }
  }
  data {
    synthetic {
      sample_shape: [ 1, 6, 6 ]
      num_classes: 3
      train_samples: 256
      seed: 5
    }
  }
  optimizer { adam { lr: 0.01 } }
  batch_size: 16
  max_steps: 10
  seed: 3
)pb";

// A small GPT on a text file written for the test: tied head (layer 5 ->
// layer 0), dropout inside the blocks (so microbatches must draw their
// rows' share of the masks). %s: the tie, or nothing; %s: the text file.
// SGD, not Adam: the gradient of attention's key bias is zero but for
// rounding (softmax ignores a constant added to a row of scores), and Adam
// scales that rounding noise, which differs with the microbatch split, up
// to whole steps of size lr.
constexpr char kGptFormat[] = R"pb(
  model {
    layers { token_embedding { vocab_size: 32 dim: 16 } }
    layers { position_embedding { context: 8 dim: 16 } }
    layers { transformer_block { dim: 16 heads: 2 dropout: 0.1 } }
    layers { transformer_block { dim: 16 heads: 4 dropout: 0.1 } }
    layers { layer_norm { normalized_shape: 16 } }
    layers { linear { in_features: 16 out_features: 32 bias: false } %s }
  }
  data { text { files: "%s" context: 8 tokenizer: "chars" val_windows: 8 } }
  optimizer { sgd { lr: 0.1 momentum: 0.9 } }
  batch_size: 8
  max_steps: 8
  seed: 5
)pb";

// The GPT spec over a text of lower-case words (28 characters), tied or not.
JobSpec GptSpec(bool tied) {
  const std::string path =
      absl::StrCat(testing::TempDir(), "/pipeline_test_text.txt");
  std::string text;
  const char* words[] = {"the",  "quick", "brown", "fox",  "jumps",   "over",
                         "lazy", "dogs",  "and",   "cats", "sleep.\n"};
  for (int i = 0; i < 800; ++i) {
    absl::StrAppend(&text, words[(i * 7 + i / 11) % 11], " ");
  }
  std::FILE* f = std::fopen(path.c_str(), "w");
  std::fwrite(text.data(), 1, text.size(), f);
  std::fclose(f);
  auto spec = ParseJobSpec(
      absl::StrFormat(kGptFormat, tied ? "tie_weight_to: 0" : "", path), "gpt");
  EXPECT_TRUE(spec.ok()) << spec.status();
  return *spec;
}

struct Result {
  std::vector<double> losses;               // Per minibatch, mean over samples.
  std::vector<std::vector<float>> weights;  // Every parameter, layer order.
  std::vector<StageStats> stats;
  // Every rank's stats and weights (replicas included).
  std::vector<StageStats> rank_stats;
  std::vector<std::vector<std::vector<float>>> rank_weights;
  absl::Status status;
  int channel_sends = 0;  // Tensors that went over device channels.
};

// `t`'s values on the host, from any device.
std::vector<float> HostOf(Device& device, const Tensor& t) {
  std::vector<float> v(t.numel());
  EXPECT_TRUE(device.Synchronize().ok());
  EXPECT_TRUE(device.CopyToHost(t, v.data()).ok());
  return v;
}

// A run's per-minibatch losses (mean over the batch) and every stage's
// weights, in stage order.
void AddLossesAndWeights(
    const std::map<int64_t, double>& loss_sums, int64_t batch_size,
    std::vector<std::vector<std::vector<float>>>& stage_weights,
    Result* result) {
  for (const auto& [m, sum] : loss_sums) {
    result->losses.push_back(sum / batch_size);
  }
  for (auto& w : stage_weights) {
    for (auto& t : w) result->weights.push_back(std::move(t));
  }
}

PipelineLayout Layout(Schedule policy, std::vector<int> begin,
                      std::vector<int> replicas, int64_t n, int micro,
                      int num_layers) {
  PipelineLayout l;
  l.policy = policy;
  l.layer_begin = begin;
  l.layer_begin.push_back(num_layers);
  int rank = 0;
  for (int r : replicas) {
    std::vector<int> ranks;
    for (int i = 0; i < r; ++i) ranks.push_back(rank++);
    l.ranks.push_back(ranks);
  }
  // Warm-up: workers after the stage over its replicas (as the planner).
  for (size_t s = 0; s < replicas.size(); ++s) {
    int after = 0;
    for (size_t t = s + 1; t < replicas.size(); ++t) after += replicas[t];
    l.warmup_depth.push_back((after + replicas[s] - 1) / replicas[s]);
  }
  l.num_minibatches = n;
  l.microbatches = micro;
  return l;
}

// Tensor-parallel stages: member `slot % t`'s part of the model.
std::unique_ptr<Model> MemberModel(const JobSpec& spec, const Model& whole,
                                   const PipelineLayout& layout, int s,
                                   int slot) {
  const int t = layout.TensorDegree(s);
  auto model = Model::Build(spec.model(), whole.input_shape(), whole.seed(),
                            MemberShard(spec.pipeline(), slot % t, t));
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

// Replica 0's members' parts of a stage's weights, whole (`whole`: a
// member's model, or the whole model for a stage without a group).
std::vector<std::vector<float>> WholeWeights(
    const Model& whole, const PipelineLayout& layout, int s,
    const std::vector<std::vector<std::vector<float>>>& parts) {
  std::vector<std::vector<float>> out;
  int i = 0;
  for (int l = layout.layer_begin[s]; l < layout.layer_begin[s + 1]; ++l) {
    const Layer& layer = whole.layer(l);
    const std::vector<ParamSpec> specs = layer.Params();
    for (size_t p = 0; p < specs.size(); ++p, ++i) {
      std::vector<std::vector<float>> of_p;
      for (const auto& member : parts) of_p.push_back(member[i]);
      const ParamSplit split = layer.SplitOf(static_cast<int>(p));
      out.push_back(WholeOfShards(
          of_p, WholeShape(specs[p].shape, split, layer.shard().degree),
          split));
    }
  }
  return out;
}

// Every stage on a fresh device made from `device_spec` (several stages may
// share one GPU); with `device_channels`, tensors travel over in-memory
// device channels (as over NCCL) and only headers over the communicator.
// Tensor-parallel stages build their members' models and groups.
// `tweak`, when set, changes rank r's options.
using OptionsTweak = std::function<void(int rank, PipelineStage::Options*)>;

Result RunPipeline(const JobSpec& spec, const PipelineLayout& layout,
                   DeviceSpec device_spec = DeviceSpec{},
                   bool device_channels = false,
                   const OptionsTweak& tweak = nullptr) {
  const bool bf16 = spec.precision().compute() == "bf16";
  auto job = ValidateJobSpec(spec);
  EXPECT_TRUE(job.ok()) << job.status();
  auto data = LoadData(spec.data(), FileAccess::Anywhere());
  int world = 0;
  for (const auto& r : layout.ranks) world += static_cast<int>(r.size());
  auto hub = std::make_shared<InMemoryHub>(world);
  auto channel_hub = std::make_shared<InMemoryChannelHub>();
  absl::Mutex mu;
  std::map<int64_t, double> loss_sums;
  Result result;
  result.stats.resize(layout.num_stages());
  result.rank_stats.resize(world);
  result.rank_weights.resize(world);
  // By stage and member of replica 0.
  std::vector<std::vector<std::vector<std::vector<float>>>> member_weights(
      layout.num_stages());
  for (int s = 0; s < layout.num_stages(); ++s) {
    member_weights[s].resize(layout.TensorDegree(s));
  }
  std::vector<absl::Status> statuses(world);
  std::vector<std::thread> threads;
  for (int s = 0; s < layout.num_stages(); ++s) {
    for (size_t r = 0; r < layout.ranks[s].size(); ++r) {
      const int rank = layout.ranks[s][r];
      threads.emplace_back([&, s, r, rank] {
        const int t = layout.TensorDegree(s);
        std::unique_ptr<Model> member;
        if (t > 1) member = MemberModel(spec, *job->model, layout, s, r);
        const Model* model = t > 1 ? member.get() : job->model.get();
        auto made = CreateDevice(device_spec, 1);
        if (!made.ok()) {
          statuses[rank] = made.status();
          hub->KillRank(rank);
          return;
        }
        Device& device = **made;
        if (bf16) device.SetBf16Gemm(true);
        InMemoryCommunicator comm(hub, rank);
        InMemoryDeviceChannels channels(channel_hub, rank);
        auto params = InitParameters(*model, layout.layer_begin[s],
                                     layout.layer_begin[s + 1], &device);
        PipelineStage::Options options;
        options.timeout = absl::Seconds(20);
        std::unique_ptr<ProcessGroup> group;
        if (t > 1) {
          group = *ProcessGroup::Make(&comm, layout.TensorGroup(s, r / t), 0,
                                      "tensor group");
          options.tensor_group = group.get();
        }
        if (device_channels) options.channels = &channels;
        options.bf16_frames = bf16;
        options.on_loss = [&](int64_t m, double sum, int64_t) {
          absl::MutexLock lock(&mu);
          loss_sums[m] += sum;
        };
        if (tweak) tweak(rank, &options);
        PipelineStage stage(model, spec, layout, s, static_cast<int>(r),
                            &device, &comm, &data->train, *params, options);
        statuses[rank] = stage.Run();
        if (!statuses[rank].ok()) hub->KillRank(rank);
        absl::MutexLock lock(&mu);
        if (r == 0) result.stats[s] = stage.stats();
        result.rank_stats[rank] = stage.stats();
        for (const Tensor& w : stage.params().tensors) {
          result.rank_weights[rank].push_back(HostOf(device, w));
        }
        if (static_cast<int>(r) < t) {
          for (const Tensor& w : stage.params().tensors) {
            member_weights[s][r].push_back(HostOf(device, w));
          }
        }
      });
    }
  }
  for (auto& t : threads) t.join();
  std::vector<std::vector<std::vector<float>>> stage_weights;
  for (int s = 0; s < layout.num_stages(); ++s) {
    // A member's model says how its parts split (whole: one part).
    std::unique_ptr<Model> member =
        layout.TensorDegree(s) > 1
            ? MemberModel(spec, *job->model, layout, s, 0)
            : nullptr;
    stage_weights.push_back(
        WholeWeights(member != nullptr ? *member : *job->model, layout, s,
                     member_weights[s]));
  }
  for (const absl::Status& s : statuses) {
    if (!s.ok() && result.status.ok()) result.status = s;
  }
  AddLossesAndWeights(loss_sums, spec.batch_size(), stage_weights, &result);
  absl::MutexLock lock(&channel_hub->mu);
  result.channel_sends = channel_hub->sends;
  return result;
}

// A chunked layout (interleaved 1F1B, ZB-V): `begin` has positions *
// chunks stages, placed as the schedule places them; each position on
// `replicas` ranks.
PipelineLayout ChunkedLayout(Schedule policy, std::vector<int> begin,
                             int positions, int chunks, int64_t n, int micro,
                             int num_layers, int replicas = 1) {
  PipelineLayout l;
  l.policy = policy;
  l.chunks = chunks;
  l.layer_begin = begin;
  l.layer_begin.push_back(num_layers);
  l.ranks.resize(begin.size());
  l.warmup_depth.assign(begin.size(), 0);
  const ir::Layout where = l.ChunkLayout();
  EXPECT_EQ(where.ranks, positions);
  for (size_t s = 0; s < begin.size(); ++s) {
    for (int q = 0; q < replicas; ++q) {
      l.ranks[s].push_back(where.RankOf(static_cast<int>(s)) * replicas + q);
    }
  }
  l.num_minibatches = n;
  l.microbatches = micro;
  return l;
}

// Every rank a thread holding its chunks, under its rank's list.
Result RunChunkedPipeline(const JobSpec& spec, const PipelineLayout& layout) {
  auto job = ValidateJobSpec(spec);
  EXPECT_TRUE(job.ok()) << job.status();
  auto data = LoadData(spec.data(), FileAccess::Anywhere());
  int world = 0;
  for (const auto& r : layout.ranks) {
    for (int rank : r) world = std::max(world, rank + 1);
  }
  auto hub = std::make_shared<InMemoryHub>(world);
  absl::Mutex mu;
  std::map<int64_t, double> loss_sums;
  Result result;
  result.stats.resize(layout.num_stages());
  std::vector<std::vector<std::vector<float>>> stage_weights(
      layout.num_stages());
  std::vector<absl::Status> statuses(world);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < world; ++rank) {
    threads.emplace_back([&, rank] {
      CpuDevice device(CpuDeviceOptions{1});
      InMemoryCommunicator comm(hub, rank);
      PipelineStage::Options options;
      options.timeout = absl::Seconds(20);
      options.on_loss = [&](int64_t m, double sum, int64_t) {
        absl::MutexLock lock(&mu);
        loss_sums[m] += sum;
      };
      std::vector<std::unique_ptr<PipelineStage>> chunks;
      std::vector<PipelineStage*> held;
      for (int s : layout.StagesOfRank(rank)) {
        auto params = InitParameters(*job->model, layout.layer_begin[s],
                                     layout.layer_begin[s + 1], &device);
        const int replica = static_cast<int>(
            std::find(layout.ranks[s].begin(), layout.ranks[s].end(), rank) -
            layout.ranks[s].begin());
        chunks.push_back(std::make_unique<PipelineStage>(
            job->model.get(), spec, layout, s, replica, &device, &comm,
            &data->train, *params, options));
        held.push_back(chunks.back().get());
      }
      auto ops = RankSchedule(layout, rank, 0);
      statuses[rank] =
          ops.ok() ? PipelineStage::RunRank(held, *ops) : ops.status();
      if (!statuses[rank].ok()) hub->KillRank(rank);
      absl::MutexLock lock(&mu);
      for (const auto& chunk : chunks) {
        const int s = chunk->stage();
        if (layout.ranks[s][0] != rank) continue;
        result.stats[s] = chunk->stats();
        for (const Tensor& t : chunk->params().tensors) {
          stage_weights[s].push_back(HostOf(device, t));
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  std::string failures;  // Every rank's: the first to fail is not rank 0.
  for (int rank = 0; rank < world; ++rank) {
    if (statuses[rank].ok()) continue;
    absl::StrAppend(&failures, "\n  rank ", rank, ": ",
                    statuses[rank].ToString());
  }
  if (!failures.empty()) result.status = absl::InternalError(failures);
  AddLossesAndWeights(loss_sums, spec.batch_size(), stage_weights, &result);
  return result;
}

// Tied weights (Model::ties) in the reference: both gradients become their
// sum, whether the two layers share a stage or not.
void SumTies(const Model& model, const PipelineLayout& layout, Device& device,
             const std::vector<ParameterSet>& grads) {
  auto stage_of = [&](int l) {
    int s = 0;
    while (l >= layout.layer_begin[s + 1]) ++s;
    return s;
  };
  for (const auto& [owner, tied] : model.ties()) {
    const int a = stage_of(owner), b = stage_of(tied);
    if (a == b) continue;  // SumTiedGradients below.
    const Tensor& ga = WeightOf(model, grads[a], owner);
    const Tensor& gb = WeightOf(model, grads[b], tied);
    device.Axpby(ga.numel(), 1.0f, gb.f32(), 1.0f, ga.f32());
    device.Copy(ga, gb);
  }
  for (const ParameterSet& g : grads) SumTiedGradients(model, device, g);
}

// Sequential simulation: minibatch m at stage s uses weight version
// WeightVersionFor(policy, ...); every stage steps once per minibatch on its
// newest weights.
Result Reference(const JobSpec& spec, const PipelineLayout& layout) {
  auto job = ValidateJobSpec(spec);
  auto data = LoadData(spec.data(), FileAccess::Anywhere());
  const Model& model = *job->model;
  CpuDevice device(CpuDeviceOptions{1});
  const int S = layout.num_stages();
  const int64_t pipemare_warmup = ResolvePipeline(spec)->pipemare_warmup_steps;
  std::vector<std::vector<ParameterSet>> versions(S);
  std::vector<std::unique_ptr<Optimizer>> optimizers;
  std::vector<ParameterSet> grads;
  for (int s = 0; s < S; ++s) {
    versions[s].push_back(*InitParameters(model, layout.layer_begin[s],
                                          layout.layer_begin[s + 1], &device));
    optimizers.push_back(*CreateOptimizer(spec.optimizer(), versions[s][0],
                                          &device, layout.num_minibatches));
    grads.push_back(*ZerosLike(versions[s][0], &device));
  }
  EpochSampler sampler =
      EpochSampler::For(data->train, spec.batch_size(), true, spec.seed());
  Result result;
  const int64_t B = spec.batch_size();
  const Shape label_shape = LabelShape(model, B);
  const int64_t L = label_shape.numel();
  for (int64_t m = 0; m < layout.num_minibatches; ++m) {
    std::vector<float> inputs(data->train.sample_shape.numel() * B);
    std::vector<int32_t> labels(L);
    GatherBatch(data->train, sampler.Batch(m), inputs.data(), labels.data());
    Tensor x =
        *device.Allocate(data->train.sample_shape.WithLeading(B), DType::kF32);
    EXPECT_TRUE(device.CopyFromHost(inputs.data(), x).ok());
    Tensor y_labels = *device.Allocate(label_shape, DType::kI32);
    EXPECT_TRUE(device.CopyFromHost(labels.data(), y_labels).ok());
    PassContext ctx;
    ctx.minibatch = static_cast<uint64_t>(m);
    std::vector<RangeCache> caches(S);
    std::vector<int64_t> used(S);
    for (int s = 0; s < S; ++s) {
      used[s] = WeightVersionFor(layout.policy, s, S, layout.warmup_depth[s],
                                 layout.warmup_depth[0], m);
      Tensor y;
      EXPECT_TRUE(ForwardRange(model, device, versions[s][used[s]], x, ctx, &y,
                               &caches[s])
                      .ok());
      x = y;
    }
    auto loss = SoftmaxCrossEntropy(device, x, y_labels, 1.0f / L);
    double sum = 0;
    for (int64_t i = 0; i < L; ++i) sum += loss->losses.f32()[i];
    result.losses.push_back(sum / L);
    Tensor dy = loss->dlogits;
    for (int s = S - 1; s >= 0; --s) {
      Tensor dx;
      EXPECT_TRUE(BackwardRange(model, device, versions[s][used[s]], caches[s],
                                dy, ctx, s > 0 ? &dx : nullptr, grads[s], false)
                      .ok());
      dy = dx;
    }
    SumTies(model, layout, device, grads);
    for (int s = 0; s < S; ++s) {
      ParameterSet next = versions[s].back();
      for (Tensor& t : next.tensors) {
        Tensor copy = *device.Allocate(t.shape(), DType::kF32);
        device.Copy(t, copy);
        t = copy;
      }
      // PipeMare's correction (when the spec asks): the gradient of
      // minibatch m is m - used[s] steps stale.
      optimizers[s]->SetLearningRateScale(
          StalenessLrScale(m - used[s], m, pipemare_warmup));
      EXPECT_TRUE(optimizers[s]->Step(next, grads[s]).ok());
      versions[s].push_back(next);
    }
  }
  for (int s = 0; s < S; ++s) {
    for (const Tensor& t : versions[s].back().tensors) {
      result.weights.push_back(HostOf(device, t));
    }
  }
  return result;
}

void ExpectClose(const Result& got, const Result& want, double tolerance,
                 const std::string& what) {
  ASSERT_TRUE(got.status.ok()) << what << ": " << got.status;
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (size_t i = 0; i < want.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], want.losses[i],
                tolerance * std::fabs(want.losses[i]))
        << what << " loss of step " << i;
  }
  ASSERT_EQ(got.weights.size(), want.weights.size()) << what;
  for (size_t p = 0; p < want.weights.size(); ++p) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < want.weights[p].size(); ++i) {
      diff += std::pow(got.weights[p][i] - want.weights[p][i], 2);
      norm += std::pow(want.weights[p][i], 2);
    }
    EXPECT_LE(std::sqrt(diff), tolerance * std::sqrt(norm) + 1e-7)
        << what << " parameter " << p;
  }
}

std::vector<double> LocalLosses(const JobSpec& spec) {
  CpuDevice device(CpuDeviceOptions{1});
  auto r = TrainLocal(spec, &device, LocalTrainOptions());
  EXPECT_TRUE(r.ok()) << r.status();
  return r->losses;
}

// Every schedule that flushes: one weight version, microbatches.
constexpr Schedule kFlushing[] = {v1::SCHEDULE_1F1B_FLUSH, v1::SCHEDULE_GPIPE,
                                  v1::SCHEDULE_ZB_H1, v1::SCHEDULE_ZB_H2};

struct Split {
  std::vector<int> begin;
  std::vector<int> replicas;
};

TEST(PipelineTest, FlushingSchedulesEqualTrainLocal) {
  for (const char* text : {kMlp, kCnn}) {
    const JobSpec spec = *ParseJobSpec(text, "test");
    const int layers = spec.model().layers_size();
    const std::vector<double> local = LocalLosses(spec);
    const bool mlp = text == kMlp;
    std::vector<Split> splits = {
        {{0, mlp ? 5 : 3}, {1, 1}},
        {{0, mlp ? 3 : 2, mlp ? 7 : 5}, {1, 1, 1}},
        {{0, 2, mlp ? 5 : 4, mlp ? 8 : 6}, {1, 1, 1, 1}},
    };
    for (Schedule policy : kFlushing) {
      for (const Split& split : splits) {
        const PipelineLayout layout = Layout(
            policy, split.begin, split.replicas, spec.max_steps(), 4, layers);
        const std::string what =
            absl::StrCat(mlp ? "mlp " : "cnn ", ScheduleName(policy), " ",
                         split.begin.size(), " stages");
        const Result got = RunPipeline(spec, layout);
        const Result want = Reference(spec, layout);
        Result local_result = want;
        local_result.losses = local;
        ExpectClose(got, local_result, 1e-5, what + " vs train-local");
        ExpectClose(got, want, 1e-5, what + " vs reference");
        for (const StageStats& st : got.stats) {
          EXPECT_EQ(st.peak_stashed_versions, 0) << what;
          EXPECT_EQ(st.committed_version, spec.max_steps()) << what;
        }
      }
    }
  }
}

// The GPT with its head tied to its embedding across the first and last
// stage (Megatron's embedding group): equal to train-local per step and in
// every final weight (both copies of the tied one included).
TEST(PipelineTest, GptFlushingSchedulesEqualTrainLocal) {
  const JobSpec spec = GptSpec(/*tied=*/true);
  const std::vector<double> local = LocalLosses(spec);
  ASSERT_EQ(local.size(), 8u);
  for (Schedule policy : kFlushing) {
    for (const std::vector<int>& begin :
         {std::vector<int>{0, 3}, std::vector<int>{0, 2, 3, 4}}) {
      const PipelineLayout layout =
          Layout(policy, begin, std::vector<int>(begin.size(), 1),
                 spec.max_steps(), 4, 6);
      const std::string what = absl::StrCat("gpt ", ScheduleName(policy), " ",
                                            begin.size(), " stages");
      const Result got = RunPipeline(spec, layout);
      Result want = Reference(spec, layout);
      ExpectClose(got, want, 1e-5, what + " vs reference");
      want.losses = local;
      ExpectClose(got, want, 1e-5, what + " vs train-local");
      // The two copies of the tied weight stayed identical: the first
      // parameter (embedding) and the last (head).
      ASSERT_FALSE(got.weights.empty());
      EXPECT_EQ(got.weights.front(), got.weights.back()) << what;
    }
  }
}

// Mixed precision through a pipeline: bf16 GEMMs and bf16 frames between
// the stages train as train-local in bf16 does, within the frames' extra
// rounding (1% per step here), and not bit for bit as fp32 does.
TEST(PipelineTest, GptBf16PipelineTracksTrainLocalInBf16) {
  JobSpec spec = GptSpec(/*tied=*/true);
  const Result fp32 = RunPipeline(spec, Layout(v1::SCHEDULE_1F1B_FLUSH, {0, 3},
                                               {1, 1}, spec.max_steps(), 4, 6));
  spec.mutable_precision()->set_compute("bf16");
  CpuDevice device(CpuDeviceOptions{1});
  device.SetBf16Gemm(true);
  auto local = TrainLocal(spec, &device, LocalTrainOptions());
  ASSERT_TRUE(local.ok()) << local.status();
  const Result got = RunPipeline(spec, Layout(v1::SCHEDULE_1F1B_FLUSH, {0, 3},
                                              {1, 1}, spec.max_steps(), 4, 6));
  ASSERT_EQ(got.losses.size(), local->losses.size());
  for (size_t i = 0; i < got.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], local->losses[i], 0.01 * local->losses[i]) << i;
  }
  EXPECT_NE(got.losses, fp32.losses);
}

// Several chunks per rank: interleaved 1F1B (v = 2 and 3 in a loop) and
// ZB-V (2 in a V, its turn handed over in memory, and the GPT's tied
// embedding and head both on rank 0) equal train-local and the reference.
TEST(PipelineTest, ChunkedSchedulesEqualTrainLocal) {
  const JobSpec mlp = *ParseJobSpec(kMlp, "test");
  const std::vector<double> mlp_local = LocalLosses(mlp);
  const JobSpec gpt = GptSpec(/*tied=*/true);
  const std::vector<double> gpt_local = LocalLosses(gpt);
  struct Case {
    const JobSpec* spec;
    const std::vector<double>* local;
    Schedule policy;
    std::vector<int> begin;
    int positions, chunks, micro;
  };
  const Case cases[] = {
      {&mlp, &mlp_local, v1::SCHEDULE_INTERLEAVED_1F1B, {0, 2, 5, 8}, 2, 2, 4},
      {&mlp,
       &mlp_local,
       v1::SCHEDULE_INTERLEAVED_1F1B,
       {0, 1, 2, 4, 5, 7, 8, 9},
       4,
       2,
       4},
      {&mlp,
       &mlp_local,
       v1::SCHEDULE_INTERLEAVED_1F1B,
       {0, 1, 3, 5, 7, 8},
       2,
       3,
       4},
      {&mlp, &mlp_local, v1::SCHEDULE_ZB_V, {0, 2, 5, 8}, 2, 2, 4},
      {&mlp, &mlp_local, v1::SCHEDULE_ZB_V, {0, 1, 2, 4, 5, 7, 8, 9}, 4, 2, 8},
      {&gpt, &gpt_local, v1::SCHEDULE_INTERLEAVED_1F1B, {0, 2, 3, 4}, 2, 2, 4},
      {&gpt, &gpt_local, v1::SCHEDULE_ZB_V, {0, 2, 3, 4}, 2, 2, 4},
  };
  for (const Case& c : cases) {
    const int layers = c.spec->model().layers_size();
    const PipelineLayout layout =
        ChunkedLayout(c.policy, c.begin, c.positions, c.chunks,
                      c.spec->max_steps(), c.micro, layers);
    const std::string what =
        absl::StrCat(layers == 6 ? "gpt " : "mlp ", ScheduleName(c.policy),
                     " p=", c.positions, " v=", c.chunks);
    const Result got = RunChunkedPipeline(*c.spec, layout);
    Result want = Reference(*c.spec, layout);
    ExpectClose(got, want, 1e-5, what + " vs reference");
    want.losses = *c.local;
    ExpectClose(got, want, 1e-5, what + " vs train-local");
    for (const StageStats& st : got.stats) {
      EXPECT_EQ(st.committed_version, c.spec->max_steps()) << what;
    }
    if (layers == 6) {
      ASSERT_FALSE(got.weights.empty());
      EXPECT_EQ(got.weights.front(), got.weights.back()) << what;
    }
  }
}

TEST(PipelineTest, ChunkedStagesReplicatedEqualTrainLocal) {
  const JobSpec spec = *ParseJobSpec(kMlp, "test");
  const std::vector<double> local = LocalLosses(spec);
  for (Schedule policy : {v1::SCHEDULE_INTERLEAVED_1F1B, v1::SCHEDULE_ZB_V}) {
    const PipelineLayout layout = ChunkedLayout(
        policy, {0, 2, 5, 8}, 2, 2, spec.max_steps(), 8, 10, /*replicas=*/2);
    const Result got = RunChunkedPipeline(spec, layout);
    Result want = Reference(spec, layout);
    want.losses = local;
    ExpectClose(got, want, 1e-4,
                absl::StrCat("replicated ", ScheduleName(policy)));
  }
}

TEST(PipelineTest, ChunkedLayoutsBreakingTheRulesAreRefused) {
  PipelineLayout layout = ChunkedLayout(v1::SCHEDULE_INTERLEAVED_1F1B,
                                        {0, 2, 5, 8}, 2, 2, 4, 3, 10);
  auto ops = RankSchedule(layout, 0, 0);
  ASSERT_FALSE(ops.ok());
  EXPECT_NE(ops.status().message().find("multiple"), std::string::npos)
      << ops.status();
  layout.microbatches = 4;
  std::swap(layout.ranks[1], layout.ranks[2]);  // Stage 2 off rank 0.
  ops = RankSchedule(layout, 0, 0);
  ASSERT_FALSE(ops.ok());
  EXPECT_NE(ops.status().message().find("plan stage 2 is a chunk of pipeline "
                                        "position 0"),
            std::string::npos)
      << ops.status();
}

// Untied, under weight stashing and vertical sync: the sequential reference
// of each policy's version semantics.
TEST(PipelineTest, GptStashingPoliciesMatchTheirReference) {
  const JobSpec spec = GptSpec(/*tied=*/false);
  for (Schedule policy :
       {v1::SCHEDULE_1F1B_STASHED, v1::SCHEDULE_1F1B_VERTICAL_SYNC}) {
    for (const std::vector<int>& begin :
         {std::vector<int>{0, 3}, std::vector<int>{0, 2, 3, 4}}) {
      const PipelineLayout layout =
          Layout(policy, begin, std::vector<int>(begin.size(), 1),
                 spec.max_steps(), 1, 6);
      ExpectClose(RunPipeline(spec, layout), Reference(spec, layout), 1e-5,
                  absl::StrCat("gpt ", ScheduleName(policy), " ", begin.size(),
                               " stages"));
    }
  }
}

// PipeDream-2BW against its sequential reference (every stage runs
// minibatch k on version max(0, k-1), the step applied to the newest),
// with the GPT's head tied across stages too (one version per minibatch
// everywhere keeps the copies equal): two weight versions at most.
TEST(PipelineTest, TwoBwMatchesItsReference) {
  for (bool tied : {false, true}) {
    const JobSpec spec = GptSpec(tied);
    for (const std::vector<int>& begin :
         {std::vector<int>{0, 3}, std::vector<int>{0, 2, 3, 4}}) {
      const int stages = static_cast<int>(begin.size());
      const PipelineLayout layout =
          Layout(v1::SCHEDULE_2BW, begin, std::vector<int>(stages, 1),
                 spec.max_steps(), 4, 6);
      const std::string what =
          absl::StrCat(tied ? "tied " : "", "gpt 2bw ", stages, " stages");
      const Result got = RunPipeline(spec, layout);
      ASSERT_TRUE(got.status.ok()) << what << ": " << got.status;
      ExpectClose(got, Reference(spec, layout), 1e-5, what);
      for (const StageStats& st : got.stats) {
        EXPECT_LE(st.peak_stashed_versions, 1) << what;
        EXPECT_EQ(st.committed_version, spec.max_steps()) << what;
      }
      if (tied) {
        EXPECT_EQ(got.weights.front(), got.weights.back()) << what;
      }
    }
  }
  const JobSpec mlp = *ParseJobSpec(kMlp, "test");
  const PipelineLayout layout =
      Layout(v1::SCHEDULE_2BW, {0, 3, 7}, {1, 1, 1}, mlp.max_steps(), 2, 10);
  ExpectClose(RunPipeline(mlp, layout), Reference(mlp, layout), 1e-5,
              "mlp 2bw 3 stages");
}

// PipeMare's learning-rate rescheduling under weight stashing and 2BW:
// each stage's step scaled by its staleness^-(1 - k/K), as the sequential
// reference does it; it changes the stashed run (stages up to 3 steps
// stale), not 2BW's (every gradient 1 step stale: 1^-p = 1).
TEST(PipelineTest, PipeMareCorrectionMatchesItsReference) {
  for (Schedule policy : {v1::SCHEDULE_1F1B_STASHED, v1::SCHEDULE_2BW}) {
    JobSpec spec = GptSpec(/*tied=*/false);
    const PipelineLayout layout =
        Layout(policy, {0, 2, 3, 4}, {1, 1, 1, 1}, spec.max_steps(),
               policy == v1::SCHEDULE_2BW ? 4 : 1, 6);
    const Result plain = RunPipeline(spec, layout);
    spec.mutable_pipeline()->set_schedule(ScheduleName(policy));
    spec.mutable_pipeline()->set_staleness_correction("pipemare_lr");
    spec.mutable_pipeline()->set_staleness_warmup_steps(6);
    const std::string what =
        absl::StrCat("gpt ", ScheduleName(policy), " pipemare_lr");
    const Result got = RunPipeline(spec, layout);
    ExpectClose(got, Reference(spec, layout), 1e-5, what);
    ASSERT_EQ(got.losses.size(), plain.losses.size());
    double gap = 0;
    for (size_t i = 0; i < got.losses.size(); ++i) {
      gap = std::max(gap, std::fabs(got.losses[i] - plain.losses[i]));
    }
    if (policy == v1::SCHEDULE_2BW) {
      // A delay of 1 step: 1^-p = 1, nothing to correct.
      EXPECT_EQ(gap, 0) << what;
    } else {
      EXPECT_GT(gap, 1e-6) << what << ": the correction changed nothing";
    }
  }
}

// Tied across stages under weight stashing: refused, naming the field.
TEST(PipelineTest, GptTiedAcrossStagesNeedsAFlush) {
  const JobSpec spec = GptSpec(/*tied=*/true);
  const PipelineLayout layout =
      Layout(v1::SCHEDULE_1F1B_STASHED, {0, 3}, {1, 1}, spec.max_steps(), 1, 6);
  const Result got = RunPipeline(spec, layout);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(got.status.message()),
              testing::HasSubstr("model.layers[5].tie_weight_to=0"));
}

// A 2-stage 1F1B pipeline with both stages on cuda:0 (two workers sharing
// one GPU) against `aq train-local` on the CPU: per-step losses within 1e-4
// relative. Skips only where no GPU exists; fails where cuda:0 is there
// and cannot be opened.
TEST(PipelineTest, TwoStagesOnGpuMatchTrainLocalOnCpu) {
  DeviceSpec gpu;
  gpu.kind = DeviceKind::kCuda;
  gpu.ordinal = 0;
  auto probe = CreateDevice(gpu, 1);
  if (!probe.ok()) {
    const std::string none = NoGpuHere(probe.status());
    if (none.empty())
      FAIL() << "cuda:0 could not be opened: " << probe.status();
    GTEST_SKIP() << "no GPU (" << none << "); GPU pipeline not run";
  }
  probe->reset();
  const JobSpec spec = *ParseJobSpec(kMlp, "test");
  const PipelineLayout layout =
      Layout(v1::SCHEDULE_1F1B_FLUSH, {0, 5}, {1, 1}, spec.max_steps(), 4,
             spec.model().layers_size());
  const Result got = RunPipeline(spec, layout, gpu);
  ASSERT_TRUE(got.status.ok()) << got.status;
  const std::vector<double> local = LocalLosses(spec);
  ASSERT_EQ(got.losses.size(), local.size());
  for (size_t i = 0; i < local.size(); ++i) {
    EXPECT_NEAR(got.losses[i], local[i], 1e-4 * std::fabs(local[i]))
        << "step " << i;
  }
}

// The same training with tensors on device channels (the NCCL path's
// protocol: headers on the communicator, tensors on one channel per kind and
// pair of ranks, receives posted ahead) as over the communicator alone: the
// same losses and weights, for every policy, with replicas.
TEST(PipelineTest, DeviceChannelsCarryTheSameTraining) {
  const JobSpec spec = *ParseJobSpec(kMlp, "test");
  struct Case {
    Schedule policy;
    Split split;
  };
  const std::vector<Case> cases = {
      {v1::SCHEDULE_1F1B_STASHED, {{0, 3, 7}, {1, 1, 1}}},
      {v1::SCHEDULE_1F1B_VERTICAL_SYNC, {{0, 5}, {1, 1}}},
      {v1::SCHEDULE_1F1B_FLUSH, {{0, 5}, {2, 1}}},
      {v1::SCHEDULE_GPIPE, {{0, 2, 5, 8}, {1, 1, 1, 1}}},
      {v1::SCHEDULE_ZB_H1, {{0, 3, 7}, {1, 2, 1}}},
      {v1::SCHEDULE_ZB_H2, {{0, 2, 5, 8}, {1, 1, 1, 1}}},
  };
  for (const Case& c : cases) {
    const PipelineLayout layout =
        Layout(c.policy, c.split.begin, c.split.replicas, spec.max_steps(),
               SplitsMinibatches(c.policy) ? 4 : 1, 10);
    const std::string what = absl::StrCat(ScheduleName(c.policy), " ",
                                          c.split.begin.size(), " stages");
    const Result plain = RunPipeline(spec, layout);
    const Result channels = RunPipeline(spec, layout, DeviceSpec{}, true);
    ASSERT_TRUE(channels.status.ok()) << what << ": " << channels.status;
    ExpectClose(channels, plain, 1e-6, what + " over device channels");
    EXPECT_EQ(plain.channel_sends, 0) << what;
    // Every activation and gradient of every microbatch and boundary.
    const int64_t boundaries = static_cast<int64_t>(c.split.begin.size()) - 1;
    EXPECT_EQ(channels.channel_sends,
              2 * boundaries * spec.max_steps() * layout.microbatches)
        << what;
  }
}

TEST(PipelineTest, ReplicatedStageEqualsTrainLocal) {
  const JobSpec spec = *ParseJobSpec(kMlp, "test");
  const std::vector<double> local = LocalLosses(spec);
  for (Schedule policy : kFlushing) {
    const PipelineLayout layout =
        Layout(policy, {0, 5}, {2, 1}, spec.max_steps(), 4, 10);
    const Result got = RunPipeline(spec, layout);
    Result want = Reference(spec, layout);
    want.losses = local;
    ExpectClose(got, want, 1e-4,
                absl::StrCat("replicated ", ScheduleName(policy)));
  }
}

// A layout of `tensor[s]`-wide tensor groups: stage s on replicas[s] *
// tensor[s] consecutive ranks (tensor innermost), recomputing as
// `recompute[s]` says (empty: none).
PipelineLayout MeshLayout(Schedule policy, std::vector<int> begin,
                          std::vector<int> replicas, std::vector<int> tensor,
                          std::vector<Recompute> recompute, int64_t n,
                          int micro, int num_layers) {
  PipelineLayout l = Layout(policy, begin, replicas, n, micro, num_layers);
  int rank = 0;
  for (size_t s = 0; s < replicas.size(); ++s) {
    l.ranks[s].clear();
    for (int i = 0; i < replicas[s] * tensor[s]; ++i) {
      l.ranks[s].push_back(rank++);
    }
  }
  l.tensor = tensor;
  l.recompute = recompute;
  return l;
}

// The tied GPT with every block's heads divisible by 4.
JobSpec GptSpecForTensorGroups() {
  JobSpec spec = GptSpec(/*tied=*/true);
  spec.mutable_model()
      ->mutable_layers(2)
      ->mutable_transformer_block()
      ->set_heads(4);
  return spec;
}

struct MeshCase {
  std::vector<int> begin, replicas, tensor;
  std::vector<Recompute> recompute;
};

// Each case's per-step losses and every final weight (gathered whole)
// within 1e-5 of the same pipeline without tensor groups and of
// train-local.
void ExpectMeshCasesEqualTrainLocal(const JobSpec& spec,
                                    const std::vector<MeshCase>& cases) {
  const std::vector<double> local = LocalLosses(spec);
  for (const MeshCase& c : cases) {
    const PipelineLayout layout =
        MeshLayout(v1::SCHEDULE_1F1B_FLUSH, c.begin, c.replicas, c.tensor,
                   c.recompute, spec.max_steps(), 4, 6);
    std::string what = "pipeline x data x tensor:";
    for (size_t s = 0; s < c.begin.size(); ++s) {
      absl::StrAppend(&what, " ", c.replicas[s], "x", c.tensor[s]);
    }
    const Result got = RunPipeline(spec, layout);
    Result want = Reference(spec, Layout(v1::SCHEDULE_1F1B_FLUSH, c.begin,
                                         c.replicas, spec.max_steps(), 4, 6));
    ExpectClose(got, want, 1e-5, what + " vs reference");
    want.losses = local;
    ExpectClose(got, want, 1e-5, what + " vs train-local");
    ASSERT_FALSE(got.weights.empty());
    EXPECT_EQ(got.weights.front(), got.weights.back()) << what << " tie";
  }
}

constexpr Recompute kNone = Recompute::kNone, kSel = Recompute::kSelective,
                    kFull = Recompute::kFull;

// Megatron tensor parallelism inside the stages, with data parallelism and
// recomputation: pipeline x data x tensor = 1x1x2, 1x1x4, 2x1x2, 2x2x2 (8
// ranks), stages of different degrees, each recomputation mode.
TEST(PipelineTest, GptTensorGroupsEqualTrainLocal) {
  ExpectMeshCasesEqualTrainLocal(
      GptSpecForTensorGroups(),
      {
          {{0}, {1}, {2}, {}},
          {{0}, {1}, {4}, {kFull}},
          {{0, 3}, {1, 1}, {2, 2}, {kSel, kNone}},
          {{0, 3}, {2, 2}, {2, 2}, {kFull, kSel}},
          {{0, 2, 4}, {1, 1, 1}, {2, 1, 2}, {kNone, kNone, kFull}},
      });
}

// The same with sequence parallelism: the blocks' LayerNorms, dropout and
// residual on each member's rows (dropout masks the whole layer's), their
// LayerNorm gradients summed over the group before the step.
TEST(PipelineTest, GptSequenceParallelEqualsTrainLocal) {
  JobSpec spec = GptSpecForTensorGroups();
  spec.mutable_pipeline()->set_sequence_parallel(true);
  ExpectMeshCasesEqualTrainLocal(
      spec, {
                {{0}, {1}, {2}, {}},
                {{0}, {1}, {4}, {kSel}},
                {{0, 3}, {2, 2}, {2, 2}, {kFull, kNone}},
                {{0, 2, 4}, {1, 1, 1}, {2, 2, 2}, {kNone, kSel, kFull}},
            });
}

// The embedding and the head split the vocabulary across their groups:
// tied across stages, the groups must be of one degree, or the job is
// refused naming the tie.
TEST(PipelineTest, TiedLayersNeedTensorGroupsOfOneDegree) {
  const JobSpec spec = GptSpecForTensorGroups();
  const PipelineLayout layout =
      MeshLayout(v1::SCHEDULE_1F1B_FLUSH, {0, 2, 4}, {1, 1, 1}, {2, 1, 4}, {},
                 spec.max_steps(), 4, 6);
  const Result got = RunPipeline(spec, layout);
  EXPECT_EQ(got.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(got.status.message()),
              testing::HasSubstr("tied layers sit on stages 0 and 2 of "
                                 "tensor degrees 2 and 4"));
}

// The zero-bubble schedules' split backward with tensor groups (ZB-H2's
// sequence-parallel).
TEST(PipelineTest, GptTensorGroupsUnderSplitBackwards) {
  JobSpec spec = GptSpecForTensorGroups();
  for (Schedule policy : {v1::SCHEDULE_ZB_H1, v1::SCHEDULE_ZB_H2}) {
    spec.mutable_pipeline()->set_sequence_parallel(policy ==
                                                   v1::SCHEDULE_ZB_H2);
    const PipelineLayout layout = MeshLayout(
        policy, {0, 3}, {1, 1}, {2, 2},
        {Recompute::kFull, Recompute::kSelective}, spec.max_steps(), 4, 6);
    const Result got = RunPipeline(spec, layout);
    const Result want =
        Reference(spec, Layout(policy, {0, 3}, {1, 1}, spec.max_steps(), 4, 6));
    ExpectClose(got, want, 1e-5, ScheduleName(policy));
  }
}

TEST(PipelineTest, StashingPoliciesMatchTheirReference) {
  for (const char* text : {kMlp, kCnn}) {
    const JobSpec spec = *ParseJobSpec(text, "test");
    const int layers = spec.model().layers_size();
    const bool mlp = text == kMlp;
    for (Schedule policy :
         {v1::SCHEDULE_1F1B_STASHED, v1::SCHEDULE_1F1B_VERTICAL_SYNC}) {
      for (int stages : {2, 3, 4}) {
        std::vector<int> begin = {0, 2, mlp ? 5 : 4, mlp ? 8 : 6};
        begin.resize(stages);
        const PipelineLayout layout =
            Layout(policy, begin, std::vector<int>(stages, 1), spec.max_steps(),
                   1, layers);
        const std::string what =
            absl::StrCat(mlp ? "mlp " : "cnn ", ScheduleName(policy), " ",
                         stages, " stages");
        const Result got = RunPipeline(spec, layout);
        ExpectClose(got, Reference(spec, layout), 1e-5, what);
        for (int s = 0; s < stages; ++s) {
          const int depth = layout.warmup_depth[s];
          // Weight versions kept (stashed plus the newest) never exceed
          // depth + 1; under vertical sync every stage keeps as many as
          // stage 0 (it uses stage 0's versions).
          const int allowed = policy == v1::SCHEDULE_1F1B_STASHED
                                  ? depth
                                  : layout.warmup_depth[0];
          EXPECT_LE(got.stats[s].peak_stashed_versions, allowed) << what;
          EXPECT_LE(got.stats[s].peak_in_flight, depth + 1) << what;
          if (policy == v1::SCHEDULE_1F1B_STASHED) {
            EXPECT_EQ(got.stats[s].peak_in_flight, depth + 1) << what;
          }
        }
        // Stale weights change the trajectory: it is not train-local's.
        if (policy == v1::SCHEDULE_1F1B_STASHED) {
          const std::vector<double> local = LocalLosses(spec);
          double gap = 0;
          for (size_t i = 0; i < local.size(); ++i) {
            gap = std::max(gap, std::fabs(local[i] - got.losses[i]));
          }
          EXPECT_GT(gap, 1e-6) << what;
        }
      }
    }
  }
}

// Stage 0 of a 2-stage 1F1B MLP pipeline whose stage 1 never answers.
struct LoneStage {
  explicit LoneStage(PipelineStage::Options options)
      : spec(*ParseJobSpec(kMlp, "test")),
        job(ValidateJobSpec(spec)),
        data(LoadData(spec.data(), FileAccess::Anywhere())),
        hub(std::make_shared<InMemoryHub>(2)),
        device(CpuDeviceOptions{1}),
        comm(hub, 0),
        stage(job->model.get(), spec,
              Layout(v1::SCHEDULE_1F1B_STASHED, {0, 5}, {1, 1}, 12, 1, 10), 0,
              0, &device, &comm, &data->train,
              *InitParameters(*job->model, 0, 5, &device), std::move(options)) {
  }
  JobSpec spec;
  absl::StatusOr<ValidatedJob> job;
  absl::StatusOr<DataSplits> data;
  std::shared_ptr<InMemoryHub> hub;
  CpuDevice device;
  InMemoryCommunicator comm;
  PipelineStage stage;
};

TEST(PipelineTest, LostPeerFailsWithinTheDeadline) {
  PipelineStage::Options options;
  options.timeout = absl::Milliseconds(300);
  LoneStage lone(options);
  const absl::Time start = absl::Now();
  const absl::Status s = lone.stage.Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_NE(s.message().find("from rank 1"), std::string::npos) << s;
}

// A stop (the coordinator's StopJob: the stop flag, then Abort on the
// communicator, as StageRuntime::Stop does) ends a stage blocked on a silent
// peer long before the peer deadline.
TEST(PipelineTest, StopEndsAWaitForASilentPeer) {
  std::atomic<bool> stop{false};
  PipelineStage::Options options;
  options.timeout = absl::Seconds(60);
  options.stop = &stop;
  LoneStage lone(options);
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(200));
    stop = true;
    lone.comm.Abort();
  });
  const absl::Time start = absl::Now();
  const absl::Status s = lone.stage.Run();
  stopper.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

TEST(PipelineTest, MismatchedFrameIsRefused) {
  const JobSpec spec = *ParseJobSpec(kMlp, "test");
  PipelineLayout layout =
      Layout(v1::SCHEDULE_1F1B_STASHED, {0, 5}, {1, 1}, 2, 1, 10);
  auto job = ValidateJobSpec(spec);
  auto data = LoadData(spec.data(), FileAccess::Anywhere());
  auto hub = std::make_shared<InMemoryHub>(2);
  InMemoryCommunicator rank0(hub, 0);
  // Garbage arrives under the tag of minibatch 0's activation.
  ASSERT_TRUE(rank0.Send(1, ActivationTag(0, 0), std::string(200, 'x'))
                  ->Wait(absl::Now())
                  .ok());
  CpuDevice device(CpuDeviceOptions{1});
  InMemoryCommunicator rank1(hub, 1);
  PipelineStage::Options options;
  options.timeout = absl::Seconds(2);
  PipelineStage stage(job->model.get(), spec, layout, 1, 0, &device, &rank1,
                      nullptr, *InitParameters(*job->model, 5, 10, &device),
                      options);
  const absl::Status s = stage.Run();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find("stage 1 (rank 1) receiving the activation of "
                             "minibatch 0 microbatch 0: "),
            std::string::npos)
      << s;
  EXPECT_NE(s.message().find("received 200 bytes"), std::string::npos) << s;
}

// Per-step losses within `tolerance` of train-local's, and the two copies
// of the tied weight (the first and last parameters) identical.
void ExpectLossesOfTrainLocal(const Result& got,
                              const std::vector<double>& local,
                              double tolerance, const std::string& what,
                              bool tied) {
  ASSERT_TRUE(got.status.ok()) << what << ": " << got.status;
  ASSERT_EQ(got.losses.size(), local.size()) << what;
  for (size_t i = 0; i < local.size(); ++i) {
    EXPECT_NEAR(got.losses[i], local[i], tolerance * local[i])
        << what << " step " << i;
  }
  if (tied) {
    ASSERT_FALSE(got.weights.empty());
    EXPECT_EQ(got.weights.front(), got.weights.back()) << what << " tie";
  }
}

// Gradient-norm clipping over the whole model (every stage, every member
// of a tensor group, the tied weight once) and gradient accumulation (2
// passes: twice the microbatches) through pipelines of 2 and 4 stages,
// chunked, replicated and tensor-parallel stages, as train-local trains.
TEST(PipelineTest, GptClippingAndAccumulationEqualTrainLocal) {
  JobSpec spec = GptSpecForTensorGroups();
  spec.mutable_optimizer()->set_clip_grad_norm(0.05f);
  spec.set_grad_accumulation(2);
  const std::vector<double> local = LocalLosses(spec);
  JobSpec unclipped = spec;
  unclipped.mutable_optimizer()->set_clip_grad_norm(0);
  ASSERT_NE(LocalLosses(unclipped), local) << "the clipping must bite";
  const int64_t n = spec.max_steps();
  struct Case {
    std::string what;
    PipelineLayout layout;
    bool chunked;
  };
  const Case cases[] = {
      {"1f1b_flush 2 stages",
       Layout(v1::SCHEDULE_1F1B_FLUSH, {0, 3}, {1, 1}, n, 8, 6), false},
      {"gpipe 4 stages",
       Layout(v1::SCHEDULE_GPIPE, {0, 2, 3, 4}, {1, 1, 1, 1}, n, 8, 6), false},
      {"zb_h1 2 stages, stage 0 replicated",
       Layout(v1::SCHEDULE_ZB_H1, {0, 3}, {2, 1}, n, 8, 6), false},
      {"interleaved 2x2",
       ChunkedLayout(v1::SCHEDULE_INTERLEAVED_1F1B, {0, 2, 3, 4}, 2, 2, n, 8,
                     6),
       true},
      {"1x2 and 2x2 tensor groups",
       MeshLayout(v1::SCHEDULE_1F1B_FLUSH, {0, 3}, {1, 2}, {2, 2}, {}, n, 8, 6),
       false},
  };
  for (const Case& c : cases) {
    const Result got = c.chunked ? RunChunkedPipeline(spec, c.layout)
                                 : RunPipeline(spec, c.layout);
    ExpectLossesOfTrainLocal(got, local, 1e-5, c.what, /*tied=*/true);
  }
}

// The LLaMA block through a pipeline with AdamW, parameter groups and
// clipping, as train-local.
TEST(PipelineTest, LlamaWithAdamWEqualsTrainLocal) {
  JobSpec spec = GptSpec(/*tied=*/false);
  ModelSpec* model = spec.mutable_model();
  model->mutable_layers(1)->clear_position_embedding();
  model->mutable_layers(1)->mutable_rms_norm()->set_dim(16);
  for (int l : {2, 3}) {
    auto* block = model->mutable_layers(l)->mutable_llama_block();
    block->set_dim(16);
    block->set_heads(4);
    block->set_kv_heads(l == 2 ? 2 : 4);
    block->set_hidden(40);
  }
  model->mutable_layers(4)->mutable_rms_norm()->set_dim(16);
  OptimizerSpec* opt = spec.mutable_optimizer();
  opt->mutable_adamw()->set_lr(0.01f);
  opt->mutable_adamw()->set_weight_decay(0.1f);
  auto* group = opt->add_param_groups();
  group->add_kinds("norm");
  group->add_kinds("embedding");
  group->set_weight_decay(0);
  opt->set_clip_grad_norm(0.5f);
  const std::vector<double> local = LocalLosses(spec);
  const int64_t n = spec.max_steps();
  for (const auto& begin :
       {std::vector<int>{0, 3}, std::vector<int>{0, 2, 3, 4}}) {
    const Result got =
        RunPipeline(spec, Layout(v1::SCHEDULE_1F1B_FLUSH, begin,
                                 std::vector<int>(begin.size(), 1), n, 4, 6));
    ExpectLossesOfTrainLocal(got, local, 1e-5,
                             absl::StrCat("llama ", begin.size(), " stages"),
                             /*tied=*/false);
  }
}

// Data parallelism (JobSpec.data_parallel) --------------------------------

struct DataParallelCase {
  std::string what;
  std::string mode = "allreduce";
  double bucket_mb = 0.0001;  // ~26 floats: every layer a bucket.
  std::string reduce;
  bool shard_optimizer = false;
  std::string consistency;
  int staleness = 0;
  int shards = 0;
};

JobSpec WithDataParallel(JobSpec spec, const DataParallelCase& c) {
  v1::DataParallelSpec* d = spec.mutable_data_parallel();
  d->set_mode(c.mode);
  d->set_bucket_mb(c.bucket_mb);
  d->set_reduce(c.reduce);
  d->set_shard_optimizer(c.shard_optimizer);
  d->set_consistency(c.consistency);
  d->set_staleness(c.staleness);
  d->set_shards(c.shards);
  return spec;
}

// Every replica ends with the same weights.
void ExpectReplicasAgree(const Result& got, const PipelineLayout& layout,
                         const std::string& what) {
  for (int s = 0; s < layout.num_stages(); ++s) {
    for (int rank : layout.ranks[s]) {
      EXPECT_EQ(got.rank_weights[rank], got.rank_weights[layout.ranks[s][0]])
          << what << ": rank " << rank << " of stage " << s;
    }
  }
}

DataParallelCase AllReduceCase(std::string what, double bucket_mb,
                               std::string reduce, bool shard_optimizer) {
  DataParallelCase c;
  c.what = std::move(what);
  c.bucket_mb = bucket_mb;
  c.reduce = std::move(reduce);
  c.shard_optimizer = shard_optimizer;
  return c;
}

DataParallelCase ServerCase(std::string what, std::string consistency,
                            int staleness, int shards) {
  DataParallelCase c;
  c.what = std::move(what);
  c.mode = "parameter_server";
  c.consistency = std::move(consistency);
  c.staleness = staleness;
  c.shards = shards;
  return c;
}

const DataParallelCase kSynchronousModes[] = {
    AllReduceCase("bucketed all-reduce, overlapped", 0.0001, "", false),
    AllReduceCase("one bucket", 0, "", false),
    AllReduceCase("bucketed all-reduce after the backward", 0.0001, "after",
                  false),
    AllReduceCase("ZeRO-1", 0.0001, "", true),
    AllReduceCase("ZeRO-1 after the backward", 0.0001, "after", true),
    ServerCase("parameter server, a shard per replica", "", 0, 0),
    ServerCase("parameter server, 3 shards", "sync", 0, 3),
    ServerCase("bounded staleness 0", "bounded", 0, 2),
};

// Every synchronous mode on a replicated stage, on pure data parallelism
// (one stage, 4 replicas) and on the output stage replicated: losses within
// 1e-5 of train-local's, weights within 1e-5 of the flat all-reduce's (the
// way before buckets), every replica's weights the same.
TEST(PipelineTest, DataParallelModesEqualTrainLocal) {
  const JobSpec base = *ParseJobSpec(kMlp, "test");
  const std::vector<double> local = LocalLosses(base);
  const int64_t n = base.max_steps();
  const PipelineLayout layouts[] = {
      Layout(v1::SCHEDULE_1F1B_FLUSH, {0, 5}, {2, 1}, n, 4, 10),
      Layout(v1::SCHEDULE_1F1B_FLUSH, {0}, {4}, n, 4, 10),
      Layout(v1::SCHEDULE_GPIPE, {0, 5}, {1, 3}, n, 8, 10),
  };
  for (const PipelineLayout& layout : layouts) {
    const DataParallelCase flat = AllReduceCase("flat", 4096, "after", false);
    const Result want = RunPipeline(WithDataParallel(base, flat), layout);
    ASSERT_TRUE(want.status.ok()) << want.status;
    for (const DataParallelCase& c : kSynchronousModes) {
      const std::string what = absl::StrCat(
          c.what, " on ", layout.num_stages(), " stages of ",
          layout.ranks[0].size(), " and ", layout.ranks.back().size());
      const Result got = RunPipeline(WithDataParallel(base, c), layout);
      Result reference = want;
      reference.losses = local;
      ExpectClose(got, reference, 1e-5, what);
      ExpectReplicasAgree(got, layout, what);
    }
  }
}

// The GPT's embedding and head tied across two replicated stages: ZeRO-1
// all-reduces (a tied gradient must be whole) and the parameter server
// pushes the tied sums.
TEST(PipelineTest, GptTiedAcrossReplicatedStagesUnderEveryMode) {
  const JobSpec base = GptSpec(/*tied=*/true);
  const std::vector<double> local = LocalLosses(base);
  const PipelineLayout layout =
      Layout(v1::SCHEDULE_1F1B_FLUSH, {0, 3}, {2, 2}, base.max_steps(), 4, 6);
  const Result want = RunPipeline(base, layout);
  ASSERT_TRUE(want.status.ok()) << want.status;
  for (const DataParallelCase& c : kSynchronousModes) {
    const Result got = RunPipeline(WithDataParallel(base, c), layout);
    ExpectClose(got, want, 1e-5, c.what);
    ExpectLossesOfTrainLocal(got, local, 1e-5, c.what, /*tied=*/true);
    ExpectReplicasAgree(got, layout, c.what);
  }
}

double MeanOf(const std::vector<double>& v, size_t begin, size_t end) {
  double sum = 0;
  for (size_t i = begin; i < end; ++i) sum += v[i];
  return sum / static_cast<double>(end - begin);
}

JobSpec WithAdam(JobSpec spec) {
  spec.mutable_optimizer()->Clear();
  spec.mutable_optimizer()->mutable_adam()->set_lr(0.01f);
  return spec;
}

// ZeRO-1 and the parameter server keep 1/d of the optimizer state on each
// of d replicas (Adam: two floats per element, 4 replicas), every element
// once, and train as the all-reduce does.
TEST(PipelineTest, ShardedOptimizerStateIsOneOverDPerReplica) {
  const JobSpec base = WithAdam(*ParseJobSpec(kMlp, "test"));
  const PipelineLayout layout =
      Layout(v1::SCHEDULE_1F1B_FLUSH, {0}, {4}, base.max_steps(), 4, 10);
  const Result whole = RunPipeline(base, layout);
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  const int64_t unsharded = whole.rank_stats[0].optimizer_state_bytes;
  ASSERT_GT(unsharded, 0);
  for (const DataParallelCase& c :
       {AllReduceCase("ZeRO-1", 0, "", true),
        ServerCase("parameter server", "sync", 0, 0)}) {
    const Result got = RunPipeline(WithDataParallel(base, c), layout);
    ExpectClose(got, whole, 1e-5, c.what);
    int64_t total = 0;
    for (int r = 0; r < 4; ++r) {
      const int64_t bytes = got.rank_stats[r].optimizer_state_bytes;
      total += bytes;
      // A quarter, up to one element per tensor's rounding.
      EXPECT_NEAR(bytes, unsharded / 4, 2 * 4 * 8) << c.what << " rank " << r;
      EXPECT_EQ(whole.rank_stats[r].optimizer_state_bytes, unsharded);
    }
    EXPECT_EQ(total, unsharded) << c.what;
  }
}

// With one replica of four slowed 3x, the parameter server's staleness is
// what each consistency promises: none under sync, at most S under
// bounded (and bounded S = 0 gives sync's bits), some under async; the
// replicas end on the same weights and the loss falls.
TEST(PipelineTest, ParameterServerStalenessWithASlowReplica) {
  const JobSpec base = WithAdam(*ParseJobSpec(kMlp, "test"));
  const PipelineLayout layout =
      Layout(v1::SCHEDULE_1F1B_FLUSH, {0}, {4}, base.max_steps(), 4, 10);
  const OptionsTweak slow = [](int rank, PipelineStage::Options* o) {
    if (rank == 3) o->slowdown = 3.0;
  };
  auto run = [&](const std::string& consistency, int staleness) {
    const DataParallelCase c =
        ServerCase(consistency, consistency, staleness, 0);
    return RunPipeline(WithDataParallel(base, c), layout, DeviceSpec{}, false,
                       slow);
  };
  auto histogram = [](const Result& r) {
    std::vector<int64_t> total;
    for (const StageStats& s : r.rank_stats) {
      const auto& h = s.staleness_histogram;
      if (total.size() < h.size()) total.resize(h.size(), 0);
      for (size_t i = 0; i < h.size(); ++i) total[i] += h[i];
    }
    return total;
  };
  const int64_t pushes = 4 * 4 * base.max_steps();  // Shards x replicas.
  const Result sync = run("sync", 0);
  ASSERT_TRUE(sync.status.ok()) << sync.status;
  EXPECT_EQ(histogram(sync), std::vector<int64_t>{pushes});
  const Result bounded0 = run("bounded", 0);
  ASSERT_TRUE(bounded0.status.ok()) << bounded0.status;
  EXPECT_EQ(bounded0.losses, sync.losses);
  EXPECT_EQ(bounded0.rank_weights, sync.rank_weights);
  for (const auto& [consistency, s] :
       std::vector<std::pair<std::string, int>>{{"bounded", 2}, {"async", 0}}) {
    const Result got = run(consistency, s);
    ASSERT_TRUE(got.status.ok()) << consistency << ": " << got.status;
    const std::vector<int64_t> h = histogram(got);
    int64_t applied = 0;
    for (int64_t count : h) applied += count;
    EXPECT_EQ(applied, pushes) << consistency;
    if (consistency == "bounded") {
      EXPECT_LE(h.size(), static_cast<size_t>(s + 1)) << "stale beyond S";
    } else {
      EXPECT_GT(h.size(), 1u) << "async with a slow replica: some staleness";
    }
    ExpectReplicasAgree(got, layout, consistency);
    ASSERT_GE(got.losses.size(), 8u);
    EXPECT_LT(MeanOf(got.losses, got.losses.size() - 4, got.losses.size()),
              MeanOf(got.losses, 0, 4))
        << consistency << " trains";
  }
}

// A stop ends a replica waiting for its own parameter shard (a sync pull
// that waits for a replica that never pushes) long before the deadline,
// and the shard's service thread with it.
TEST(PipelineTest, StopEndsAWaitForTheParameterShard) {
  JobSpec spec = *ParseJobSpec(kMlp, "test");
  spec.mutable_data_parallel()->set_mode("parameter_server");
  auto job = ValidateJobSpec(spec);
  ASSERT_TRUE(job.ok()) << job.status();
  auto data = LoadData(spec.data(), FileAccess::Anywhere());
  auto hub = std::make_shared<InMemoryHub>(2);
  CpuDevice device(CpuDeviceOptions{1});
  InMemoryCommunicator comm(hub, 0);
  std::atomic<bool> stop{false};
  PipelineStage::Options options;
  options.timeout = absl::Seconds(60);
  options.stop = &stop;
  PipelineStage stage(job->model.get(), spec,
                      Layout(v1::SCHEDULE_1F1B_FLUSH, {0}, {2}, 12, 2, 10), 0,
                      0, &device, &comm, &data->train,
                      *InitParameters(*job->model, 0, 10, &device), options);
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(200));
    stop = true;
    comm.Abort();
  });
  const absl::Time start = absl::Now();
  const absl::Status s = stage.Run();
  stopper.join();
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled) << s;
  EXPECT_NE(s.message().find("parameter shard"), std::string::npos) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

// A weight tied across stages under the parameter server: the stages'
// replicas pair one to one (equal degrees), and not under async (each
// stage's shards would apply the pushes in their own order).
TEST(PipelineTest, ParameterServerRefusesTiesItCannotKeepEqual) {
  JobSpec spec = GptSpec(/*tied=*/true);
  spec.mutable_data_parallel()->set_mode("parameter_server");
  const Result uneven = RunPipeline(
      spec, Layout(v1::SCHEDULE_1F1B_FLUSH, {0, 3}, {2, 1}, 4, 4, 6));
  EXPECT_EQ(uneven.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(uneven.status.message().find("need as many replicas (2 and 1)"),
            std::string::npos)
      << uneven.status;
  spec.mutable_data_parallel()->set_consistency("async");
  const Result async = RunPipeline(
      spec, Layout(v1::SCHEDULE_1F1B_FLUSH, {0, 3}, {2, 2}, 4, 4, 6));
  EXPECT_EQ(async.status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(async.status.message().find("consistency \"async\""),
            std::string::npos)
      << async.status;
}
}  // namespace
}  // namespace aqueduct
