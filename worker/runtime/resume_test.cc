// Checkpoints and resume in one process (every rank a thread, an in-memory
// communicator): a run stopped at a checkpoint and resumed ends with final
// weights bit-identical to the same run uninterrupted (1F1B-flush, GPipe,
// train-local; same seed), within 1e-5 when resumed on a different number
// of stages; under 1F1B with weight stashing the checkpoint at version v
// equals the weights after the first v minibatches and the resumed run
// follows the documented restart semantics (the pipeline restarts empty at
// minibatch v: minibatch v + j at stage s uses version v + the stashing
// rule's version of j).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <map>
#include <thread>

#include "common/comm/in_memory.h"
#include "common/device/cpu_device.h"
#include "gtest/gtest.h"
#include "pipeline/weight_stash.h"
#include "worker/nn/spec.h"
#include "worker/nn/training_state.h"
#include "worker/nn/weights.h"
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
      train_samples: 96
      seed: 4
    }
  }
  optimizer {
    adam { lr: 0.01 }
    schedule {
      warmup_steps: 2
      cosine { final_fraction: 0.1 }
    }
  }
  batch_size: 16
  max_steps: 12
  seed: 9
)pb";

constexpr int64_t kCheckpointAt = 6;

// The whole model's training state, merged from stage files.
using State = SafetensorsFile;

void Merge(const State& part, State* whole) {
  for (const auto& [name, t] : part.tensors) whole->tensors[name] = t;
  for (const auto& [k, v] : part.metadata) whole->metadata[k] = v;
}

// The parameters of a training state ("layers.<i>.<param>"), without the
// optimizer's ("layers.<i>.<param>.<state>").
State ParametersOf(const State& state) {
  State out;
  for (const auto& [name, t] : state.tensors) {
    if (std::count(name.begin(), name.end(), '.') == 2) out.tensors[name] = t;
  }
  return out;
}

struct Outcome {
  absl::Status status;
  std::vector<std::vector<float>> weights;  // Every parameter, layer order.
  State checkpoint;                         // At kCheckpointAt, merged.
  // (stage, minibatch) -> weight version of its forward.
  std::map<std::pair<int, int64_t>, int64_t> forward_versions;
};

std::vector<float> HostOf(Device& device, const Tensor& t) {
  std::vector<float> v(t.numel());
  EXPECT_TRUE(device.CopyToHost(t, v.data()).ok());
  return v;
}

// Every stage on `replicas` consecutive ranks (flush and GPipe: 2
// microbatches per replica).
PipelineLayout Layout(Schedule policy, std::vector<int> begin, int64_t n,
                      int num_layers, int replicas = 1) {
  PipelineLayout l;
  l.policy = policy;
  l.layer_begin = begin;
  l.layer_begin.push_back(num_layers);
  const int S = static_cast<int>(begin.size());
  for (int s = 0; s < S; ++s) {
    std::vector<int> ranks;
    for (int r = 0; r < replicas; ++r) ranks.push_back(s * replicas + r);
    l.ranks.push_back(ranks);
    l.warmup_depth.push_back(S - s - 1);
  }
  l.num_minibatches = n;
  l.microbatches =
      policy == v1::SCHEDULE_1F1B_FLUSH || policy == v1::SCHEDULE_GPIPE
          ? 2 * replicas
          : 1;
  return l;
}

// One stage of RunPipeline, on its own thread.
struct StageRun {
  const JobSpec* spec;
  const Model* model;
  const PipelineLayout* layout;
  const Dataset* train;
  std::shared_ptr<InMemoryHub> hub;
  const State* restore;  // Null: from the start.
  int64_t first = 0;
};

void RunStage(const StageRun& in, int s, int r, absl::Mutex* mu, Outcome* run,
              std::vector<std::vector<std::vector<float>>>* stage_weights) {
  CpuDevice device(CpuDeviceOptions{1});
  const int rank = in.layout->ranks[s][r];
  InMemoryCommunicator comm(in.hub, rank);
  auto params = InitParameters(*in.model, in.layout->layer_begin[s],
                               in.layout->layer_begin[s + 1], &device);
  PipelineStage::Options options;
  options.timeout = absl::Seconds(20);
  options.first_minibatch = in.first;
  options.restore = in.restore;
  options.checkpoint_every = kCheckpointAt;
  options.on_checkpoint = [&](int64_t version, const ParameterSet& p,
                              const Optimizer& opt) -> absl::Status {
    auto state = ExportTrainingState(device, p, opt, {});
    if (!state.ok()) return state.status();
    absl::MutexLock lock(mu);
    EXPECT_EQ(version, kCheckpointAt);
    Merge(*state, &run->checkpoint);
    return absl::OkStatus();
  };
  options.on_event = [&](const StageEvent& e) {
    if (e.kind != OpKind::kForward) return;
    absl::MutexLock lock(mu);
    run->forward_versions[{s, e.minibatch}] = e.version;
  };
  PipelineStage stage(in.model, *in.spec, *in.layout, s, r, &device, &comm,
                      s == 0 ? in.train : nullptr, *params, options);
  absl::Status status = stage.Run();
  if (!status.ok()) in.hub->KillRank(rank);
  absl::MutexLock lock(mu);
  if (!status.ok() && run->status.ok()) run->status = status;
  if (r != 0) return;
  for (const Tensor& t : stage.params().tensors) {
    (*stage_weights)[s].push_back(HostOf(device, t));
  }
}

Outcome RunPipeline(const JobSpec& spec, const PipelineLayout& layout,
                    const State* restore = nullptr, int64_t first = 0) {
  auto job = ValidateJobSpec(spec);
  EXPECT_TRUE(job.ok()) << job.status();
  auto data = LoadData(spec.data(), FileAccess::Anywhere());
  const int S = layout.num_stages();
  int world = 0;
  for (const auto& ranks : layout.ranks)
    world += static_cast<int>(ranks.size());
  StageRun in{&spec,
              job->model.get(),
              &layout,
              &data->train,
              std::make_shared<InMemoryHub>(world),
              restore,
              first};
  absl::Mutex mu;
  Outcome run;
  std::vector<std::vector<std::vector<float>>> stage_weights(S);
  std::vector<std::thread> threads;
  for (int s = 0; s < S; ++s) {
    for (int r = 0; r < layout.Replicas(s); ++r) {
      threads.emplace_back(
          [&, s, r] { RunStage(in, s, r, &mu, &run, &stage_weights); });
    }
  }
  for (auto& t : threads) t.join();
  for (auto& w : stage_weights) {
    for (auto& t : w) run.weights.push_back(std::move(t));
  }
  return run;
}

void ExpectBitIdentical(const Outcome& got, const Outcome& want,
                        const std::string& what) {
  ASSERT_TRUE(got.status.ok()) << what << ": " << got.status;
  ASSERT_EQ(got.weights.size(), want.weights.size()) << what;
  for (size_t p = 0; p < want.weights.size(); ++p) {
    ASSERT_EQ(got.weights[p].size(), want.weights[p].size());
    EXPECT_EQ(std::memcmp(got.weights[p].data(), want.weights[p].data(),
                          want.weights[p].size() * sizeof(float)),
              0)
        << what << ": parameter " << p << " differs";
  }
}

void ExpectClose(const Outcome& got, const Outcome& want, double tolerance,
                 const std::string& what) {
  ASSERT_TRUE(got.status.ok()) << what << ": " << got.status;
  ASSERT_EQ(got.weights.size(), want.weights.size()) << what;
  for (size_t p = 0; p < want.weights.size(); ++p) {
    double diff = 0, norm = 0;
    for (size_t i = 0; i < want.weights[p].size(); ++i) {
      diff += std::pow(got.weights[p][i] - want.weights[p][i], 2);
      norm += std::pow(want.weights[p][i], 2);
    }
    EXPECT_LE(std::sqrt(diff), tolerance * std::sqrt(norm) + 1e-7)
        << what << ": parameter " << p;
  }
}

const std::vector<std::vector<int>> kSplits = {{0, 5}, {0, 2, 5, 8}};

TEST(ResumeTest, FlushAndGpipeResumeBitIdentical) {
  const JobSpec spec = *ParseJobSpec(kMlp, "test");
  const int layers = spec.model().layers_size();
  for (Schedule policy : {v1::SCHEDULE_1F1B_FLUSH, v1::SCHEDULE_GPIPE}) {
    for (const auto& split : kSplits) {
      const std::string what =
          absl::StrCat(ScheduleName(policy), " ", split.size(), " stages");
      const PipelineLayout layout =
          Layout(policy, split, spec.max_steps(), layers);
      const Outcome whole = RunPipeline(spec, layout);
      ASSERT_TRUE(whole.status.ok()) << what << ": " << whole.status;
      ASSERT_FALSE(whole.checkpoint.tensors.empty()) << what;
      const Outcome resumed =
          RunPipeline(spec, layout, &whole.checkpoint, kCheckpointAt);
      ExpectBitIdentical(resumed, whole, what + " resumed");
      // The same checkpoint on the other number of stages.
      const auto& other = split.size() == 2 ? kSplits[1] : kSplits[0];
      const Outcome moved =
          RunPipeline(spec, Layout(policy, other, spec.max_steps(), layers),
                      &whole.checkpoint, kCheckpointAt);
      ExpectClose(moved, whole, 1e-5,
                  absl::StrCat(what, " resumed on ", other.size(), " stages"));
    }
  }
}

JobSpec WithDataParallel(JobSpec spec, const std::string& mode,
                         bool shard_optimizer, int shards) {
  spec.mutable_data_parallel()->set_mode(mode);
  spec.mutable_data_parallel()->set_shard_optimizer(shard_optimizer);
  spec.mutable_data_parallel()->set_shards(shards);
  return spec;
}

// ZeRO-1's and the parameter server's checkpoints hold the whole state:
// the same tensors as the unsharded all-reduce's (within 1e-6; the
// sharded step's sums round alike), resumed bit-identical on the same
// degree and within 1e-5 on another degree or mode.
TEST(ResumeTest, ShardedStateCheckpointsWholeAndLoadsAtAnyDegree) {
  const JobSpec base = *ParseJobSpec(kMlp, "test");
  const int layers = base.model().layers_size();
  const int64_t n = base.max_steps();
  const Schedule flush = v1::SCHEDULE_1F1B_FLUSH;
  const Outcome plain =
      RunPipeline(base, Layout(flush, kSplits[0], n, layers, 2));
  ASSERT_TRUE(plain.status.ok()) << plain.status;
  struct Case {
    std::string what;
    JobSpec spec;
  };
  const Case cases[] = {
      {"ZeRO-1", WithDataParallel(base, "allreduce", true, 0)},
      {"parameter server",
       WithDataParallel(base, "parameter_server", false, 3)},
      {"parameter server, one shard",
       WithDataParallel(base, "parameter_server", false, 1)},
  };
  for (const Case& c : cases) {
    const PipelineLayout layout = Layout(flush, kSplits[0], n, layers, 2);
    const Outcome whole = RunPipeline(c.spec, layout);
    ASSERT_TRUE(whole.status.ok()) << c.what << ": " << whole.status;
    ASSERT_EQ(whole.checkpoint.tensors.size(), plain.checkpoint.tensors.size());
    for (const auto& [name, t] : plain.checkpoint.tensors) {
      const auto& got = whole.checkpoint.tensors.at(name);
      ASSERT_EQ(got.shape, t.shape) << c.what << " " << name;
      const float* a = reinterpret_cast<const float*>(got.data.data());
      const float* b = reinterpret_cast<const float*>(t.data.data());
      for (size_t i = 0; i < got.data.size() / 4; ++i) {
        ASSERT_NEAR(a[i], b[i], 1e-6 + 1e-5 * std::fabs(b[i]))
            << c.what << " " << name << "[" << i << "]";
      }
    }
    const Outcome resumed =
        RunPipeline(c.spec, layout, &whole.checkpoint, kCheckpointAt);
    ExpectBitIdentical(resumed, whole, c.what + " resumed");
    // On 4 replicas of 4 stages, and without data parallelism.
    const Outcome wider =
        RunPipeline(c.spec, Layout(flush, kSplits[1], n, layers, 4),
                    &whole.checkpoint, kCheckpointAt);
    ExpectClose(wider, whole, 1e-5, c.what + " resumed on 4 replicas");
    const Outcome single =
        RunPipeline(base, Layout(flush, kSplits[0], n, layers),
                    &whole.checkpoint, kCheckpointAt);
    ExpectClose(single, whole, 1e-5, c.what + " resumed on one replica");
  }
}

// An async parameter server's checkpoint counts its steps in minibatches
// (its shards' optimizers count one a push): it resumes under async, and
// in sync and all-reduce modes.
TEST(ResumeTest, AnAsyncCheckpointResumesInEveryMode) {
  const JobSpec base = *ParseJobSpec(kMlp, "test");
  const int layers = base.model().layers_size();
  const int64_t n = base.max_steps();
  JobSpec async = WithDataParallel(base, "parameter_server", false, 0);
  async.mutable_data_parallel()->set_consistency("async");
  const PipelineLayout layout =
      Layout(v1::SCHEDULE_1F1B_FLUSH, kSplits[0], n, layers, 2);
  const Outcome whole = RunPipeline(async, layout);
  ASSERT_TRUE(whole.status.ok()) << whole.status;
  ASSERT_FALSE(whole.checkpoint.tensors.empty());
  EXPECT_EQ(whole.checkpoint.metadata.at("optimizer_steps"),
            std::to_string(kCheckpointAt));
  for (const JobSpec& spec :
       {async, WithDataParallel(base, "parameter_server", false, 0), base}) {
    const Outcome resumed =
        RunPipeline(spec, layout, &whole.checkpoint, kCheckpointAt);
    EXPECT_TRUE(resumed.status.ok())
        << spec.data_parallel().ShortDebugString() << ": " << resumed.status;
  }
}

TEST(ResumeTest, TrainLocalResumesBitIdentical) {
  const JobSpec spec = *ParseJobSpec(kMlp, "test");
  CpuDevice device(CpuDeviceOptions{1});
  State checkpoint;
  LocalTrainOptions options;
  options.evaluate = false;
  options.export_model = true;
  options.checkpoint_every = kCheckpointAt;
  options.on_checkpoint = [&](int64_t version, const ParameterSet& p,
                              const Optimizer& opt) -> absl::Status {
    EXPECT_EQ(version, kCheckpointAt);
    auto state = ExportTrainingState(device, p, opt, {});
    if (!state.ok()) return state.status();
    checkpoint = *std::move(state);
    return absl::OkStatus();
  };
  auto whole = TrainLocal(spec, &device, options);
  ASSERT_TRUE(whole.ok()) << whole.status();
  ASSERT_FALSE(checkpoint.tensors.empty());
  LocalTrainOptions resume;
  resume.evaluate = false;
  resume.export_model = true;
  resume.restore = &checkpoint;
  resume.first_step = kCheckpointAt;
  auto resumed = TrainLocal(spec, &device, resume);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  EXPECT_EQ(resumed->losses.size(), spec.max_steps() - kCheckpointAt);
  for (size_t i = 0; i < resumed->losses.size(); ++i) {
    EXPECT_EQ(resumed->losses[i], whole->losses[kCheckpointAt + i]) << i;
  }
  ASSERT_EQ(resumed->model->tensors.size(), whole->model->tensors.size());
  for (const auto& [name, t] : whole->model->tensors) {
    EXPECT_EQ(resumed->model->tensors.at(name).data, t.data) << name;
  }
  // A pipeline of 2 stages resumed from the single process's checkpoint
  // (1F1B-flush: same semantics) ends like the single process.
  const PipelineLayout layout =
      Layout(v1::SCHEDULE_1F1B_FLUSH, kSplits[0], spec.max_steps(),
             spec.model().layers_size());
  const Outcome moved = RunPipeline(spec, layout, &checkpoint, kCheckpointAt);
  ASSERT_TRUE(moved.status.ok()) << moved.status;
  Outcome local;
  auto job = ValidateJobSpec(spec);
  auto params =
      InitParameters(*job->model, 0, spec.model().layers_size(), &device);
  ASSERT_TRUE(ImportParameters(*whole->model, device, *params).ok());
  for (const Tensor& t : params->tensors) {
    local.weights.push_back(HostOf(device, t));
  }
  ExpectClose(moved, local, 1e-5, "train-local checkpoint on 2 stages");
}

// checkpoint.every_seconds: a checkpoint at the version the coordinator
// picked, besides (or without) every_steps.
TEST(ResumeTest, ACheckpointAtTheVersionAskedFor) {
  const JobSpec spec = *ParseJobSpec(kMlp, "test");
  CpuDevice device(CpuDeviceOptions{1});
  std::atomic<int64_t> at{5};
  std::vector<int64_t> versions;
  LocalTrainOptions options;
  options.evaluate = false;
  options.checkpoint_at = &at;
  options.on_checkpoint = [&](int64_t version, const ParameterSet&,
                              const Optimizer& opt) -> absl::Status {
    versions.push_back(version);
    EXPECT_EQ(opt.steps(), version);
    return absl::OkStatus();
  };
  ASSERT_TRUE(TrainLocal(spec, &device, options).ok());
  EXPECT_EQ(versions, std::vector<int64_t>{5});
  options.checkpoint_every = 4;
  versions.clear();
  ASSERT_TRUE(TrainLocal(spec, &device, options).ok());
  EXPECT_EQ(versions, (std::vector<int64_t>{4, 5, 8}));
}

TEST(ResumeTest, StashedCheckpointAndRestartSemantics) {
  const JobSpec spec = *ParseJobSpec(kMlp, "test");
  const int layers = spec.model().layers_size();
  // A constant learning rate, so that a job of kCheckpointAt steps trains
  // its minibatches exactly as the longer one does.
  JobSpec constant = spec;
  constant.mutable_optimizer()->clear_schedule();
  JobSpec shorter = constant;
  shorter.set_max_steps(kCheckpointAt);
  for (Schedule policy :
       {v1::SCHEDULE_1F1B_STASHED, v1::SCHEDULE_1F1B_VERTICAL_SYNC}) {
    const PipelineLayout layout =
        Layout(policy, kSplits[1], constant.max_steps(), layers);
    const std::string what = ScheduleName(policy);
    const Outcome whole = RunPipeline(constant, layout);
    ASSERT_TRUE(whole.status.ok()) << what << ": " << whole.status;
    // The checkpoint at v holds each stage's weights after its update for
    // minibatch v - 1: those a job of v minibatches ends with.
    const Outcome first_part =
        RunPipeline(shorter, Layout(policy, kSplits[1], kCheckpointAt, layers));
    ASSERT_TRUE(first_part.status.ok()) << first_part.status;
    auto job = ValidateJobSpec(constant);
    CpuDevice device(CpuDeviceOptions{1});
    auto params = InitParameters(*job->model, 0, layers, &device);
    ASSERT_TRUE(
        ImportParameters(ParametersOf(whole.checkpoint), device, *params).ok());
    for (size_t p = 0; p < params->tensors.size(); ++p) {
      EXPECT_EQ(HostOf(device, params->tensors[p]), first_part.weights[p])
          << what << " parameter " << p;
    }
    // Resumed: the pipeline restarts empty at minibatch v.
    const Outcome resumed =
        RunPipeline(constant, layout, &whole.checkpoint, kCheckpointAt);
    ASSERT_TRUE(resumed.status.ok()) << what << ": " << resumed.status;
    const int S = layout.num_stages();
    // (Stage events carry the stage's newest version, which is the version
    // a forward uses under 1f1b_stashed; vertical sync forwards stage 0's.)
    for (int s = 0; s < S && policy == v1::SCHEDULE_1F1B_STASHED; ++s) {
      for (int64_t m = kCheckpointAt; m < constant.max_steps(); ++m) {
        const int64_t want =
            kCheckpointAt +
            WeightVersionFor(policy, s, S, layout.warmup_depth[s],
                             layout.warmup_depth[0], m - kCheckpointAt);
        EXPECT_EQ(resumed.forward_versions.at({s, m}), want)
            << what << " stage " << s << " minibatch " << m;
      }
      EXPECT_EQ(resumed.forward_versions.count({s, kCheckpointAt - 1}), 0u);
    }
    // And it is deterministic.
    const Outcome again =
        RunPipeline(constant, layout, &whole.checkpoint, kCheckpointAt);
    ExpectBitIdentical(again, resumed, what + " resumed twice");
  }
}

}  // namespace
}  // namespace aqueduct
