// Schedule efficiency with the Delay layer: 4 stage workers (threads, an
// in-memory communicator), each stage one Delay layer (forward 5 ms,
// backward 10 ms) behind a tiny Linear. Reports, per policy, the steady
// state time per minibatch against the analytic bound: 1F1B runs one
// minibatch per max stage time (15 ms); flush and GPipe with m microbatches
// and p stages lose the bubble fraction (p-1)/(m+p-1).
//
//   schedule_bench [--minibatches 96] [--microbatches 8]
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/comm/in_memory.h"
#include "common/device/cpu_device.h"
#include "worker/nn/spec.h"
#include "worker/runtime/pipeline_stage.h"

namespace aqueduct {
namespace {

constexpr double kForwardMs = 5, kBackwardMs = 10;
constexpr int kStages = 4;

JobSpec Spec(int64_t minibatches) {
  std::string layers = "layers { flatten {} }";
  for (int s = 0; s < kStages; ++s) {
    absl::StrAppend(&layers,
                    " layers { linear { in_features: 8 out_features: 8 } }",
                    " layers { delay { forward_ms: ", kForwardMs,
                    " backward_ms: ", kBackwardMs, " } }");
  }
  const std::string text = absl::StrCat(
      "model { ", layers,
      " } data { synthetic { sample_shape: [8] num_classes: 8 "
      "train_samples: 8192 seed: 1 } } optimizer { sgd { lr: 0.01 } } "
      "batch_size: 16 max_steps: ",
      minibatches, " seed: 1");
  return *ParseJobSpec(text, "bench");
}

// Runs the pipeline; returns the end times of the last stage's steps.
std::vector<absl::Time> Run(Policy policy, int64_t minibatches, int micro) {
  const JobSpec spec = Spec(minibatches);
  auto job = ValidateJobSpec(spec);
  auto data = LoadData(spec.data());
  PipelineLayout layout;
  layout.policy = policy;
  for (int s = 0; s < kStages; ++s) {
    // Stage 0 also holds the flatten layer.
    layout.layer_begin.push_back(s == 0 ? 0 : 1 + 2 * s);
    layout.ranks.push_back({s});
    layout.warmup_depth.push_back(kStages - s - 1);
  }
  layout.layer_begin.push_back(1 + 2 * kStages);
  layout.num_minibatches = minibatches;
  layout.microbatches = micro;
  auto hub = std::make_shared<InMemoryHub>(kStages);
  absl::Mutex mu;
  std::vector<absl::Time> steps;
  std::vector<std::thread> threads;
  for (int s = 0; s < kStages; ++s) {
    threads.emplace_back([&, s] {
      CpuDevice device(CpuDeviceOptions{1});
      InMemoryCommunicator comm(hub, s);
      PipelineStage::Options options;
      if (s == kStages - 1) {
        options.on_event = [&](const StageEvent& e) {
          if (e.kind == OpKind::kOptimizerStep) {
            absl::MutexLock lock(&mu);
            steps.push_back(e.end);
          }
        };
      }
      PipelineStage stage(job->model.get(), spec, layout, s, 0, &device, &comm,
                          &data->train,
                          *InitParameters(*job->model, layout.layer_begin[s],
                                          layout.layer_begin[s + 1], &device),
                          options);
      const absl::Status status = stage.Run();
      if (!status.ok()) std::fprintf(stderr, "%s\n", status.ToString().c_str());
    });
  }
  for (auto& t : threads) t.join();
  std::sort(steps.begin(), steps.end());
  return steps;
}

// Median gap between consecutive steps over the middle of the run.
double SteadyMsPerMinibatch(const std::vector<absl::Time>& steps) {
  const size_t skip = steps.size() / 8;
  std::vector<double> gaps;
  for (size_t i = skip + 1; i + skip < steps.size(); ++i) {
    gaps.push_back(absl::ToDoubleMilliseconds(steps[i] - steps[i - 1]));
  }
  std::sort(gaps.begin(), gaps.end());
  return gaps.empty() ? 0 : gaps[gaps.size() / 2];
}

int Main(int argc, char** argv) {
  int64_t minibatches = 96;
  int micro = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--minibatches")
      (void)absl::SimpleAtoi(argv[i + 1], &minibatches);
    if (flag == "--microbatches") (void)absl::SimpleAtoi(argv[i + 1], &micro);
  }
  const double stage_ms = kForwardMs + kBackwardMs;
  {
    const double ms =
        SteadyMsPerMinibatch(Run(Policy::kOneFOneBStashed, minibatches, 1));
    std::printf(
        "{\"policy\":\"1f1b_stashed\",\"stages\":%d,\"minibatches\":%lld,"
        "\"steady_ms_per_minibatch\":%.3f,\"bound_ms\":%.1f,"
        "\"efficiency\":%.4f}\n",
        kStages, static_cast<long long>(minibatches), ms, stage_ms,
        stage_ms / ms);
  }
  for (Policy policy : {Policy::kOneFOneBFlush, Policy::kGpipe}) {
    const int64_t n = std::max<int64_t>(8, minibatches / micro);
    const double ms = SteadyMsPerMinibatch(Run(policy, n, micro));
    const double ideal = micro * stage_ms;
    const double bubble = 1.0 - ideal / ms;
    const double predicted =
        static_cast<double>(kStages - 1) / (micro + kStages - 1);
    std::printf(
        "{\"policy\":\"%s\",\"stages\":%d,\"microbatches\":%d,"
        "\"minibatches\":%lld,\"steady_ms_per_minibatch\":%.3f,"
        "\"bubble\":%.4f,\"predicted_bubble\":%.4f,\"difference_points\":%.2f}"
        "\n",
        PolicyName(policy), kStages, micro, static_cast<long long>(n), ms,
        bubble, predicted, 100 * (bubble - predicted));
  }
  return 0;
}

}  // namespace
}  // namespace aqueduct

int main(int argc, char** argv) { return aqueduct::Main(argc, argv); }
